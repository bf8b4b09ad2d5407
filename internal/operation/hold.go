package operation

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/attention"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/problem"
)

// What becomes of an attempt that stops without a final outcome: its lease
// is given back for a retry (release), or it is held for an operator (hold).

// NeedsOperatorError is the error of a step whose attempt no retry can
// finish: what it found needs a person (Reason says what kind of thing).
// Phases holds the attempt for an operator and raises an attention item
// with Err's text as its detail, instead of leaving it for retries that
// would find the same again. A feature wraps it into its own errors (as
// payments.ErrMismatch is one), so errors.As finds it anywhere in a chain.
type NeedsOperatorError struct {
	Reason attention.Reason
	Err    error
}

// NeedsOperator returns a NeedsOperatorError.
func NeedsOperator(reason attention.Reason, err error) *NeedsOperatorError {
	return &NeedsOperatorError{Reason: reason, Err: err}
}

func (e *NeedsOperatorError) Error() string { return e.Err.Error() }
func (e *NeedsOperatorError) Unwrap() error { return e.Err }

// hold holds claim's attempt for an operator because of cause (which
// carries needs), and raises its attention item, in one transaction: the
// attempt is never held without its item. It returns the answer to give:
// awaiting_operator once held, the stored outcome when somebody finished the
// attempt first, and otherwise (the claim was no longer this run's, or the
// transaction failed) cause itself, leaving the attempt as it is for the next
// retry, which finds the same and holds it then.
func (r *Runner) hold(ctx context.Context, claim *idempotency.Claim, needs *NeedsOperatorError, cause error) (*idempotency.Response, error) {
	var (
		stored *idempotency.Response
		item   attention.Item
		held   bool
	)
	req := claim.Request()
	txErr := postgres.InTx(ctx, r.pool, func(tx pgx.Tx) error {
		var err error
		if stored, err = claim.Reacquire(ctx, tx); err != nil || stored != nil {
			return err
		}
		at, ok, err := claim.Hold(ctx, tx)
		if err != nil || !ok {
			return err
		}
		it := attention.Item{
			Reason:   needs.Reason,
			Detail:   cause.Error(),
			TenantID: req.TenantID,
			Attempt:  &attention.Attempt{Operation: string(req.Operation), Key: string(req.Key)},
			RaisedAt: at,
		}
		if res := claim.Resource; res != nil {
			it.Resource = &attention.Resource{Type: res.Type, ID: res.ID}
		}
		if item, _, err = attention.Raise(ctx, tx, it); err != nil {
			return err
		}
		held = true
		return nil
	})
	switch {
	case txErr != nil:
		r.logger.ErrorContext(ctx, "attempt needs an operator but could not be held; the next retry tries again",
			"operation", req.Operation, "idempotency_key", string(req.Key), "reason", needs.Reason,
			"error", cause.Error(), "hold_error", txErr.Error())
		return nil, cause
	case stored != nil:
		return stored, nil
	case !held:
		return nil, cause
	}
	r.logger.ErrorContext(ctx, "attempt held for an operator", "attention_id", item.ID, "reason", item.Reason,
		"operation", req.Operation, "idempotency_key", string(req.Key), "error", cause.Error())
	return nil, idempotency.AwaitingOperator(cause)
}

// isHeld reports whether err is the answer for an attempt held for an
// operator: it has no lease to give back.
func isHeld(err error) bool { return problem.CodeOf(err) == problem.AwaitingOperator }

// releaseTimeout bounds release, which runs after the operation's own time
// may be used up (a provider timeout is an unknown outcome).
const releaseTimeout = 5 * time.Second

// release ends the claim's lease after an attempt stopped between its phases
// while this process lives on (Claim.Release, which never touches a lease
// that is not this claim's). A crash cannot release; then the lease and the
// Recoverer do.
//
// The failure that brought us here is often the database connection: when
// the database dropped every backend, each idle connection of the pool is
// dead too and would fail the release the same way. So after a failure on
// the pool, release retries on a connection of its own, opened for it, until
// releaseTimeout. If that fails as well, the lease simply runs out.
func (r *Runner) release(ctx context.Context, claim *idempotency.Claim) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	err := r.releaseOn(rctx, r.pool, claim)
	for wait := 50 * time.Millisecond; err != nil; wait = min(2*wait, time.Second) {
		if err = r.releaseOnFreshConn(rctx, claim); err == nil || rctx.Err() != nil {
			break
		}
		select {
		case <-rctx.Done():
		case <-time.After(wait):
		}
	}
	if err != nil {
		r.logger.ErrorContext(ctx, "release lease; it runs out instead", "operation", claim.Request().Operation,
			"idempotency_key", string(claim.Request().Key), "error", err.Error())
	}
}

func (r *Runner) releaseOn(ctx context.Context, db postgres.TxBeginner, claim *idempotency.Claim) error {
	return postgres.InTx(ctx, db, func(tx pgx.Tx) error {
		released, err := claim.Release(ctx, tx)
		if err == nil && !released {
			r.logger.InfoContext(ctx, "lease not released: not this claim's (never committed, finished, or taken over)",
				"operation", claim.Request().Operation, "idempotency_key", string(claim.Request().Key))
		}
		return err
	})
}

func (r *Runner) releaseOnFreshConn(ctx context.Context, claim *idempotency.Claim) error {
	conn, err := pgx.ConnectConfig(ctx, r.pool.Config().ConnConfig)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return r.releaseOn(ctx, conn, claim)
}
