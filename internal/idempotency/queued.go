package idempotency

import (
	"context"
	"fmt"

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
	return q.store.claimed(ctx, q.req, *q.params.LockedUntil, row, err, false)
}

// Executed reports the fresh claim's outcome, OutcomeExecuted, as Begin
// does for its own.
func (q *QueuedClaim) Executed(ctx context.Context) { q.store.report(ctx, q.req, OutcomeExecuted) }

// QueuedFinish is a finish queued into a pipeline (Claim.QueueFinish).
type QueuedFinish struct {
	claim   *Claim
	results *dbsqlc.IdempotencyFinishQueuedBatchResults
}

// QueueFinish queues Finish's update into p, for a claim this transaction
// made (a fresh one): its record is locked by the claim's insert and
// pending, so the update always finds it. It returns resp with ExpiresAt
// set, as Finish does; QueuedFinish.Err reads the update's outcome.
func (c *Claim) QueueFinish(ctx context.Context, p *postgres.Pipeline, resp Response, res *Resource) (Response, *QueuedFinish, error) {
	if c.Kind != ClaimFresh {
		return Response{}, nil, fmt.Errorf("idempotency: QueueFinish of a %s claim; only a fresh claim's record is known to be pending", c.Kind)
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
