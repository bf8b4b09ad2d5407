package operation

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/attention"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/postgres"
)

// Step is the work of an operation at one recovery point.
//
// Tx runs in one transaction, with the claim's record locked: it makes its
// change and returns the next recovery point (Attempt.Next, recorded in the
// same transaction) or the final response (Attempt.Finish, Attempt.Refuse).
//
// Call, when set, is the outside call (the payment provider) and runs first,
// with no transaction open; its answer is kept in the Attempt's Data for Tx,
// which records it. A Call must be safe to repeat: it runs again when the
// operation resumes from this point (the provider's idempotency key is the
// same every time, rule 7). It returns an error when the outcome is unknown
// (a timeout, a 5xx): the attempt stays at this point for a retry or the
// Recoverer, and the error is the answer (503).
type Step[T any] struct {
	Call func(ctx context.Context, a *Attempt[T]) error
	Tx   func(ctx context.Context, tx pgx.Tx, a *Attempt[T]) (Outcome, error)
}

// Steps is an operation's step table: the branches of its loop, by recovery
// point. It has a step at idempotency.PointStarted, which runs in the
// transaction that claims the key and has no Call (the attempt is recorded
// before anything leaves the process).
type Steps[T any] map[idempotency.RecoveryPoint]Step[T]

// Phases is an operation with an external side effect, run as atomic phases
// with recovery points. Its loop:
//
//	point := the record's recovery point (started for a new key)
//	loop:
//	  step := steps[point]
//	  step.Call (no transaction: the outside call)
//	  BEGIN; lock the record; finished by somebody else? answer that
//	         step.Tx -> next point (recorded) | final response (stored)
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
// at idempotency.PointStarted, or whose first step has a Call or no Tx, is a
// programming error and panics.
func NewPhases[T any](r *Runner, op idempotency.Operation, steps Steps[T]) *Phases[T] {
	first, ok := steps[idempotency.PointStarted]
	if !ok || first.Tx == nil || first.Call != nil {
		panic(fmt.Sprintf("operation %s: the step at %q must be a transaction without a call", op, idempotency.PointStarted))
	}
	for point, st := range steps {
		if st.Tx == nil {
			panic(fmt.Sprintf("operation %s: the step at %q has no transaction", op, point))
		}
	}
	return &Phases[T]{r: r, op: op, steps: steps}
}

// Operation returns the operation's name.
func (p *Phases[T]) Operation() idempotency.Operation { return p.op }

// Points returns the recovery points the operation has steps for.
func (p *Phases[T]) Points() []idempotency.RecoveryPoint {
	out := make([]idempotency.RecoveryPoint, 0, len(p.steps))
	for point := range p.steps {
		out = append(out, point)
	}
	return out
}

// Run executes req, a client's request with input in: a new key from the
// start, a replayed key from its stored outcome, and a key whose attempt was
// abandoned (its lease ran out) from the recovery point stored on its record.
func (p *Phases[T]) Run(ctx context.Context, req idempotency.Request, in T) (idempotency.Response, error) {
	return p.RunWith(ctx, req, Given(in))
}

// RunWith is Run with an input that is decoded and validated only when req
// is not a replay (ParseRequest): its error is the answer, and nothing is
// claimed.
func (p *Phases[T]) RunWith(ctx context.Context, req idempotency.Request, input Input[T]) (idempotency.Response, error) {
	if req.Operation != p.op {
		return idempotency.Response{}, fmt.Errorf("operation %s run with a request for %s", p.op, req.Operation)
	}
	ctx, cancel := p.r.detach(ctx)
	defer cancel()
	a := &Attempt[T]{req: req, r: p.r, span: trace.SpanFromContext(ctx)}
	out, committing, err := p.start(ctx, a, input)
	if err != nil {
		if committing && a.Claim != nil && out.final == nil {
			// The commit may have happened although it reported an error (a
			// dropped connection): give a claim that may exist back at once.
			// If nothing committed, the record is not leased by this claim
			// and release changes nothing.
			p.r.release(ctx, a.Claim)
		}
		return idempotency.Response{}, err
	}
	if out.final != nil && !out.final.Replayed {
		p.r.afterCommit(a.req.TenantID)
	}
	return p.drive(ctx, a, out)
}

// start runs the request's first transaction, on one connection: the
// replay lookup, then the claim with the first step. committing reports an
// error that is the commit's.
func (p *Phases[T]) start(ctx context.Context, a *Attempt[T], input Input[T]) (out Outcome, committing bool, err error) {
	conn, err := p.r.pool.Acquire(ctx)
	if err != nil {
		return Outcome{}, false, fmt.Errorf("acquire a connection: %w", err)
	}
	defer conn.Release()
	req := a.req
	resp, in, err := replayOrInput(ctx, p.r.store, conn, req, input)
	if resp != nil || err != nil {
		if resp != nil {
			return Outcome{final: resp}, false, nil
		}
		return Outcome{}, false, err
	}
	a.Data = in
	first := p.steps[idempotency.PointStarted]
	var ran bool // the transaction's work succeeded: an error now is its commit's
	err = postgres.InTx(ctx, conn, func(tx pgx.Tx) error {
		err := func() error {
			claim, err := p.r.store.Begin(ctx, tx, req)
			if err != nil {
				return err
			}
			a.Claim = claim
			switch {
			case claim.Kind == idempotency.ClaimReplay:
				out = Outcome{final: &claim.Stored}
				return nil
			case claim.RecoveryPoint == idempotency.PointStarted:
				// The first step shares the claim's transaction: the key and
				// the recorded attempt commit together (rule 3).
				if out, err = first.Tx(ctx, tx, a); err != nil {
					return err
				}
				return p.r.hooks.beforeCommit(p.op, idempotency.PointStarted)
			default:
				// Taken over after its lease: the take-over commits, and the
				// loop resumes from the stored point.
				out = Outcome{next: claim.RecoveryPoint}
				return nil
			}
		}()
		ran = err == nil
		return err
	})
	return out, ran, err
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
	return p.drive(ctx, a, Outcome{next: claim.RecoveryPoint})
}

// drive runs the loop from out until a final response. Whenever it stops
// without one, by an error or a panic, the claim's lease is given back before
// the caller answers: the attempt stays pending but nobody works on it any
// more, so the client's retry resumes it at once instead of meeting
// request_in_progress until the lease runs out. Only a crash keeps the lease
// (the AfterCall hook stands for one); the lease and the Recoverer deal with
// those. A step's NeedsOperatorError holds the attempt (Runner.hold), which
// leaves no lease to give back; so does the Recoverer's last recovery that
// ends without an outcome (RecoveryBound), with reason recovery_exhausted.
//
// Money safety: a Call is synchronous, so once drive has returned no outside
// call of this attempt is left running in this process. One the provider may
// still be executing (a timeout) is what the resumed attempt's lookup and its
// unchanged provider key are for, exactly as after an unknown outcome.
func (p *Phases[T]) drive(ctx context.Context, a *Attempt[T], out Outcome) (resp idempotency.Response, err error) {
	defer func() {
		if v := recover(); v != nil {
			p.r.release(ctx, a.Claim)
			panic(v)
		}
		if err == nil || isCrash(err) || isHeld(err) {
			return
		}
		if !p.r.bound.exhausted(a.Claim) {
			p.r.release(ctx, a.Claim)
			return
		}
		// The Recoverer's last recovery of this attempt ended without an
		// outcome too: an operator's, from now on.
		needs := NeedsOperator(attention.ReasonRecoveryExhausted,
			fmt.Errorf("no outcome after %d recoveries, the last at %s: %w", a.Claim.Recovery, out.next, err))
		if stored, herr := p.r.hold(ctx, a.Claim, needs, needs); stored != nil {
			resp, err = *stored, nil
		} else if isHeld(herr) {
			err = herr
		} else {
			p.r.release(ctx, a.Claim)
		}
	}()
	// stop ends the loop after a step failed: a step that needs an operator
	// holds the attempt, any other error is the answer as it is.
	stop := func(err error) (idempotency.Response, error) {
		var needs *NeedsOperatorError
		if !errors.As(err, &needs) || isCrash(err) {
			return idempotency.Response{}, err
		}
		stored, err := p.r.hold(ctx, a.Claim, needs, err)
		if stored != nil {
			return *stored, nil
		}
		return idempotency.Response{}, err
	}
	for out.final == nil {
		point := out.next
		step, ok := p.steps[point]
		if !ok {
			return idempotency.Response{}, fmt.Errorf("operation %s has no step at recovery point %q", p.op, point)
		}
		if step.Call != nil {
			if err := p.r.hooks.beforeCall(p.op, point); err != nil {
				return idempotency.Response{}, err
			}
			if err := step.Call(ctx, a); err != nil {
				return stop(err)
			}
			if err := p.r.hooks.afterCall(p.op, point); err != nil {
				return idempotency.Response{}, err
			}
		}
		err := postgres.InTx(ctx, p.r.pool, func(tx pgx.Tx) error {
			stored, err := a.Claim.Reacquire(ctx, tx)
			if err != nil {
				return err
			}
			if stored != nil { // finished meanwhile by a retry or the Recoverer
				out = Outcome{final: stored}
				return nil
			}
			if out, err = step.Tx(ctx, tx, a); err != nil {
				return err
			}
			return p.r.hooks.beforeCommit(p.op, point)
		})
		if err != nil {
			return stop(err)
		}
		if out.final != nil && !out.final.Replayed {
			p.r.afterCommit(a.req.TenantID)
		}
	}
	return *out.final, nil
}
