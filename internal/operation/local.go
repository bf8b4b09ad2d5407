package operation

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/postgres"
)

// Mutation is the body of a local operation: it runs in the transaction that
// holds the claim, makes the change and appends its outbox event in that
// same transaction, and returns the final outcome (Attempt.Finish for the
// answer, Attempt.Refuse for a business failure that is stored). An error
// rolls everything back, the claim included: nothing is stored and the key
// stays free.
type Mutation[T any] func(ctx context.Context, tx pgx.Tx, a *Attempt[T]) (Outcome, error)

// Local is an idempotent local mutation: the brief's single-transaction flow.
//
//	fast path: a final record is read without a lock and replayed
//	BEGIN
//	  claim the key (INSERT ... ON CONFLICT DO NOTHING, then lock it)
//	  final record: replay it; other fingerprint: 422; pending: 409
//	  the mutation and its outbox row
//	  store the response, mark the record final
//	COMMIT
//
// With Batches (WithBatches), a fresh key takes that transaction in two
// pipelined batches instead of a round trip per statement (see Batched).
type Local[T any] struct {
	r       *Runner
	op      idempotency.Operation
	mutate  Mutation[T]
	batched Batched[T]
}

// LocalOption configures a Local.
type LocalOption[T any] func(*Local[T])

// WithBatches runs a fresh key's transaction as batched describes; the
// Mutation remains the path of every other case.
func WithBatches[T any](batched Batched[T]) LocalOption[T] {
	return func(l *Local[T]) { l.batched = batched }
}

// NewLocal returns the local operation op, which runs mutate.
func NewLocal[T any](r *Runner, op idempotency.Operation, mutate Mutation[T], opts ...LocalOption[T]) *Local[T] {
	l := &Local[T]{r: r, op: op, mutate: mutate}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Operation returns the operation's name.
func (l *Local[T]) Operation() idempotency.Operation { return l.op }

// Run executes req with input in at most once. The response is either this
// execution's or a stored one (Replayed).
func (l *Local[T]) Run(ctx context.Context, req idempotency.Request, in T) (idempotency.Response, error) {
	return l.RunWith(ctx, req, Given(in))
}

// RunWith is Run with an input that is decoded and validated only when req
// is not a replay (ParseRequest): its error is the answer, and nothing is
// claimed.
func (l *Local[T]) RunWith(ctx context.Context, req idempotency.Request, input Input[T]) (idempotency.Response, error) {
	if req.Operation != l.op {
		return idempotency.Response{}, fmt.Errorf("operation %s run with a request for %s", l.op, req.Operation)
	}
	ctx, cancel := l.r.detach(ctx)
	defer cancel()

	// One connection for the whole request: the lookup and the transaction.
	conn, err := l.r.pool.Acquire(ctx)
	if err != nil {
		return idempotency.Response{}, fmt.Errorf("acquire a connection: %w", err)
	}
	defer conn.Release()

	// Fast path: a finished record is immutable, so a replay needs no lock
	// and no write transaction.
	resp, in, err := replayOrInput(ctx, l.r.store, conn, req, input)
	if resp != nil || err != nil {
		if resp != nil {
			return *resp, nil
		}
		return idempotency.Response{}, err
	}

	if l.batched != nil {
		resp, done, err := l.runBatched(ctx, conn, req, in)
		if done {
			return resp, err
		}
	}

	var out Outcome
	err = postgres.InTx(ctx, conn, func(tx pgx.Tx) error {
		claim, err := l.r.store.Begin(ctx, tx, req)
		if err != nil {
			return err
		}
		if claim.Kind == idempotency.ClaimReplay {
			out = Outcome{final: &claim.Stored}
			return nil
		}
		// A fresh claim, or (only if a crash ever left one) a pending record
		// of this operation: the mutation's own business uniqueness makes
		// running it again safe.
		a := &Attempt[T]{Claim: claim, Data: in, req: req, r: l.r, span: trace.SpanFromContext(ctx)}
		if out, err = l.mutate(ctx, tx, a); err != nil {
			return err
		}
		if out.final == nil {
			return fmt.Errorf("local operation %s returned recovery point %q; only Phases operations have recovery points", l.op, out.next)
		}
		return l.r.hooks.beforeCommit(l.op, idempotency.PointStarted)
	})
	if err != nil {
		return idempotency.Response{}, err
	}
	if !out.final.Replayed {
		l.r.afterCommit(req.TenantID)
	}
	return *out.final, nil
}

func (h Hooks) beforeCommit(op idempotency.Operation, point idempotency.RecoveryPoint) error {
	if h.BeforeCommit == nil {
		return nil
	}
	return h.BeforeCommit(op, point)
}

func (h Hooks) beforeCall(op idempotency.Operation, point idempotency.RecoveryPoint) error {
	return crash(h.BeforeCall, op, point)
}

func (h Hooks) afterCall(op idempotency.Operation, point idempotency.RecoveryPoint) error {
	return crash(h.AfterCall, op, point)
}

func crash(hook func(idempotency.Operation, idempotency.RecoveryPoint) error, op idempotency.Operation, point idempotency.RecoveryPoint) error {
	if hook == nil {
		return nil
	}
	if err := hook(op, point); err != nil {
		return &crashedError{err}
	}
	return nil
}
