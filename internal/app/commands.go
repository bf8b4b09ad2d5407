package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/retention"
	"github.com/oncepay/oncepay/internal/tenants"
	"github.com/oncepay/oncepay/internal/webhooks"
)

// The operator commands (api tenants create, api sweep, api outbox ...)
// build only what they need from here: a pool and their one service. None
// of them listens, calls the provider or connects to the broker, so each
// runs against a database alone, whatever else the service is configured
// with. New builds the running service from the same builders.

// OpenDatabase applies pending migrations (unless cfg.AutoMigrate is off)
// and opens the pool.
func OpenDatabase(ctx context.Context, cfg Config) (*pgxpool.Pool, error) {
	return openDatabase(ctx, cfg, nil)
}

// openDatabase is OpenDatabase with a query tracer (nil: none).
func openDatabase(ctx context.Context, cfg Config, tracer pgx.QueryTracer) (*pgxpool.Pool, error) {
	if cfg.AutoMigrate {
		if err := postgres.Migrate(cfg.DatabaseURL); err != nil {
			return nil, err
		}
	}
	return postgres.Open(ctx, cfg.DatabaseURL, postgres.PoolConfig{
		MaxConns:    cfg.DBMaxConns,
		LockTimeout: cfg.DBLockTimeout,
		Tracer:      tracer,
	})
}

// NewTenants returns the tenants service: tenants, API keys, authentication.
func NewTenants(pool *pgxpool.Pool, cfg Config, now func() time.Time) *tenants.Service {
	return tenants.NewService(pool, now, tenants.WithCacheTTL(cfg.AuthCacheTTL))
}

// newStore returns the idempotency store of every registered operation.
func newStore(cfg Config, now func() time.Time, opts ...idempotency.StoreOption) *idempotency.Store {
	opts = append([]idempotency.StoreOption{idempotency.WithLease(cfg.IdempotencyLease)}, opts...)
	return idempotency.NewStore(cfg.Retention.Idempotency, now, opts...)
}

// NewSweeper returns the retention sweeper over every kind of record, each
// deleted by the package that owns its table. It refuses a retention shorter
// than a horizon it must cover.
func NewSweeper(pool *pgxpool.Pool, cfg Config, logger *slog.Logger, now func() time.Time, opts ...retention.SweeperOption) (*retention.Sweeper, error) {
	return newSweeper(pool, cfg, newStore(cfg, now), logger, now, opts...)
}

func newSweeper(pool *pgxpool.Pool, cfg Config, store *idempotency.Store, logger *slog.Logger, now func() time.Time, opts ...retention.SweeperOption) (*retention.Sweeper, error) {
	if err := retention.Check(cfg.Retention, cfg.Horizons, covers(Operations())); err != nil {
		return nil, fmt.Errorf("refusing to start: %w", err)
	}
	opts = append([]retention.SweeperOption{retention.WithBatchSize(cfg.SweepBatch), retention.WithDutyCycle(cfg.SweepDutyCycle)}, opts...)
	return retention.NewSweeper(pool, retention.Tables{
		Idempotency:       store.DeleteExpired,
		PublishedEvents:   outbox.DeleteExpired,
		WebhookReceipts:   webhooks.DeleteExpired,
		ProcessedMessages: inbox.DeleteExpired,
		CountStuck:        store.CountStuck,
	}, cfg.Retention, logger, now, opts...), nil
}
