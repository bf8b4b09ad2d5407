package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/oncepay/oncepay/internal/postgres"
)

// Start serves HTTP at once and brings the service up: it waits for the
// database and the broker together, retrying each with backoff and logging
// every retry; once the database answers it applies the migrations
// (AUTO_MIGRATE), seeds the demo tenants in demo mode and builds every part,
// and from then on the API answers. Until then /healthz answers 200 and
// every other path, /readyz too, 503 service_unavailable (httpapi.Starting).
// All of it must happen within StartupTimeout. Past it, or when a
// dependency refuses us for good (a role or database that does not exist,
// a broker that rejects our credentials), Start stops serving, releases what
// it opened and returns one line that says what never came. Serve runs the
// workers.
func (a *App) Start(ctx context.Context) (err error) {
	a.srv = a.httpServer(a.handler)
	a.served = make(chan error, 1)
	go func() { a.served <- a.srv.Serve(a.ln) }()
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	ctx, cancel := context.WithTimeoutCause(ctx, a.cfg.Tuning.StartupTimeout, errStartupTimeout)
	defer cancel()
	if err := a.connect(ctx); err != nil {
		return err
	}
	if a.cfg.AutoMigrate {
		if err := postgres.Migrate(ctx, a.cfg.DatabaseURL, a.logger); err != nil {
			return err
		}
	}
	if err := a.build(ctx); err != nil {
		if errors.Is(context.Cause(ctx), errStartupTimeout) {
			return fmt.Errorf("not ready within the startup timeout (tuning StartupTimeout, %s): %w", a.cfg.Tuning.StartupTimeout, err)
		}
		return err
	}
	a.handler.serve(a.api)
	return nil
}

// Serve runs the background workers, beside the API that Start serves,
// until ctx is cancelled, then shuts down in order: stop accepting and drain
// in-flight requests (at most ShutdownTimeout), then stop the workers (at
// most ShutdownTimeout again; workers still running then are reported and
// left to their own bounds). Work cut off by the shutdown is safe: it is
// either committed or resumed by a retry or by the recoverer of another
// process. Every request and every worker round is bounded (WriteTimeout),
// so a dependency that never answers cannot hold the shutdown, nor Close
// after it. Call it after Start returned nil.
func (a *App) Serve(ctx context.Context) error {
	srv, errc := a.srv, a.served
	workers, stopWorkers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWorkers()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		running = map[string]bool{}
	)
	run := func(name string, fn func(context.Context) error) {
		wg.Add(1)
		mu.Lock()
		running[name] = true
		mu.Unlock()
		go func() {
			defer wg.Done()
			defer func() {
				mu.Lock()
				delete(running, name)
				mu.Unlock()
			}()
			if err := fn(workers); err != nil && !errors.Is(err, context.Canceled) {
				a.logger.Error("worker stopped", "worker", name, "error", err.Error())
			}
		}()
	}
	run("webhooks-worker", func(ctx context.Context) error { return a.webhookWorker.Run(ctx, a.cfg.Tuning.WebhookWorkerInterval) })
	if a.dispatcher != nil {
		run("outbox-dispatcher", a.dispatcher.Run)
	}
	if a.fulfillment != nil {
		run("fulfillment", a.fulfillment.Run)
	}
	if a.cfg.SweepInterval > 0 {
		run("retention-sweeper", func(ctx context.Context) error { return a.sweeper.Run(ctx, a.cfg.SweepInterval) })
	}
	if a.cfg.Tuning.RecovererInterval > 0 {
		run("recoverer", func(ctx context.Context) error { return a.recoverer.Run(ctx, a.cfg.Tuning.RecovererInterval) })
	}

	var serveErr error
	select {
	case serveErr = <-errc:
	case <-ctx.Done():
	}
	a.logger.Info("shutting down: draining in-flight requests", "timeout", a.cfg.Tuning.ShutdownTimeout)
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.Tuning.ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	if err != nil {
		err = fmt.Errorf("drain API requests: %w", err)
	}
	stopWorkers()
	stopped := make(chan struct{})
	go func() {
		wg.Wait()
		close(stopped)
	}()
	workersDeadline := time.NewTimer(a.cfg.Tuning.ShutdownTimeout)
	defer workersDeadline.Stop()
	select {
	case <-stopped:
	case <-workersDeadline.C:
		mu.Lock()
		names := slices.Sorted(maps.Keys(running))
		mu.Unlock()
		err = errors.Join(err, fmt.Errorf("background workers still running %s after they were told to stop: %s", a.cfg.Tuning.ShutdownTimeout, strings.Join(names, ", ")))
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(fmt.Errorf("serve: %w", serveErr), err)
	}
	return err
}

// readHeaderTimeout bounds the headers of any request; a connection that
// waits for them at MaxConnections is closed sooner (Tuning.ReclaimAfter).
const readHeaderTimeout = 5 * time.Second

func (a *App) httpServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler: h,
		// Slow clients must not hold connections forever; writes get more
		// time than reads because a started write runs to its end anyway.
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       a.cfg.Tuning.ReadTimeout,
		WriteTimeout:      a.cfg.WriteTimeout + 5*time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		// The limiter learns which connections wait for their client
		// (idle, without their headers, or without a request's body), to
		// close the one that waited longest when a new client finds every
		// slot taken.
		ConnState:   a.conns.ConnState,
		ConnContext: a.conns.ConnContext,
		// "OPTIONS *" reaches the handler (and its problem+json 404)
		// instead of net/http's own empty 200.
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     slog.NewLogLogger(a.logger.Handler(), slog.LevelWarn),
	}
}
