package operation

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/postgres"
)

// Batched is a local mutation written for a fresh key's fast path: the
// transaction in two pipelined batches, so that a create costs PostgreSQL
// three round trips (the lookup, then these two) instead of nine.
//
//	batch 1: BEGIN, the claim (idempotency), the mutation's reads (Batched)
//	         the claim is fresh: the mutation decides from its reads (Write)
//	batch 2: the mutation's writes and its outbox row (Write), the stored
//	         response (idempotency), COMMIT
//
// Nothing is decided between the statements of a batch, so each statement
// of batch 2 must be right whatever the ones before it did, or fail: a
// failed statement makes PostgreSQL skip the rest, COMMIT included, and the
// transaction rolls back. A key that has a record already (ErrTaken after
// batch 1) and a Write whose statements say the sequential path is needed
// (ErrSequential after batch 2) roll back and run the Mutation instead:
// those are the rare cases (a retry racing its original, a late retry),
// and the Mutation decides them statement by statement.
//
// Batched queues its reads into p and returns the Write that reads them.
type Batched[T any] func(ctx context.Context, p *postgres.Pipeline, req idempotency.Request, in T) (Write[T], error)

// Write reads the first batch's results (it was sent) and queues the
// mutation's writes into p, the second batch. It returns the final response
// and resource to store, which Local queues after the writes, and check,
// which reads the writes' outcomes once p was sent. An error of Write
// itself (a business validation of the reads, say) rolls back, like a
// Mutation's error.
type Write[T any] func(ctx context.Context, p *postgres.Pipeline, a *Attempt[T]) (resp idempotency.Response, res *idempotency.Resource, check func() error, err error)

// ErrSequential, wrapped in what a Write's check returns, says that the
// transaction rolled back and the Mutation must decide the request.
var ErrSequential = errors.New("operation: the sequential path decides this request")

// runBatched runs req's transaction as l.batched describes. done is false
// when the transaction rolled back and the Mutation must run instead.
func (l *Local[T]) runBatched(ctx context.Context, conn *pgxpool.Conn, req idempotency.Request, in T) (resp idempotency.Response, done bool, err error) {
	defer func() {
		if err != nil || !done {
			postgres.RollbackOpen(ctx, conn)
		}
	}()
	first := postgres.NewPipeline(conn)
	first.Queue("BEGIN")
	claim, err := l.r.store.QueueClaim(ctx, first, req)
	if err != nil {
		return idempotency.Response{}, true, err
	}
	write, err := l.batched(ctx, first, req, in)
	if err != nil {
		return idempotency.Response{}, true, err
	}
	first.Send(ctx)
	c, err := claim.Claim(ctx)
	if err != nil {
		_ = first.Close()
		return idempotency.Response{}, !errors.Is(err, idempotency.ErrTaken), err
	}
	// The claim was fresh: executed, unless the request goes to the
	// sequential path, which reports its own outcome (a late retry).
	defer func() {
		if done {
			claim.Executed(ctx)
		}
	}()
	second := postgres.NewPipeline(conn)
	a := &Attempt[T]{Claim: c, Data: in, r: l.r, span: trace.SpanFromContext(ctx)}
	resp, res, check, err := write(ctx, second, a)
	if cerr := first.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("%s first batch: %w", l.op, cerr)
	}
	if err != nil {
		return idempotency.Response{}, true, err
	}
	stored, finish, err := c.QueueFinish(ctx, second, resp, res)
	if err != nil {
		return idempotency.Response{}, true, err
	}
	if err := l.r.hooks.beforeCommit(l.op, idempotency.PointStarted); err != nil {
		return idempotency.Response{}, true, err
	}
	second.Queue("COMMIT")
	second.Send(ctx)
	err = errors.Join(check(), finish.Err())
	if cerr := second.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("%s commit: %w", l.op, cerr)
	}
	if errors.Is(err, ErrSequential) {
		return idempotency.Response{}, false, nil
	}
	if err != nil {
		return idempotency.Response{}, true, err
	}
	l.r.afterCommit()
	return stored, true, nil
}
