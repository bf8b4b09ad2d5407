package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/attention"
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
	if cfg.AutoMigrate {
		if err := postgres.Migrate(ctx, cfg.DatabaseURL, nil); err != nil {
			return nil, err
		}
	}
	return postgres.Open(ctx, cfg.DatabaseURL, postgres.PoolConfig{
		MaxConns:    cfg.DBMaxConns,
		LockTimeout: cfg.Tuning.DBLockTimeout,
	})
}

// NewTenants returns the tenants service: tenants, API keys, authentication.
// It accepts the public demo keys in demo mode only.
func NewTenants(pool *pgxpool.Pool, cfg Config, now func() time.Time) *tenants.Service {
	return tenants.NewService(pool, now, tenants.WithCacheTTL(cfg.Tuning.AuthCacheTTL), tenants.WithDemoKeys(cfg.DemoMode))
}

// CheckNoDemoKeys refuses a database in which the public demo keys still
// work when the service is not in demo mode: a database seeded in demo mode
// and now served for real. The service would refuse those keys anyway
// (tenants.WithDemoKeys), but starting would hide that the database holds
// demo tenants whose keys anyone knows; the operator decides, in one
// command, and nothing changes credentials behind their back.
func CheckNoDemoKeys(ctx context.Context, cfg Config, svc *tenants.Service) error {
	if cfg.DemoMode {
		return nil
	}
	live, err := svc.LiveDemoKeys(ctx)
	if err != nil {
		return err
	}
	if len(live) == 0 {
		return nil
	}
	return fmt.Errorf("refusing to start: this database was seeded in demo mode and its public demo keys still work; revoke them with `api keys revoke %s` (or serve a fresh database)",
		strings.Join(live, " "))
}

// NewAttentionAdmin returns the operator's actions on the needs-attention
// queue; resolving an item as retried releases its held attempt in store.
func NewAttentionAdmin(pool *pgxpool.Pool, store *idempotency.Store, now func() time.Time, logger *slog.Logger) *attention.Admin {
	return attention.NewAdmin(pool, func(ctx context.Context, tx pgx.Tx, tenantID uuid.UUID, a attention.Attempt) (bool, error) {
		return store.Unhold(ctx, tx, tenantID, idempotency.Operation(a.Operation), idempotency.Key(a.Key))
	}, now, logger)
}

// NewIdempotencyStore returns the idempotency store of every registered
// operation, for the operator's look at a record (api idempotency show).
func NewIdempotencyStore(cfg Config, now func() time.Time) *idempotency.Store {
	return newStore(cfg, now)
}

// newStore returns the idempotency store of every registered operation.
func newStore(cfg Config, now func() time.Time, opts ...idempotency.StoreOption) *idempotency.Store {
	opts = append([]idempotency.StoreOption{idempotency.WithLease(cfg.IdempotencyLease)}, opts...)
	return idempotency.NewStore(cfg.Retention.Idempotency, now, opts...)
}

// NewSweeper returns the retention sweeper over every kind of record, each
// deleted by the package that owns its table (api sweep). It refuses a
// retention shorter than a horizon it must cover, and a tuning out of
// range; the service's own sweeper is built after New checked both.
func NewSweeper(pool *pgxpool.Pool, cfg Config, logger *slog.Logger, now func() time.Time, opts ...retention.SweeperOption) (*retention.Sweeper, error) {
	if err := errors.Join(append(cfg.Tuning.check(), cfg.checkRetention())...); err != nil {
		return nil, fmt.Errorf("refusing to start: %w", err)
	}
	return newSweeper(pool, cfg, newStore(cfg, now), logger, now, opts...), nil
}

func newSweeper(pool *pgxpool.Pool, cfg Config, store *idempotency.Store, logger *slog.Logger, now func() time.Time, opts ...retention.SweeperOption) *retention.Sweeper {
	opts = append([]retention.SweeperOption{retention.WithBatchSize(cfg.Tuning.SweepBatch), retention.WithDutyCycle(cfg.Tuning.SweepDutyCycle)}, opts...)
	return retention.NewSweeper(pool, retention.Tables{
		Tenants:           tenants.IDs,
		Idempotency:       store.DeleteExpired,
		PublishedEvents:   outbox.DeleteExpired,
		WebhookReceipts:   webhooks.DeleteExpired,
		ProcessedMessages: inbox.DeleteExpired,
		CountStuck:        store.CountStuck,
	}, cfg.Retention, logger, now, opts...)
}
