package operation

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/problem"
)

// Batched is a step's transaction (a Local mutation, or a step of Phases)
// written for its common case as two pipelined batches, so that it costs
// PostgreSQL two round trips instead of one per statement:
//
//	batch 1: BEGIN, the record's lock (a fresh key's claim, or a later
//	         step's Reacquire), the step's reads (Batched)
//	         the record is this attempt's and pending: the step decides
//	         from its reads (Write)
//	batch 2: the step's writes and its outbox row, the record's update
//	         (Attempt.QueueFinish, QueueRefuse or QueueNext), COMMIT
//
// A create then costs three round trips (the lookup, then these two), a
// payment five (the lookup, then two for each phase).
//
// Nothing is decided between the statements of a batch, so each statement
// of batch 2 must be right whatever the ones before it did, or fail: a
// failed statement makes PostgreSQL skip the rest, COMMIT included, and the
// transaction rolls back. The rare cases go to the step's statement-by-
// statement path (the Mutation, or the Step's Tx), which decides them as
// before: a key that has a record already (its claim finds it taken), and
// whatever the step itself sends there with ErrSequential (a late retry, a
// payment finished meanwhile by its webhook).
//
// Batched queues its reads into p and returns the Write that reads them.
// For a step at PointStarted, a.Claim is nil until batch 1 was sent; the
// request is a.Request().
type Batched[T any] func(ctx context.Context, p *postgres.Pipeline, a *Attempt[T]) (Write[T], error)

// Write reads the first batch's results (it was sent) and queues the step's
// writes into p, the second batch, ending with the record's update
// (Attempt.QueueFinish, QueueRefuse or QueueNext), whose Outcome it
// returns. check, when not nil, reads the writes' outcomes once p was sent.
// An error of Write itself (a business validation of the reads, say) rolls
// back, like a Mutation's error.
type Write[T any] func(ctx context.Context, p *postgres.Pipeline, a *Attempt[T]) (out Outcome, check func() error, err error)

// ErrSequential, returned by a Batched or a Write or wrapped in what a
// Write's check returns, says that the transaction rolled back (or never
// began) and the statement-by-statement path must decide the request.
var ErrSequential = errors.New("operation: the sequential path decides this request")

// batchLock is the record's lock in a first batch: queue queues it (after
// BEGIN), and the function it returns reads it once the batch was sent. That
// returns the stored outcome when the record was finished meanwhile, or
// ErrSequential when its case is the sequential path's.
type batchLock func(p *postgres.Pipeline) (func() (*idempotency.Response, error), error)

// batches is what a transaction in batches came to.
type batches struct {
	out Outcome
	// sequential: nothing was done (the transaction rolled back, or never
	// began) and the sequential path decides.
	sequential bool
	// wrote: every statement of batch 2 but COMMIT succeeded, so an error
	// is COMMIT's, whose outcome is unknown (a dropped connection).
	wrote bool
}

// inBatches runs a step's transaction on conn as Batched describes, with the
// record locked by lock.
func inBatches[T any](ctx context.Context, r *Runner, conn *pgxpool.Conn, op idempotency.Operation, point idempotency.RecoveryPoint,
	a *Attempt[T], lock batchLock, batched Batched[T]) (res batches, err error) {
	// Whatever stops before COMMIT did leaves a transaction open.
	defer postgres.RollbackOpen(ctx, conn)
	first := postgres.NewPipeline(conn)
	first.Queue("BEGIN")
	locked, err := lock(first)
	if err != nil {
		return batches{}, err
	}
	write, err := batched(ctx, first, a)
	if errors.Is(err, ErrSequential) {
		return batches{sequential: true}, nil // nothing was sent
	}
	if err != nil {
		return batches{}, err
	}
	first.Send(ctx)
	stored, err := locked()
	if stored != nil || err != nil {
		_ = first.Close()
		if errors.Is(err, ErrSequential) {
			return batches{sequential: true}, nil
		}
		if err != nil {
			return batches{}, err
		}
		return batches{out: Outcome{final: stored}}, nil // finished meanwhile
	}
	second := postgres.NewPipeline(conn)
	out, check, err := write(ctx, second, a)
	if cerr := first.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("%s at %s, first batch: %w", op, point, cerr)
	}
	switch {
	case errors.Is(err, ErrSequential):
		return batches{sequential: true}, nil
	case err != nil:
		return batches{}, err
	case out.queued == nil:
		return batches{}, fmt.Errorf("%s at %s: a Write must end with a queued update of its record (Attempt.QueueFinish, QueueRefuse, QueueNext)", op, point)
	}
	if err := r.hooks.beforeCommit(op, point); err != nil {
		return batches{}, err
	}
	second.Queue("COMMIT")
	second.Send(ctx)
	if check != nil {
		err = check()
	}
	err = errors.Join(err, out.queued())
	if errors.Is(err, ErrSequential) {
		_ = second.Close()
		return batches{sequential: true}, nil
	}
	if err != nil {
		_ = second.Close()
		var refused *pgconn.PgError
		if !errors.As(err, &refused) {
			// Not a statement the server refused (which makes it skip the
			// rest, COMMIT included): the connection failed with COMMIT on
			// its way, so whether it committed is unknown.
			return batches{out: out, wrote: true}, err
		}
		return batches{}, err
	}
	if err := second.Close(); err != nil {
		return batches{out: out, wrote: true}, fmt.Errorf("%s at %s, commit: %w", op, point, err)
	}
	return batches{out: out}, nil
}

// claimLock is the first batch's lock of a fresh key: its claim. A key that
// has a record is the sequential path's (Begin decides what the record
// means). The claim, when fresh, becomes a.Claim.
func claimLock[T any](ctx context.Context, r *Runner, a *Attempt[T], claimed **idempotency.QueuedClaim) batchLock {
	return func(p *postgres.Pipeline) (func() (*idempotency.Response, error), error) {
		qc, err := r.store.QueueClaim(ctx, p, a.req)
		if err != nil {
			return nil, err
		}
		*claimed = qc
		return func() (*idempotency.Response, error) {
			c, err := qc.Claim(ctx)
			if errors.Is(err, idempotency.ErrTaken) {
				return nil, ErrSequential
			}
			if err != nil {
				return nil, err
			}
			a.Claim = c
			return nil, nil
		}, nil
	}
}

// runBatched runs req's transaction as l.batched describes. done is false
// when nothing was done and the Mutation must run instead.
func (l *Local[T]) runBatched(ctx context.Context, conn *pgxpool.Conn, req idempotency.Request, in T) (resp idempotency.Response, done bool, err error) {
	a := &Attempt[T]{req: req, Data: in, r: l.r, span: trace.SpanFromContext(ctx)}
	var claim *idempotency.QueuedClaim
	res, err := inBatches(ctx, l.r, conn, l.op, idempotency.PointStarted, a, claimLock(ctx, l.r, a, &claim), l.batched)
	if res.sequential {
		// The Mutation reports its own outcome (a late retry, a replay).
		return idempotency.Response{}, false, nil
	}
	if a.Claim != nil {
		claim.Executed(ctx)
	}
	if err != nil {
		return idempotency.Response{}, true, err
	}
	if res.out.final == nil {
		return idempotency.Response{}, true, fmt.Errorf("local operation %s returned recovery point %q; only Phases operations have recovery points", l.op, res.out.next)
	}
	l.r.afterCommit(a.req.TenantID)
	return *res.out.final, true, nil
}

// QueueNext queues, into the second batch, the record of the step's point
// (with res, the resource it created, if any), and continues there: Next,
// batched.
func (a *Attempt[T]) QueueNext(ctx context.Context, p *postgres.Pipeline, point idempotency.RecoveryPoint, res *idempotency.Resource) (Outcome, error) {
	cp, err := a.Claim.QueueCheckpoint(ctx, p, point, res)
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{next: point, queued: cp.Err}, nil
}

// QueueFinish queues, into the second batch, resp as the operation's final
// outcome: Finish, batched.
func (a *Attempt[T]) QueueFinish(ctx context.Context, p *postgres.Pipeline, resp idempotency.Response, res *idempotency.Resource) (Outcome, error) {
	stored, f, err := a.Claim.QueueFinish(ctx, p, resp, res)
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{final: &stored, queued: f.Err}, nil
}

// QueueRefuse queues a business failure as the operation's final outcome:
// Refuse, batched.
func (a *Attempt[T]) QueueRefuse(ctx context.Context, p *postgres.Pipeline, pe *problem.Error, res *idempotency.Resource) (Outcome, error) {
	return a.QueueFinish(ctx, p, Refusal(pe), res)
}
