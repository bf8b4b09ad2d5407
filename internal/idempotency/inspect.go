package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency/internal/dbsqlc"
)

// What an operator reads of a record.

// Record is everything a record says, for an operator (Inspect).
type Record struct {
	TenantID      uuid.UUID
	Operation     Operation
	Key           Key
	State         State
	RecoveryPoint RecoveryPoint
	// LockedUntil is the lease: a live one means an attempt is running.
	LockedUntil *time.Time
	// RequestID is the request that holds, or last held, the claim.
	RequestID   string
	Fingerprint Fingerprint
	Resource    *Resource
	// StatusCode, ContentType and Body are the stored outcome of a final
	// record.
	StatusCode  int
	ContentType string
	Body        []byte
	// HeldAt is when the attempt was held for an operator (nil: not held).
	HeldAt *time.Time
	// Recoveries counts the recoverer's take-overs; NextRecoveryAt is its
	// backoff.
	Recoveries     int
	NextRecoveryAt *time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
	ExpiresAt      time.Time
}

// ErrNotFound is returned by Inspect for a key without a record.
var ErrNotFound = errors.New("no such idempotency record")

// Inspect returns the record of (tenant, op, key), without locking it, or
// ErrNotFound.
func (s *Store) Inspect(ctx context.Context, db DB, tenantID uuid.UUID, op Operation, key Key) (Record, error) {
	row, err := dbsqlc.New(db).IdempotencyGet(ctx, dbsqlc.IdempotencyGetParams{
		TenantID: tenantID, Operation: string(op), IdempotencyKey: string(key),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, ErrNotFound
	}
	if err != nil {
		return Record{}, fmt.Errorf("read idempotency record: %w", err)
	}
	rec := Record{
		TenantID: row.TenantID, Operation: Operation(row.Operation), Key: Key(row.IdempotencyKey),
		State: State(row.State), RecoveryPoint: RecoveryPoint(row.RecoveryPoint),
		LockedUntil: utc(row.LockedUntil), RequestID: row.RequestID, Fingerprint: fingerprintOf(row),
		Resource: resourceOf(row), Body: row.ResponseBody, HeldAt: utc(row.HeldAt),
		Recoveries: int(row.Recoveries), NextRecoveryAt: utc(row.NextRecoveryAt),
		CreatedAt: row.CreatedAt.UTC(), UpdatedAt: row.UpdatedAt.UTC(), ExpiresAt: row.ExpiresAt.UTC(),
	}
	if row.StatusCode != nil {
		rec.StatusCode = int(*row.StatusCode)
	}
	if resp, err := storedResponse(row); err == nil && row.State != string(StatePending) {
		rec.ContentType = resp.ContentType
	}
	return rec, nil
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// TraceContext returns the trace context stored by the claim of (tenant, op,
// key), and nil when the record has none or is gone: for a trace that links
// to the request that started the operation (a webhook that finished it).
func (s *Store) TraceContext(ctx context.Context, db DB, tenant uuid.UUID, op Operation, key Key) ([]byte, error) {
	tc, err := dbsqlc.New(db).IdempotencyTraceContext(ctx, dbsqlc.IdempotencyTraceContextParams{
		TenantID: tenant, Operation: string(op), IdempotencyKey: string(key),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read trace context of %s %q: %w", op, key, err)
	}
	return tc, nil
}

// fingerprintOf is a record's request fingerprint; a tombstone has none
// (the zero Fingerprint).
func fingerprintOf(row dbsqlc.ApiIdempotency) Fingerprint {
	if tombstone(row) {
		return Fingerprint{}
	}
	return Fingerprint(row.RequestHash)
}
