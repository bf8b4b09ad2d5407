package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency/internal/dbsqlc"
)

// The record's updates within a step's transaction: Reacquire locks it
// again in a later step, Checkpoint records a recovery point, Finish the
// final outcome. Each takes db, the step's transaction: a pgx.Tx, where the
// statement runs at once, or a pipelined step's batch, where it is queued
// and runs with the batch (package operation). Checkpoint and Finish return
// a function that reads the statement's outcome, at once on a transaction
// and after the batch was sent on a pipeline.

// ErrNotLocked is the error of a record's update (Checkpoint, Finish) that
// the transaction at hand did not earn: its claim or its Reacquire did not
// lock the record and find it pending, or an update used that lock up
// already.
var ErrNotLocked = errors.New("idempotency record not locked and pending in this transaction")

// ErrNotPending is the outcome of a record's update that found no pending
// record: a final record is never overwritten, and a held one is not
// finished behind the operator's back.
var ErrNotPending = errors.New("idempotency record is not pending")

// Reacquire locks the claim's record again in a later transaction of the same
// operation. It returns the stored outcome when somebody else (a retry or the
// recoverer that took the claim over after its lease, or a webhook) finished
// the operation first; the caller then answers with that and does nothing.
// A record held for an operator meanwhile is the problem awaiting_operator:
// the caller stops. Otherwise the record is locked and pending in tx, and
// the transaction may update it (Checkpoint, Finish).
func (c *Claim) Reacquire(ctx context.Context, tx DB) (*Response, error) {
	return c.QueueReacquire(ctx, tx).Result()
}

// QueuedReacquire is a Reacquire sent on a transaction or queued into a
// pipeline.
type QueuedReacquire struct {
	claim   *Claim
	results *dbsqlc.IdempotencyGetForUpdateBatchResults
}

// QueueReacquire queues Reacquire's lock of the claim's record into db;
// Result gives its outcome once it was sent.
func (c *Claim) QueueReacquire(ctx context.Context, db DB) *QueuedReacquire {
	return &QueuedReacquire{claim: c, results: dbsqlc.New(db).IdempotencyGetForUpdate(ctx, []dbsqlc.IdempotencyGetForUpdateParams{{
		TenantID: c.req.TenantID, Operation: string(c.req.Operation), IdempotencyKey: string(c.req.Key),
	}})}
}

// Result reads the queued lock: what Reacquire returns.
func (q *QueuedReacquire) Result() (*Response, error) {
	var (
		row dbsqlc.ApiIdempotency
		err error
	)
	q.results.QueryRow(func(_ int, r dbsqlc.ApiIdempotency, e error) { row, err = r, e })
	if err != nil {
		return nil, fmt.Errorf("relock idempotency record: %w", err)
	}
	if State(row.State) == StatePending {
		if row.HeldAt != nil {
			return nil, AwaitingOperator(nil)
		}
		q.claim.locked = true
		return nil, nil
	}
	resp, err := storedResponse(row)
	if err != nil {
		return nil, err
	}
	return &resp, nil
}

// Checkpoint records in db that a phase of a multi-phase operation
// committed, and the resource it created (nil keeps the one recorded), and
// renews the lease. done reads its outcome.
func (c *Claim) Checkpoint(ctx context.Context, db DB, point RecoveryPoint, res *Resource) (done func() error, err error) {
	if err := c.useLock(); err != nil {
		return nil, fmt.Errorf("checkpoint %s %q: %w", c.req.Operation, c.req.Key, err)
	}
	now := c.store.nowUTC()
	return c.checkpoint(ctx, db, point, res, now.Add(c.store.lease), now), nil
}

// checkpoint queues the update that records point (and res, when not nil)
// and the lease leaseUntil into db; done reads its outcome and, when it
// may have committed, makes them the claim's.
func (c *Claim) checkpoint(ctx context.Context, db DB, point RecoveryPoint, res *Resource, leaseUntil, now time.Time) (done func() error) {
	p := dbsqlc.IdempotencyCheckpointParams{
		RecoveryPoint:  string(point),
		LockedUntil:    &leaseUntil,
		Now:            now,
		TenantID:       c.req.TenantID,
		Operation:      string(c.req.Operation),
		IdempotencyKey: string(c.req.Key),
	}
	if res != nil {
		p.ResourceType, p.ResourceID = &res.Type, &res.ID
	}
	results := dbsqlc.New(db).IdempotencyCheckpoint(ctx, []dbsqlc.IdempotencyCheckpointParams{p})
	return func() error {
		var err error
		results.QueryRow(func(_ int, _ string, e error) { err = e })
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("checkpoint %s %q: %w", c.req.Operation, c.req.Key, ErrNotPending)
		}
		// Done, or unknown (the connection failed with COMMIT on its
		// way): then, should it have committed, this is the record's
		// lease, which a release must name.
		c.RecoveryPoint, c.lease = point, leaseUntil
		if res != nil {
			c.Resource = res
		}
		if err != nil {
			return fmt.Errorf("checkpoint idempotency record: %w", err)
		}
		return nil
	}
}

// renew renews the lease of a claim taken over after its owner's ran out,
// at its recovery point, in tx, at once.
func (c *Claim) renew(ctx context.Context, tx DB, now time.Time) error {
	return c.checkpoint(ctx, tx, c.RecoveryPoint, nil, now.Add(c.store.lease), now)()
}

// Finish stores resp in db as the final outcome of the claim: 2xx as
// completed, 4xx (business failures) as failed. It returns resp with
// ExpiresAt set; done reads the update's outcome (ErrNotPending when the
// record was not pending). 5xx outcomes are never stored: the caller must
// roll back (or leave the claim pending for recovery) instead.
func (c *Claim) Finish(ctx context.Context, db DB, resp Response, res *Resource) (stored Response, done func() error, err error) {
	p, resp, err := c.finishParams(resp, res)
	if err != nil {
		return Response{}, nil, err
	}
	if err := c.useLock(); err != nil {
		return Response{}, nil, fmt.Errorf("finish %s %q: %w", c.req.Operation, c.req.Key, err)
	}
	results := dbsqlc.New(db).IdempotencyFinish(ctx, []dbsqlc.IdempotencyFinishParams{p})
	return resp, func() error {
		var err error
		results.QueryRow(func(_ int, _ string, e error) { err = e })
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("finish %s %q: %w", c.req.Operation, c.req.Key, ErrNotPending)
		case err != nil:
			return fmt.Errorf("store idempotent response: %w", err)
		}
		c.RecoveryPoint = PointFinished
		return nil
	}, nil
}

// useLock takes the lock the transaction's claim or Reacquire found for
// the record's one update (ErrNotLocked without one).
func (c *Claim) useLock() error {
	if !c.locked {
		return ErrNotLocked
	}
	c.locked = false
	return nil
}

// finishParams are the parameters of the update that stores resp as the
// claim's final outcome, and resp with ExpiresAt set.
func (c *Claim) finishParams(resp Response, res *Resource) (dbsqlc.IdempotencyFinishParams, Response, error) {
	state := StateCompleted
	switch {
	case resp.Status >= 200 && resp.Status < 300:
	case resp.Status >= 400 && resp.Status < 500:
		state = StateFailed
	default:
		return dbsqlc.IdempotencyFinishParams{}, Response{}, fmt.Errorf("idempotency: status %d is not a final outcome", resp.Status)
	}
	retention, err := c.store.retention(c.req.Operation)
	if err != nil {
		return dbsqlc.IdempotencyFinishParams{}, Response{}, err
	}
	now := c.store.nowUTC()
	resp.ExpiresAt = now.Add(retention)
	headers, err := json.Marshal(storedHeaders{ContentType: resp.ContentType, Location: resp.Location})
	if err != nil {
		return dbsqlc.IdempotencyFinishParams{}, Response{}, fmt.Errorf("encode stored headers: %w", err)
	}
	p := dbsqlc.IdempotencyFinishParams{
		State:           string(state),
		StatusCode:      ptr(int32(resp.Status)), // #nosec G115 -- an HTTP status code has three digits
		ResponseHeaders: headers,
		ResponseBody:    resp.Body,
		Now:             now,
		ExpiresAt:       resp.ExpiresAt,
		TenantID:        c.req.TenantID,
		Operation:       string(c.req.Operation),
		IdempotencyKey:  string(c.req.Key),
	}
	if res != nil {
		p.ResourceType = &res.Type
		p.ResourceID = &res.ID
	}
	return p, resp, nil
}

// Release ends this claim's lease at once, keeping its recovery point and
// its pending state, for an attempt that stopped without a final outcome
// while its process lives on (an unknown provider outcome, a failed phase 2):
// nobody works on it any more, so a retry or the recoverer may resume it
// right away instead of meeting request_in_progress until the lease runs out.
//
// It releases only the lease this claim holds. When the record is finished
// or gone, or carries another lease (this claim's transaction never
// committed and another request claimed the key, or this lease ran out and
// another owner took the claim over and may be at the provider now), Release
// changes nothing and reports false: ending someone else's lease would let a
// third party resume an attempt that is still running.
func (c *Claim) Release(ctx context.Context, tx pgx.Tx) (bool, error) {
	row, ok, err := c.lockOwn(ctx, tx)
	if err != nil || !ok {
		return false, err
	}
	now := c.store.nowUTC()
	if err := c.checkpoint(ctx, tx, RecoveryPoint(row.RecoveryPoint), nil, now, now)(); err != nil {
		return false, err
	}
	return true, nil
}

// Hold holds the claim's record for an operator, in tx, and returns when:
// for an attempt that no retry can finish (its step needs a person) or
// that the recoverer gave up on. The record keeps its recovery point and
// loses its lease; from then on the claim of its key answers
// awaiting_operator and nobody resumes it until an operator releases it.
// Like Release, it acts only on a pending record that carries this claim's
// lease, and reports false otherwise (finished, gone, or another owner's):
// the caller must then not report the attempt held.
func (c *Claim) Hold(ctx context.Context, tx pgx.Tx) (time.Time, bool, error) {
	row, ok, err := c.lockOwn(ctx, tx)
	if err != nil || !ok || row.HeldAt != nil {
		return time.Time{}, false, err
	}
	now := c.store.nowUTC()
	if err := dbsqlc.New(tx).IdempotencyHold(ctx, dbsqlc.IdempotencyHoldParams{
		Now: now, TenantID: c.req.TenantID, Operation: string(c.req.Operation), IdempotencyKey: string(c.req.Key),
	}); err != nil {
		return time.Time{}, false, fmt.Errorf("hold idempotency record: %w", err)
	}
	c.lease = time.Time{}
	return now, true, nil
}

// lockOwn locks the claim's record in tx and reports whether it is pending
// under this claim's lease.
func (c *Claim) lockOwn(ctx context.Context, tx pgx.Tx) (dbsqlc.ApiIdempotency, bool, error) {
	row, err := lockRecord(ctx, tx, c.req)
	if errors.Is(err, pgx.ErrNoRows) {
		return row, false, nil
	}
	if err != nil {
		return row, false, err
	}
	own := State(row.State) == StatePending && row.LockedUntil != nil && row.LockedUntil.Equal(c.lease) && row.RequestID == c.holder
	return row, own, nil
}

// lockRecord locks and reads the record of r's key in tx, at once
// (pgx.ErrNoRows when there is none).
func lockRecord(ctx context.Context, tx DB, r Request) (dbsqlc.ApiIdempotency, error) {
	var (
		row dbsqlc.ApiIdempotency
		err error
	)
	dbsqlc.New(tx).IdempotencyGetForUpdate(ctx, []dbsqlc.IdempotencyGetForUpdateParams{{
		TenantID: r.TenantID, Operation: string(r.Operation), IdempotencyKey: string(r.Key),
	}}).QueryRow(func(_ int, r dbsqlc.ApiIdempotency, e error) { row, err = r, e })
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		err = fmt.Errorf("lock idempotency record: %w", err)
	}
	return row, err
}

// storedHeaders are the response headers that matter for a replay.
type storedHeaders struct {
	ContentType string `json:"Content-Type"`
	Location    string `json:"Location,omitempty"`
}

func storedResponse(row dbsqlc.ApiIdempotency) (Response, error) {
	var h storedHeaders
	if err := json.Unmarshal(row.ResponseHeaders, &h); err != nil {
		return Response{}, fmt.Errorf("decode stored headers: %w", err)
	}
	if row.StatusCode == nil {
		return Response{}, fmt.Errorf("idempotency record %s/%s is final without a status", row.Operation, row.IdempotencyKey)
	}
	return Response{
		Status:      int(*row.StatusCode),
		ContentType: h.ContentType,
		Location:    h.Location,
		Body:        row.ResponseBody,
		ExpiresAt:   row.ExpiresAt,
		Replayed:    true,
	}, nil
}

func resourceOf(row dbsqlc.ApiIdempotency) *Resource {
	if row.ResourceID == nil {
		return nil
	}
	r := &Resource{ID: *row.ResourceID}
	if row.ResourceType != nil {
		r.Type = *row.ResourceType
	}
	return r
}
