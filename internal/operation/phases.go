package operation

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/attention"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/postgres"
)

// Step is the work of an operation at one recovery point: an optional
// outside call, then one transaction, with the record locked, that makes
// the step's change and returns the next recovery point (Attempt.Next,
// recorded in the same transaction) or the final response (Attempt.Finish,
// Attempt.Refuse).
//
// The transaction is written once, in one of two forms: Tx, statement by
// statement, or Batch, against a pipeline (Batch), where sending costs a
// round trip for everything queued since the last send. Batch pays where
// nothing slower sits beside the transaction (orders.create); next to a
// provider call it does not show, and Tx reads better (payments). A step
// has one of the two, never both.
//
// Call, when set, is the outside call (the payment provider) and runs first,
// with no transaction open; its answer is kept in the Attempt's Data for the
// transaction, which records it. A Call must be safe to repeat: it runs
// again when the operation resumes from this point (the provider's
// idempotency key is the same every time). It returns an error when the
// outcome is unknown (a timeout, a 5xx): the attempt stays at this point for
// a retry or the Recoverer, and the error is the answer (503).
type Step[T any] struct {
	Call  func(ctx context.Context, a *Attempt[T]) error
	Tx    func(ctx context.Context, tx pgx.Tx, a *Attempt[T]) (Outcome, error)
	Batch func(ctx context.Context, b *Batch, a *Attempt[T]) (Outcome, error)
}

// Steps is an operation's step table: the branches of its loop, by recovery
// point. It has a step at idempotency.PointStarted, whose transaction is the
// one that claims the key and which has no Call (the attempt is recorded
// before anything leaves the process).
type Steps[T any] map[idempotency.RecoveryPoint]Step[T]

// Phases is an idempotent operation: a table of steps with recovery points,
// run by one loop. An operation without an outside call is one step
// (orders.create); one with a call is a step that records the attempt, then
// the call and the step that records its answer (payments.create,
// refunds.create). The loop:
//
//	point := the record's recovery point (started for a new key)
//	loop:
//	  step := steps[point]
//	  step.Call (no transaction: the outside call)
//	  BEGIN; lock the record (the claim of a new key, or Reacquire)
//	         finished meanwhile? answer that
//	         step's transaction -> next point (recorded) | final response (stored)
//	  COMMIT
//	until final
//
// A crash between two steps leaves the record pending at the last point that
// committed, with its lease; the client's retry after the lease (Run) and the
// Recoverer (Resume) run this same loop from that point. An attempt that
// stops without a final outcome while its process lives on (an unknown
// outcome, a failed transaction, a panic) gives its lease back at once, so
// its retry resumes without waiting for the lease. A step after the first
// that returns a NeedsOperatorError holds its attempt for an operator
// instead: the answer is awaiting_operator, now and to every retry, until an
// operator releases it. (The first step has no attempt to hold yet: its
// transaction, the claim's, rolls back, and its error is the answer.)
type Phases[T any] struct {
	r     *Runner
	op    idempotency.Operation
	steps Steps[T]
}

// NewPhases returns the operation op driven by steps. A table without a step
// at idempotency.PointStarted, whose first step has a Call, or with a step
// that has not exactly one transaction, is a programming error and panics.
func NewPhases[T any](r *Runner, op idempotency.Operation, steps Steps[T]) *Phases[T] {
	if first, ok := steps[idempotency.PointStarted]; !ok || first.Call != nil {
		panic(fmt.Sprintf("operation %s: the step at %q must be a transaction without a call", op, idempotency.PointStarted))
	}
	for point, st := range steps {
		if (st.Tx == nil) == (st.Batch == nil) {
			panic(fmt.Sprintf("operation %s: the step at %q must have one transaction, Tx or Batch", op, point))
		}
	}
	return &Phases[T]{r: r, op: op, steps: steps}
}

// Operation returns the operation's name.
func (p *Phases[T]) Operation() idempotency.Operation { return p.op }

// Run executes req, a client's request with input in: a new key from the
// start, a replayed key from its stored outcome, and a key whose attempt was
// abandoned (its lease ran out) from the recovery point stored on its record.
func (p *Phases[T]) Run(ctx context.Context, req idempotency.Request, in T) (idempotency.Response, error) {
	return p.RunWith(ctx, req, Given(in))
}

// RunWith is Run with an input that is decoded and validated only when req
// is not a replay (ParseRequest): its error is the answer, and nothing is
// claimed.
//
// The replay lookup and the first step's transaction run on one
// connection. A finished record is immutable, so a replay needs no lock and
// no write transaction: the lookup answers it (Store.Peek).
func (p *Phases[T]) RunWith(ctx context.Context, req idempotency.Request, input Input[T]) (idempotency.Response, error) {
	if req.Operation != p.op {
		return idempotency.Response{}, fmt.Errorf("operation %s run with a request for %s", p.op, req.Operation)
	}
	ctx, cancel := p.r.detach(ctx)
	defer cancel()
	conn, err := p.r.pool.Acquire(ctx)
	if err != nil {
		return idempotency.Response{}, fmt.Errorf("acquire a connection: %w", err)
	}
	defer func() {
		if conn != nil {
			conn.Release()
		}
	}()
	resp, in, err := replayOrInput(ctx, p.r.store, conn, req, input)
	if resp != nil || err != nil {
		if resp != nil {
			return *resp, nil
		}
		return idempotency.Response{}, err
	}
	a := &Attempt[T]{Data: in, req: req, r: p.r, span: trace.SpanFromContext(ctx), conn: conn}
	conn = nil // the attempt's first transaction releases it
	return p.drive(ctx, a, idempotency.PointStarted)
}

// Resume finishes claim, an abandoned attempt the Recoverer took over, from
// the recovery point stored on its record. Like a request, it runs to its end
// within the write timeout even when ctx is cancelled (shutdown).
func (p *Phases[T]) Resume(ctx context.Context, claim *idempotency.Claim) (idempotency.Response, error) {
	ctx, cancel := p.r.detach(ctx)
	defer cancel()
	a := &Attempt[T]{Claim: claim, req: claim.Request(), r: p.r, span: trace.SpanFromContext(ctx)}
	if claim.Request().Operation != p.op || claim.RecoveryPoint == idempotency.PointStarted {
		// A record at started never commits pending (its first step runs in
		// the claim's transaction), and the first step needs the request's
		// input, which only the client has.
		p.r.release(ctx, claim)
		return idempotency.Response{}, fmt.Errorf("operation %s cannot resume %s %q at %q", p.op, claim.Request().Operation, claim.Request().Key, claim.RecoveryPoint)
	}
	return p.drive(ctx, a, claim.RecoveryPoint)
}

// drive runs the loop from point until a final response. Whenever it stops
// without one, by an error or a panic, the claim's lease is given back before
// the caller answers: the attempt stays pending but nobody works on it any
// more, so the client's retry resumes it at once instead of meeting
// request_in_progress until the lease runs out. Only a crash keeps the lease
// (a test's hook stands for one: hooks.go); the lease and the Recoverer
// deal with those. A step's NeedsOperatorError holds the attempt
// (Runner.hold), which leaves no lease to give back; so does the Recoverer's
// last recovery that ends without an outcome (RecoveryBound), with reason
// recovery_exhausted.
//
// Money safety: a Call is synchronous, so once drive has returned no outside
// call of this attempt is left running in this process. One the provider may
// still be executing (a timeout) is what the resumed attempt's lookup and its
// unchanged provider key are for, exactly as after an unknown outcome.
func (p *Phases[T]) drive(ctx context.Context, a *Attempt[T], point idempotency.RecoveryPoint) (resp idempotency.Response, err error) {
	defer func() {
		if a.conn != nil { // the first transaction never ran
			a.conn.Release()
		}
		if v := recover(); v != nil {
			if a.Claim != nil {
				p.r.release(ctx, a.Claim)
			}
			panic(v)
		}
		if err == nil || a.Claim == nil || isCrash(err) || isHeld(err) {
			return
		}
		if !p.r.bound.exhausted(a.Claim) {
			p.r.release(ctx, a.Claim)
			return
		}
		// The Recoverer's last recovery of this attempt ended without an
		// outcome too: an operator's, from now on.
		needs := NeedsOperator(attention.ReasonRecoveryExhausted,
			fmt.Errorf("no outcome after %d recoveries, the last at %s: %w", a.Claim.Recovery, point, err))
		if stored, herr := p.r.hold(ctx, a.Claim, needs, needs); stored != nil {
			resp, err = *stored, nil
		} else if isHeld(herr) {
			err = herr
		} else {
			p.r.release(ctx, a.Claim)
		}
	}()
	for {
		step, ok := p.steps[point]
		if !ok { // a record at a point of an older step table
			return idempotency.Response{}, fmt.Errorf("operation %s has no step at recovery point %q", p.op, point)
		}
		if step.Call != nil {
			if err := p.r.hooks.beforeCall(p.op, point); err != nil {
				return idempotency.Response{}, err
			}
			if err := step.Call(ctx, a); err != nil {
				return p.stop(ctx, a, err)
			}
			if err := p.r.hooks.afterCall(p.op, point); err != nil {
				return idempotency.Response{}, err
			}
		}
		out, err := p.transact(ctx, a, point, step)
		if err != nil {
			return p.stop(ctx, a, err)
		}
		if out.final != nil {
			if !out.final.Replayed {
				p.r.afterCommit(a.req.TenantID)
			}
			return *out.final, nil
		}
		point = out.next
	}
}

// stop ends the loop after a step failed: a step that needs an operator
// holds the attempt, any other error is the answer as it is.
func (p *Phases[T]) stop(ctx context.Context, a *Attempt[T], err error) (idempotency.Response, error) {
	var needs *NeedsOperatorError
	if !errors.As(err, &needs) || isCrash(err) || a.Claim == nil {
		return idempotency.Response{}, err
	}
	stored, err := p.r.hold(ctx, a.Claim, needs, err)
	if stored != nil {
		return *stored, nil
	}
	return idempotency.Response{}, err
}

// transact runs the transaction of the step at point: the one place where a
// step's transaction runs, for a new key, a retry, a resume and the
// Recoverer alike. The record's lock comes first: the claim of a new key,
// or, once the attempt has its record, Reacquire. The claim may find the key
// taken: then the record decides instead of the step (claimTaken).
func (p *Phases[T]) transact(ctx context.Context, a *Attempt[T], point idempotency.RecoveryPoint, step Step[T]) (Outcome, error) {
	conn := a.conn
	a.conn = nil
	if conn == nil {
		var err error
		if conn, err = p.r.pool.Acquire(ctx); err != nil {
			return Outcome{}, fmt.Errorf("acquire a connection: %w", err)
		}
	}
	claiming := a.Claim == nil
	out, committing, err := func() (Outcome, bool, error) {
		defer conn.Release() // a panic of the step's too
		if step.Batch != nil {
			return p.inBatch(ctx, conn, a, point, step.Batch)
		}
		return p.inTx(ctx, conn, a, point, step.Tx)
	}()
	if claiming && err != nil && !committing {
		// The claim rolled back with its transaction: no record of this
		// attempt is left, and nothing to give back.
		a.Claim = nil
	}
	if errors.Is(err, errTaken) {
		decided, err := p.claimTaken(ctx, a, point)
		if err != nil || decided != nil {
			return outcomeOf(decided), err
		}
		// Taken over at this very point: the step runs under the claim.
		return p.transact(ctx, a, point, step)
	}
	return out, err
}

// inTx runs a step's transaction statement by statement on conn.
// committing reports an error that is COMMIT's, whose outcome is unknown.
func (p *Phases[T]) inTx(ctx context.Context, conn *pgxpool.Conn, a *Attempt[T], point idempotency.RecoveryPoint,
	body func(context.Context, pgx.Tx, *Attempt[T]) (Outcome, error)) (out Outcome, committing bool, err error) {
	var ran bool
	err = postgres.InTx(ctx, conn, func(tx pgx.Tx) error {
		err := func() error {
			var decided *Outcome
			if a.Claim == nil {
				claim, err := p.r.store.Begin(ctx, tx, a.req)
				if err != nil {
					return err
				}
				decided = p.claimed(a, claim, point)
			} else {
				stored, err := a.Claim.Reacquire(ctx, tx)
				if err != nil {
					return err
				}
				if stored != nil { // finished meanwhile by a retry, the Recoverer or a webhook
					decided = &Outcome{final: stored}
				}
			}
			if decided != nil {
				out = *decided
				return nil
			}
			var err error
			if out, err = body(ctx, tx, a); err != nil {
				return err
			}
			if err := p.check(point, out); err != nil {
				return err
			}
			return p.r.hooks.beforeCommit(p.op, point)
		}()
		ran = err == nil
		return err
	})
	return out, ran, err
}

// check checks what the step at point returned, before its transaction
// commits: a final response, or a recovery point the operation has a step
// for. Anything else is a programming error, and nothing of it commits.
func (p *Phases[T]) check(point idempotency.RecoveryPoint, out Outcome) error {
	if out.final != nil {
		return nil
	}
	if out.next == "" {
		return fmt.Errorf("%s at %s: the step returned no outcome (Attempt.Next, Finish or Refuse)", p.op, point)
	}
	if _, ok := p.steps[out.next]; !ok {
		return fmt.Errorf("%s at %s: the step moved to %q, where the operation has no step", p.op, point, out.next)
	}
	return nil
}

// claimed is what a claim of a new key means for the step at point: nil to
// run the step (a fresh claim, or one taken over at this point), or the
// outcome the record decided: a replay, or an attempt taken over after its
// lease at a later point, which its transaction's commit takes over and the
// loop resumes there.
func (p *Phases[T]) claimed(a *Attempt[T], claim *idempotency.Claim, point idempotency.RecoveryPoint) *Outcome {
	if claim.Kind == idempotency.ClaimReplay {
		return &Outcome{final: &claim.Stored}
	}
	a.Claim = claim
	if claim.RecoveryPoint != point {
		return &Outcome{next: claim.RecoveryPoint}
	}
	return nil
}

// claimTaken decides, statement by statement, for a new key whose claim in
// a step's batch found a record (a concurrent duplicate, a key reused with
// another request, an abandoned attempt): the batch rolled back, and the
// claim is made again in a transaction of its own, which reads the record
// under its lock and commits a take-over (Store.Begin). nil means the
// attempt was taken over at point itself.
func (p *Phases[T]) claimTaken(ctx context.Context, a *Attempt[T], point idempotency.RecoveryPoint) (*Outcome, error) {
	var decided *Outcome
	err := postgres.InTx(ctx, p.r.pool, func(tx pgx.Tx) error {
		claim, err := p.r.store.Begin(ctx, tx, a.req)
		if err != nil {
			return err
		}
		decided = p.claimed(a, claim, point)
		return nil
	})
	return decided, err
}

func outcomeOf(o *Outcome) Outcome {
	if o == nil {
		return Outcome{}
	}
	return *o
}
