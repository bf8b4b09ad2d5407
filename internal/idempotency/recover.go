package idempotency

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency/internal/dbsqlc"
)

// The recoverer's side of the store: the abandoned attempts it may take
// over, and the operator's release of an attempt held for them.

// ExpiredTenants lists up to limit tenants that have pending claims of ops
// whose lease ran out and that ClaimExpired may take over, the tenant of the
// longest expired claim first. It locks nothing (on Citus it reads every
// shard); ClaimExpired then takes them tenant by tenant.
func (s *Store) ExpiredTenants(ctx context.Context, db DB, ops []Operation, limit int) ([]uuid.UUID, error) {
	tenants, err := dbsqlc.New(db).IdempotencyExpiredTenants(ctx, dbsqlc.IdempotencyExpiredTenantsParams{
		Operations: operationNames(ops),
		Now:        s.nowUTC(),
		MaxRows:    int32(min(limit, math.MaxInt32)), // #nosec G115 -- min() bounds it to MaxInt32
	})
	if err != nil {
		return nil, fmt.Errorf("list tenants with expired idempotency records: %w", err)
	}
	return tenants, nil
}

func operationNames(ops []Operation) []string {
	names := make([]string, len(ops))
	for i, op := range ops {
		names[i] = string(op)
	}
	return names
}

// ClaimExpired takes over up to limit of the tenant's pending claims of ops
// whose lease ran out: attempts abandoned by a crash or a client that gave
// up. It is the
// recoverer's Begin: every claim it returns is a ClaimResumed. Concurrent
// callers (several API processes) never get the same claim: the rows are
// locked with SKIP LOCKED and leased anew.
//
// Each take-over counts as a recovery (Claim.Recovery). backoff, when set,
// says how long after its nth recovery an attempt is not taken over again,
// should that recovery end without an outcome: the recoverer's backoff. A
// held record, and one whose backoff has not run out, is not taken. A
// client's retry (Begin) never waits for the backoff.
func (s *Store) ClaimExpired(ctx context.Context, tx pgx.Tx, tenantID uuid.UUID, ops []Operation, limit int, backoff func(recovery int) time.Duration) ([]*Claim, error) {
	now := s.nowUTC()
	leaseUntil := now.Add(s.lease)
	rows, err := dbsqlc.New(tx).IdempotencyClaimExpired(ctx, dbsqlc.IdempotencyClaimExpiredParams{
		TenantID:    tenantID,
		Operations:  operationNames(ops),
		Now:         now,
		MaxRows:     int32(min(limit, math.MaxInt32)), // #nosec G115 -- min() bounds it to MaxInt32
		LockedUntil: &leaseUntil,
	})
	if err != nil {
		return nil, fmt.Errorf("claim expired idempotency records: %w", err)
	}
	claims := make([]*Claim, len(rows))
	for i, row := range rows {
		if backoff != nil {
			if err := dbsqlc.New(tx).IdempotencySetNextRecovery(ctx, dbsqlc.IdempotencySetNextRecoveryParams{
				NextRecoveryAt: now.Add(backoff(int(row.Recoveries))),
				TenantID:       row.TenantID, Operation: row.Operation, IdempotencyKey: row.IdempotencyKey,
			}); err != nil {
				return nil, fmt.Errorf("set the next recovery: %w", err)
			}
		}
		claims[i] = &Claim{
			store: s,
			req: Request{
				TenantID:    row.TenantID,
				Operation:   Operation(row.Operation),
				Key:         Key(row.IdempotencyKey),
				Fingerprint: Fingerprint(row.RequestHash),
				RequestID:   "recoverer",
			},
			Kind:          ClaimResumed,
			RecoveryPoint: RecoveryPoint(row.RecoveryPoint),
			Resource:      resourceOf(row),
			Recovery:      int(row.Recoveries),
			lease:         leaseUntil,
			holder:        row.RequestID,
			traceContext:  row.TraceContext,
		}
	}
	return claims, nil
}

// Unhold releases a record held for an operator (Claim.Hold) for another
// try, in tx: it is due at once, for its client's retry and the recoverer,
// with its recoveries counted from zero. It reports false when the record
// is not held (never was, released already, or gone).
func (s *Store) Unhold(ctx context.Context, tx pgx.Tx, tenantID uuid.UUID, op Operation, key Key) (bool, error) {
	_, err := dbsqlc.New(tx).IdempotencyUnhold(ctx, dbsqlc.IdempotencyUnholdParams{
		Now: s.nowUTC(), TenantID: tenantID, Operation: string(op), IdempotencyKey: string(key),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("release held idempotency record: %w", err)
	}
	return true, nil
}
