package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/postgres"
)

// A tombstone is how a client gives up on a request before it has arrived
// (payments' cancel by key): a final record written under a key nobody has
// claimed, answering every request under that key with resp, whatever its
// fingerprint, for the operation's retention. The request, should it still
// be travelling through the network, never runs.

// PointCancelled is a tombstone's recovery point: the record was finished
// by a cancel before any request under its key ran.
const PointCancelled RecoveryPoint = "cancelled"

// Tombstone writes, in tx, a tombstone under tenant's key of op answering
// resp (a refusal, 4xx), and reports whether it wrote one: false when the
// key has a record already, which the caller then reads under its lock
// (Lock). A claim of the key that has not committed yet makes it wait for
// that transaction (at most lock_timeout, then request_in_progress), so a
// tombstone never races the request it stops.
func (s *Store) Tombstone(ctx context.Context, tx DB, tenantID uuid.UUID, op Operation, key Key, resp Response, requestID string) (bool, error) {
	if resp.Status < 400 || resp.Status >= 500 {
		return false, fmt.Errorf("idempotency: a tombstone answers a refusal, not %d", resp.Status)
	}
	retention, err := s.retention(op)
	if err != nil {
		return false, err
	}
	headers, err := json.Marshal(storedHeaders{ContentType: resp.ContentType, Location: resp.Location})
	if err != nil {
		return false, err
	}
	status := int32(resp.Status)
	now := s.nowUTC()
	_, err = dbsqlc.New(tx).IdempotencyTombstone(ctx, dbsqlc.IdempotencyTombstoneParams{
		TenantID: tenantID, Operation: string(op), IdempotencyKey: string(key), RequestID: requestID,
		StatusCode: &status, ResponseHeaders: headers, ResponseBody: resp.Body, Now: now, ExpiresAt: now.Add(retention),
	})
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case postgres.IsLockTimeout(err):
		return false, inProgress(time.Second, err)
	}
	return false, fmt.Errorf("write tombstone: %w", err)
}

// tombstone reports whether row is a tombstone: answered to every request
// under its key, whatever the request's fingerprint.
func tombstone(row dbsqlc.ApiIdempotency) bool {
	return RecoveryPoint(row.RecoveryPoint) == PointCancelled
}

// Start records, in tx, an attempt of r that another operation's
// transaction begins on r's behalf (a compensation: the refund that undoes
// a cancelled payment's charge): pending at point with res, the step that
// made it already done, and its lease run out, so the Recoverer takes it
// over at once and runs the operation's own steps from point. It reports
// false, writing nothing, when r's key has a record already: the attempt
// was started before.
func (s *Store) Start(ctx context.Context, tx DB, r Request, point RecoveryPoint, res Resource) (bool, error) {
	retention, err := s.retention(r.Operation)
	if err != nil {
		return false, err
	}
	now := s.nowUTC()
	_, err = dbsqlc.New(tx).IdempotencyInsertAt(ctx, dbsqlc.IdempotencyInsertAtParams{
		TenantID: r.TenantID, Operation: string(r.Operation), IdempotencyKey: string(r.Key), RequestHash: r.Fingerprint[:],
		RecoveryPoint: string(point), Now: &now, RequestID: r.RequestID, ResourceType: &res.Type, ResourceID: &res.ID,
		ExpiresAt: now.Add(retention),
	})
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	}
	return false, fmt.Errorf("start %s %q: %w", r.Operation, r.Key, err)
}
