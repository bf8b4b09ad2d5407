// Package app wires the service together: it builds every part from the
// configuration with explicit constructors, serves HTTP and shuts down in
// order. Nothing else in the service reads the environment.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/httpapi"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/tenants"
)

// App is a running service: its pool and its HTTP handler.
type App struct {
	cfg     Config
	logger  *slog.Logger
	pool    *pgxpool.Pool
	handler http.Handler
	// Tenants is exposed for the CLI and tests.
	Tenants *tenants.Service
}

// New connects to the database, applies migrations (unless disabled), seeds
// the demo tenants in demo mode, and builds the HTTP handler.
func New(ctx context.Context, cfg Config, logger *slog.Logger, now func() time.Time) (*App, error) {
	if cfg.AutoMigrate {
		if err := postgres.Migrate(cfg.DatabaseURL); err != nil {
			return nil, err
		}
	}
	pool, err := postgres.Open(ctx, cfg.DatabaseURL, postgres.PoolConfig{
		MaxConns:    cfg.DBMaxConns,
		LockTimeout: cfg.DBLockTimeout,
	})
	if err != nil {
		return nil, err
	}
	tenantSvc := tenants.NewService(pool, cfg.AuthCacheTTL, now)
	if cfg.DemoMode {
		if err := tenantSvc.SeedDemo(ctx); err != nil {
			pool.Close()
			return nil, err
		}
	}
	idem := idempotency.NewStore(idempotency.DefaultPolicy(), cfg.IdempotencyLease, now)
	orderSvc := orders.NewService(pool, idem, logger, now, cfg.WriteTimeout)
	handler := httpapi.New(httpapi.Deps{
		Logger:  logger,
		Pool:    pool,
		Tenants: tenantSvc,
		Orders:  orders.NewHandler(orderSvc),
		Events:  outbox.NewHandler(pool),
	})
	return &App{cfg: cfg, logger: logger, pool: pool, handler: handler, Tenants: tenantSvc}, nil
}

// Handler returns the HTTP handler.
func (a *App) Handler() http.Handler { return a.handler }

// Pool returns the database pool.
func (a *App) Pool() *pgxpool.Pool { return a.pool }

// Close releases the pool. Call it after Serve returned.
func (a *App) Close() { a.pool.Close() }

// Serve serves HTTP on ln until ctx is cancelled, then shuts down gracefully:
// it stops accepting, lets in-flight requests finish (at most
// ShutdownTimeout), and returns.
func (a *App) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler: a.handler,
		// Slow clients must not hold connections forever; writes get more
		// time than reads because a started write runs to its end anyway.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      a.cfg.WriteTimeout + 5*time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(a.logger.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	a.logger.Info("shutting down: draining in-flight requests", "timeout", a.cfg.ShutdownTimeout)
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
