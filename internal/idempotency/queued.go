package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/oncepay/oncepay/internal/idempotency/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/postgres"
)

// QueuedClaim is a claim queued into a pipeline (QueueClaim): its outcome
// is known once the pipeline is sent.
type QueuedClaim struct {
	store   *Store
	req     Request
	params  dbsqlc.IdempotencyInsertParams
	results *dbsqlc.IdempotencyInsertQueuedBatchResults
}

// QueueClaim queues the claim of r's key into p, to be sent with the
// statements of the operation's first batch (after BEGIN). It is Begin's
// first statement; QueuedClaim.Claim gives its outcome.
func (s *Store) QueueClaim(ctx context.Context, p *postgres.Pipeline, r Request) (*QueuedClaim, error) {
	params, err := s.claimParams(ctx, r, s.nowUTC())
	if err != nil {
		return nil, err
	}
	return &QueuedClaim{store: s, req: r, params: params,
		results: dbsqlc.New(p).IdempotencyInsertQueued(ctx, []dbsqlc.IdempotencyInsertQueuedParams{dbsqlc.IdempotencyInsertQueuedParams(params)})}, nil
}

// Claim reads the queued claim's outcome, once its pipeline was sent: a
// fresh claim, ErrTaken when the key has a record (the caller rolls back
// and runs Begin, which decides what that record means), or the error
// Begin would return (a lock timeout is request_in_progress). A fresh
// claim is not reported yet: the caller reports it (Executed) unless it
// hands the request to Begin after all, which reports its own outcome.
func (q *QueuedClaim) Claim(ctx context.Context) (*Claim, error) {
	var (
		row dbsqlc.ApiIdempotency
		err error
	)
	q.results.QueryRow(func(_ int, r dbsqlc.ApiIdempotency, e error) { row, err = r, e })
	c, err := q.store.claimed(ctx, q.req, *q.params.LockedUntil, row, err, false)
	if err != nil {
		return nil, err
	}
	c.locked = true
	return c, nil
}

// Executed reports the fresh claim's outcome, OutcomeExecuted, as Begin
// does for its own.
func (q *QueuedClaim) Executed(ctx context.Context) { q.store.report(ctx, q.req, OutcomeExecuted) }

// QueuedFinish is a finish queued into a pipeline (Claim.QueueFinish).
type QueuedFinish struct {
	claim   *Claim
	results *dbsqlc.IdempotencyFinishQueuedBatchResults
}

// QueueFinish queues Finish's update into p, for a record this
// transaction's first batch locked and found pending (QueuedClaim.Claim, or
// QueuedReacquire.Result): the update always finds it, so the batch needs
// no answer in between. It returns resp with ExpiresAt set, as Finish does;
// QueuedFinish.Err reads the update's outcome.
func (c *Claim) QueueFinish(ctx context.Context, p *postgres.Pipeline, resp Response, res *Resource) (Response, *QueuedFinish, error) {
	if err := c.queueable("QueueFinish"); err != nil {
		return Response{}, nil, err
	}
	params, resp, err := c.finishParams(resp, res)
	if err != nil {
		return Response{}, nil, err
	}
	results := dbsqlc.New(p).IdempotencyFinishQueued(ctx, []dbsqlc.IdempotencyFinishQueuedParams{dbsqlc.IdempotencyFinishQueuedParams(params)})
	return resp, &QueuedFinish{claim: c, results: results}, nil
}

// Err reads the queued finish's outcome, once its pipeline was sent.
func (f *QueuedFinish) Err() error {
	var err error
	f.results.Exec(func(_ int, e error) { err = e })
	if err != nil {
		return fmt.Errorf("store idempotent response: %w", err)
	}
	f.claim.RecoveryPoint = PointFinished
	return nil
}

// queueable checks that an update may be queued blind for c: its record
// was locked and found pending in this transaction's first batch. One
// update does it (the transaction's last word on the record).
func (c *Claim) queueable(what string) error {
	if !c.locked {
		return fmt.Errorf("idempotency: %s of %s %q, whose record no first batch locked", what, c.req.Operation, c.req.Key)
	}
	c.locked = false
	return nil
}

// QueuedReacquire is a Reacquire queued into a pipeline.
type QueuedReacquire struct {
	claim   *Claim
	results *dbsqlc.IdempotencyGetForUpdateQueuedBatchResults
}

// QueueReacquire queues Reacquire's lock of the claim's record into p, a
// later phase's first batch (after BEGIN); Result gives its outcome.
func (c *Claim) QueueReacquire(ctx context.Context, p *postgres.Pipeline) *QueuedReacquire {
	return &QueuedReacquire{claim: c, results: dbsqlc.New(p).IdempotencyGetForUpdateQueued(ctx, []dbsqlc.IdempotencyGetForUpdateQueuedParams{{
		TenantID: c.req.TenantID, Operation: string(c.req.Operation), IdempotencyKey: string(c.req.Key),
	}})}
}

// Result reads the queued lock, once its pipeline was sent: what Reacquire
// returns. When it returns neither a stored outcome nor an error, the
// record is locked and pending, and this transaction may queue its update
// (QueueFinish, QueueCheckpoint).
func (q *QueuedReacquire) Result() (*Response, error) {
	var (
		row dbsqlc.ApiIdempotency
		err error
	)
	q.results.QueryRow(func(_ int, r dbsqlc.ApiIdempotency, e error) { row, err = r, e })
	stored, err := reacquired(row, err)
	if stored == nil && err == nil {
		q.claim.locked = true
	}
	return stored, err
}

// QueuedCheckpoint is a Checkpoint queued into a pipeline.
type QueuedCheckpoint struct {
	claim   *Claim
	point   RecoveryPoint
	lease   time.Time
	results *dbsqlc.IdempotencyCheckpointQueuedBatchResults
}

// QueueCheckpoint queues Checkpoint's update into p, for a record this
// transaction's first batch locked and found pending (as QueueFinish).
// QueuedCheckpoint.Err reads its outcome.
func (c *Claim) QueueCheckpoint(ctx context.Context, p *postgres.Pipeline, point RecoveryPoint, res *Resource) (*QueuedCheckpoint, error) {
	if err := c.queueable("QueueCheckpoint"); err != nil {
		return nil, err
	}
	now := c.store.nowUTC()
	lease := now.Add(c.store.lease)
	params := c.checkpointParams(point, res, lease, now)
	return &QueuedCheckpoint{claim: c, point: point, lease: lease,
		results: dbsqlc.New(p).IdempotencyCheckpointQueued(ctx, []dbsqlc.IdempotencyCheckpointQueuedParams{dbsqlc.IdempotencyCheckpointQueuedParams(params)})}, nil
}

// Err reads the queued checkpoint's outcome, once its pipeline was sent.
func (q *QueuedCheckpoint) Err() error {
	var err error
	q.results.Exec(func(_ int, e error) { err = e })
	var refused *pgconn.PgError
	if err == nil || !errors.As(err, &refused) {
		// Done, or unknown (the connection failed with COMMIT on its
		// way): then, should it have committed, this is the record's
		// lease, which a release must name, as after Checkpoint whose
		// commit failed.
		q.claim.RecoveryPoint, q.claim.lease = q.point, q.lease
	}
	if err != nil {
		return fmt.Errorf("checkpoint idempotency record: %w", err)
	}
	return nil
}
