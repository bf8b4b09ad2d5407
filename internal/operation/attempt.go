package operation

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/problem"
)

// Outcome is what a step returns: the next recovery point (the step's
// transaction recorded it) or the final response (stored, or replayed
// because somebody else finished first). Build it with Attempt.Next,
// Attempt.Finish or Attempt.Refuse.
type Outcome struct {
	next  idempotency.RecoveryPoint
	final *idempotency.Response
	// done reads the outcome of the record's update, when a Batch step
	// queued it: after the loop sent it with COMMIT.
	done func() error
}

// Attempt is one run of an operation: the claim it holds and Data, the run's
// own state (the request's input on a fresh run, and what its steps load and
// learn on the way; a resumed run starts with the zero value).
type Attempt[T any] struct {
	Claim *idempotency.Claim
	Data  T
	req   idempotency.Request
	r     *Runner
	// span is the span of the request or resume that runs the attempt,
	// where LateRetry reports its outcome.
	span trace.Span
	// conn is the connection the request's replay lookup ran on, which its
	// first transaction takes over.
	conn *pgxpool.Conn
}

// Request returns the request the attempt runs: the client's, or the one
// its claim was made for when the Recoverer resumes it.
func (a *Attempt[T]) Request() idempotency.Request { return a.req }

// Next records, in the step's transaction tx (a pgx.Tx, or the step's
// Batch), that the operation reached point (with res, the resource it
// created, if any), and continues there.
func (a *Attempt[T]) Next(ctx context.Context, tx idempotency.DB, point idempotency.RecoveryPoint, res *idempotency.Resource) (Outcome, error) {
	if a.Claim == nil {
		return Outcome{}, errUnclaimed
	}
	done, err := a.Claim.Checkpoint(ctx, tx, point, res)
	if err != nil {
		return Outcome{}, err
	}
	return settle(tx, Outcome{next: point}, done)
}

// Finish stores resp as the operation's final outcome, in the step's
// transaction tx.
func (a *Attempt[T]) Finish(ctx context.Context, tx idempotency.DB, resp idempotency.Response, res *idempotency.Resource) (Outcome, error) {
	if a.Claim == nil {
		return Outcome{}, errUnclaimed
	}
	stored, done, err := a.Claim.Finish(ctx, tx, resp, res)
	if err != nil {
		return Outcome{}, err
	}
	return settle(tx, Outcome{final: &stored}, done)
}

// Refuse stores a business failure (order_already_paid, card_declined, ...)
// as the operation's final outcome: it is replayed like a success, for the
// key's whole retention.
func (a *Attempt[T]) Refuse(ctx context.Context, tx idempotency.DB, pe *problem.Error, res *idempotency.Resource) (Outcome, error) {
	return a.Finish(ctx, tx, Refusal(pe), res)
}

// errUnclaimed is the error of a record's update before the key was
// claimed: a Batch step's before its first Send.
var errUnclaimed = fmt.Errorf("operation: the key is not claimed before the first Send: %w", idempotency.ErrNotLocked)

// settle reads the outcome of the record's update done at once on a
// transaction; a Batch step's is read after the loop sent it.
func settle(tx idempotency.DB, out Outcome, done func() error) (Outcome, error) {
	if _, batched := tx.(*Batch); batched {
		out.done = done
		return out, nil
	}
	return out, done()
}

// Refusal is the stored response of a business failure: what Refuse
// stores.
func Refusal(pe *problem.Error) idempotency.Response {
	return idempotency.Response{
		Status:      problem.Status(pe.Code),
		ContentType: problem.ContentType,
		Body:        pe.JSON(),
	}
}

// LateRetry checks a key that already created the resource (kind, id)
// although it has no idempotency record: the record expired and a genuine
// late retry arrived. fingerprint is the one the resource kept. The same
// request is reported as OutcomeLateRetry and may go on to answer from the
// resource; another request under the key is refused.
func (a *Attempt[T]) LateRetry(kind, id string, fingerprint []byte) error {
	req := a.req
	if idempotency.Fingerprint(fingerprint) != req.Fingerprint {
		return problem.New(problem.IdempotencyKeyReused, "This Idempotency-Key already created %s %s with a different request.", kind, id)
	}
	a.r.store.Observe(req.Operation, idempotency.OutcomeLateRetry)
	idempotency.Annotate(a.span, req, idempotency.OutcomeLateRetry)
	a.r.logger.InfoContext(trace.ContextWithSpan(context.Background(), a.span), "late retry answered from the resource its key created",
		"operation", req.Operation, "idempotency_key", string(req.Key), "resource", kind, "resource_id", id, "request_id", req.RequestID)
	return nil
}
