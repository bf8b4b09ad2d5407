package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/postgres"
)

// What a client may know of its own key (GET /v1/idempotency-keys/...):
// whether a retry of the request would be answered from a record, and with
// what. A client that lost an answer, or no longer holds the request's
// payload, asks this instead of sending the request again.

// KeyState is a key's state as its client sees it.
type KeyState string

// The states of a key.
const (
	// KeyUnknown: no record under the key, for this tenant and operation
	// (never used, expired and swept, or another tenant's). A request sent
	// now would run as new.
	KeyUnknown KeyState = "unknown"
	// KeyInProgress: an attempt is pending. While its lease is live its
	// owner works on it; after that, a retry of the same request resumes
	// it. Either way the retry is the client's move, after RetryAfter.
	KeyInProgress KeyState = "in_progress"
	// KeyCompleted: the request has its final answer (success or refusal),
	// which every retry gets replayed.
	KeyCompleted KeyState = "completed"
	// KeyAwaitingOperator: the attempt is held for an operator; a retry is
	// answered awaiting_operator until one has released it.
	KeyAwaitingOperator KeyState = "awaiting_operator"
	// KeyCancelled: a cancel stopped the request before it ran (a
	// tombstone): any request under the key is answered with the cancel's
	// refusal, whose status Status holds.
	KeyCancelled KeyState = "cancelled"
)

// KeyStatus is what Lookup reports of a key.
type KeyStatus struct {
	State KeyState
	// RetryAfter is when a retry of an in-progress key should come, in
	// whole seconds (the Retry-After of request_in_progress).
	RetryAfter time.Duration
	// Status and Location are the stored answer's of a completed key: its
	// status code and the resource it links to (none for most refusals).
	// The body stays with the record: a retry of the request replays it.
	Status   int
	Location string
	// ExpiresAt is until when the record is kept (zero for an unknown key).
	ExpiresAt time.Time
	// Point is the record's recovery point, for the service's own use (a
	// client is not shown it).
	Point RecoveryPoint
}

// Lookup reports the state of tenant's key of op as a retry would meet it,
// without locking or changing anything. Another tenant's key reads as
// unknown, exactly like a key never used.
func (s *Store) Lookup(ctx context.Context, db DB, tenantID uuid.UUID, op Operation, key Key) (KeyStatus, error) {
	row, err := dbsqlc.New(db).IdempotencyGet(ctx, dbsqlc.IdempotencyGetParams{
		TenantID: tenantID, Operation: string(op), IdempotencyKey: string(key),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return KeyStatus{State: KeyUnknown}, nil
	}
	if err != nil {
		return KeyStatus{}, fmt.Errorf("look up idempotency key: %w", err)
	}
	return s.statusOf(row)
}

// LockKey is Lookup under the record's lock, in tx, for a step that acts on
// another operation's attempt (a cancel by key): the record stays as it is
// read until tx ends. It returns the resource the attempt recorded too (nil
// for none, and for an unknown key). A record locked by a transaction that
// does not end within lock_timeout is request_in_progress.
func (s *Store) LockKey(ctx context.Context, tx DB, tenantID uuid.UUID, op Operation, key Key) (KeyStatus, *Resource, error) {
	row, err := lockRecord(ctx, tx, Request{TenantID: tenantID, Operation: op, Key: key})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return KeyStatus{State: KeyUnknown}, nil, nil
	case postgres.IsLockTimeout(err):
		return KeyStatus{}, nil, inProgress(time.Second, err)
	case err != nil:
		return KeyStatus{}, nil, err
	}
	st, err := s.statusOf(row)
	return st, resourceOf(row), err
}

// statusOf is what a record tells its client (Lookup).
func (s *Store) statusOf(row dbsqlc.ApiIdempotency) (KeyStatus, error) {
	st := KeyStatus{ExpiresAt: row.ExpiresAt.UTC()}
	switch now := s.nowUTC(); {
	case State(row.State) != StatePending:
		resp, err := storedResponse(row)
		if err != nil {
			return KeyStatus{}, err
		}
		st.State, st.Status, st.Location = KeyCompleted, resp.Status, resp.Location
		if tombstone(row) {
			st.State = KeyCancelled
		}
	case row.HeldAt != nil:
		st.State = KeyAwaitingOperator
	case row.LockedUntil != nil && row.LockedUntil.After(now):
		// The same Retry-After a retry of the request would be answered.
		st.State, st.RetryAfter = KeyInProgress, wholeSeconds(s.leaseRetryAfter(*row.LockedUntil, now))
	default:
		// Abandoned: the retry takes the attempt over and resumes it.
		st.State, st.RetryAfter = KeyInProgress, wholeSeconds(0)
	}
	st.Point = RecoveryPoint(row.RecoveryPoint)
	return st, nil
}
