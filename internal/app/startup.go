package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/oncepay/oncepay/internal/broker"
	"github.com/oncepay/oncepay/internal/postgres"
)

// How api serve waits for a dependency at startup (Start): the first retry
// comes soon, since a container that has just started often answers within
// a second; the pause doubles up to retryMax, so a long outage costs a log
// line every few seconds, not a busy loop. attemptTimeout bounds one
// attempt, so a peer that accepts and never answers is tried again rather
// than waited for until the deadline.
const (
	retryMin       = 250 * time.Millisecond
	retryMax       = 5 * time.Second
	attemptTimeout = 5 * time.Second
)

// errStartupTimeout is the cause of Start's context when StartupTimeout
// has passed.
var errStartupTimeout = errors.New("the startup timeout passed")

// dependency is what Start waits for.
type dependency string

const (
	depDatabase dependency = "database"
	depBroker   dependency = "nats"
)

// String names the dependency, and the variable that configures it, for a
// person reading the error or the /readyz detail.
func (d dependency) String() string {
	if d == depDatabase {
		return "the database (DATABASE_URL)"
	}
	return "NATS (NATS_URL)"
}

// connect waits for the database and the broker at the same time, so that
// when neither answers the error names both. A dependency that refuses us
// for good ends the other's wait too: the start has failed anyway.
func (a *App) connect(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var dbErr, brokerErr error
	wg.Go(func() {
		if dbErr = a.connectDatabase(ctx); dbErr != nil {
			cancel()
		}
	})
	wg.Go(func() {
		if brokerErr = a.connectBroker(ctx); brokerErr != nil {
			cancel()
		}
	})
	wg.Wait()
	return startupError(a.cfg.Tuning.StartupTimeout, dbErr, brokerErr)
}

// connectDatabase opens the pool once the database answers a ping.
func (a *App) connectDatabase(ctx context.Context) error {
	return a.waitFor(ctx, depDatabase, func(ctx context.Context) error {
		pool, err := postgres.Open(ctx, a.cfg.DatabaseURL, postgres.PoolConfig{
			MaxConns:    a.cfg.DBMaxConns,
			LockTimeout: a.cfg.Tuning.DBLockTimeout,
			Tracer:      a.dbTracer,
		})
		if postgres.IsRejected(err) {
			return permanent(err) // it answered, and refused us: waiting will not change that
		}
		a.pool = pool
		return err
	})
}

// waitFor calls try until it succeeds, fails for good (permanent), or ctx
// ends, pausing between attempts with a doubling backoff. Every failed
// attempt is logged with what it waits for and why.
func (a *App) waitFor(ctx context.Context, dep dependency, try func(context.Context) error) error {
	pause := retryMin
	var last error
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		err := try(actx)
		cancel()
		if err != nil && ctx.Err() != nil && last != nil {
			err = last // cut off by the end of the start: the attempt before says why
		}
		last = err
		if err == nil {
			a.answered(dep)
			if attempt > 1 {
				a.logger.Info("startup: dependency answered", "dependency", string(dep), "attempts", attempt)
			}
			return nil
		}
		var p *permanentError
		if errors.As(err, &p) {
			if p.setup {
				return p.err
			}
			return fmt.Errorf("%s refused the connection: %w", dep, p.err)
		}
		if ctx.Err() != nil {
			return &notAnswered{dep: dep, last: err, cause: context.Cause(ctx)}
		}
		a.logger.Warn("startup: waiting for a dependency", "dependency", string(dep),
			"attempt", attempt, "retry_in", pause, "error", err.Error())
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return &notAnswered{dep: dep, last: err, cause: context.Cause(ctx)}
		case <-t.C:
		}
		pause = min(2*pause, retryMax)
	}
}

// answered records that dep answered, for waitingFor.
func (a *App) answered(dep dependency) {
	if dep == depDatabase {
		a.dbAnswered.Store(true)
	} else {
		a.brokerAnswered.Store(true)
	}
}

// waitingFor says what Start still waits for: the detail of the starting
// service's 503 answers.
func (a *App) waitingFor() string {
	db, broker := a.dbAnswered.Load(), a.brokerAnswered.Load()
	switch {
	case !db && !broker:
		return "the database and NATS"
	case !db:
		return "the database"
	case !broker:
		return "NATS"
	}
	return "its migrations and setup"
}

// permanentError marks an attempt that must not be repeated: the
// dependency refused us, or (setup) what it answered will not change.
type permanentError struct {
	err   error
	setup bool
}

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

func permanent(err error) error { return &permanentError{err: err} }

// permanentSetup marks a setup step's error (declaring a stream, say) that
// a retry will not mend; it is returned as it is.
func permanentSetup(err error) error { return &permanentError{err: err, setup: true} }

// notAnswered is a dependency that had not answered when Start's context
// ended, with the error of its last attempt.
type notAnswered struct {
	dep   dependency
	last  error
	cause error // errStartupTimeout, or why else the start was cancelled
}

func (e *notAnswered) Error() string {
	return fmt.Sprintf("%s never answered (last error: %s)", e.dep, oneLine(e.last.Error()))
}

func (e *notAnswered) Unwrap() []error { return []error{e.cause, e.last} }

// startupError turns the results of connect's waits into its one error: a
// dependency that refused us names only itself (the other's wait was cut
// short because of it); past the deadline, every dependency that never
// answered is named, on one line.
func startupError(timeout time.Duration, errs ...error) error {
	var missing []string
	for _, err := range errs {
		var na *notAnswered
		switch {
		case err == nil:
		case !errors.As(err, &na):
			return err
		case errors.Is(na.cause, errStartupTimeout):
			missing = append(missing, na.Error())
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("gave up after the startup timeout (tuning StartupTimeout, %s): %s", timeout, strings.Join(missing, "; "))
	}
	for _, err := range errs {
		if err != nil {
			return err // cancelled from outside: a signal during the start
		}
	}
	return nil
}

// oneLine joins the lines of a multi-line error message (errors.Join), so
// the startup error stays one line.
func oneLine(s string) string { return strings.ReplaceAll(s, "\n", "; ") }

// switchHandler serves one handler, then, from the moment serve is called,
// another: the starting answers until Start has built the API.
type switchHandler struct{ h atomic.Pointer[http.Handler] }

func newSwitchHandler(h http.Handler) *switchHandler {
	s := &switchHandler{}
	s.serve(h)
	return s
}

func (s *switchHandler) serve(h http.Handler) { s.h.Store(&h) }

func (s *switchHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.h.Load()).ServeHTTP(w, r)
}

// parseDatabaseURL rejects a DATABASE_URL that can never connect before
// anything waits for it.
func parseDatabaseURL(url string) error {
	if _, err := pgxpool.ParseConfig(url); err != nil {
		return fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	return nil
}

// connectBroker connects the broker (embedding one unless NATS_URL is
// set), retrying a NATS_URL that does not answer yet until ctx ends.
func (a *App) connectBroker(ctx context.Context) error {
	cfg, logger := a.cfg, a.logger
	natsURL := cfg.NATSURL
	if natsURL == "" {
		var err error
		if a.nats, err = broker.StartEmbedded(cfg.NATSStoreDir, logger.With("component", "nats")); err != nil {
			return err
		}
		natsURL = a.nats.ClientURL()
	}
	return a.waitFor(ctx, depBroker, func(context.Context) error {
		nc, js, err := broker.Connect(natsURL, "oncepay-api", logger.With("component", "nats"), broker.WithPingInterval(cfg.Tuning.NATSPingInterval))
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
			return permanent(err) // it answered, and refused us: waiting will not change that
		}
		a.nc, a.js = nc, js
		return err
	})
}
