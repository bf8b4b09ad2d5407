package idempotency

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency/internal/dbsqlc"
)

// DeleteExpired deletes, in tx, up to limit of the tenant's finished records that expired
// at or before cutoff, oldest expiry first, and reports how many it deleted:
// one batch of the retention sweeper. Each record carries its own expiry,
// set from its operation's policy when it was finished. A pending record (an
// operation still unsettled) is never deleted, and a record another
// transaction holds is skipped for the next batch, so sweepers never wait
// on requests or on each other.
func (s *Store) DeleteExpired(ctx context.Context, tx pgx.Tx, tenant uuid.UUID, cutoff time.Time, limit int) (int64, error) {
	return dbsqlc.New(tx).IdempotencyDeleteExpired(ctx, dbsqlc.IdempotencyDeleteExpiredParams{TenantID: tenant, Cutoff: cutoff, MaxRows: int32(limit)}) // #nosec G115 -- limit is the sweeper's batch size, at most 100,000 (app.Tuning)
}

// CountStuck counts pending records whose lease ran out before cutoff:
// operations nobody has settled for a long time, which the sweeper keeps
// and reports.
func (s *Store) CountStuck(ctx context.Context, db DB, cutoff time.Time) (int64, error) {
	return dbsqlc.New(db).IdempotencyCountStuck(ctx, cutoff)
}
