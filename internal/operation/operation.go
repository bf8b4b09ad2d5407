// Package operation runs the two flows of the brief on top of the
// idempotency store, so that every idempotent operation of the service is
// written the same way and none copies the skeleton of another:
//
//   - Local runs an idempotent local mutation in one transaction: claim the
//     key, replay a stored outcome, run the mutation (which appends its
//     outbox event), store the response, commit (rules 3 and 6; the brief's
//     "local mutation" flow, orders.create).
//   - Phases runs an operation with an external side effect as atomic phases
//     with recovery points (the design Stripe describes for its API, written
//     as one loop like rocket-rides-atomic's): each step is one transaction,
//     or the outside call followed by the transaction that records its
//     outcome, and returns the next recovery point or the final response.
//     The request, a client's retry after the lease ran out and the
//     Recoverer all run that same loop, starting from the recovery point
//     stored on the record (rules 3 and 7; payments.create, refunds.create).
//   - Recoverer resumes abandoned attempts of every Phases operation.
//   - An attempt that no retry can finish is held for an operator: a step
//     says so with a NeedsOperatorError, and Phases holds the attempt
//     (idempotency.Claim.Hold) and raises its item in the needs-attention
//     queue (package attention) in one transaction. From then on its
//     client's retry is answered awaiting_operator and runs nothing.
//   - ParseRequest reads what every idempotent POST needs, in the order the
//     contract checks it: the key, the path's id, the body's fingerprint,
//     and the body decoded strictly and validated as the request's Input,
//     which RunWith asks for only when the request is not a replay.
//
// Spec declares an operation for the service's registry (internal/app), from
// which its retention, its configuration and the Recoverer's list derive.
package operation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/attention"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/tracing"
)

// DefaultWriteTimeout bounds a started operation unless WithWriteTimeout
// says otherwise.
const DefaultWriteTimeout = 10 * time.Second

// Runner holds what every operation runs with: the database, the
// idempotency store, and what to do after a commit. Features build their
// Local and Phases operations on one Runner.
type Runner struct {
	pool         *pgxpool.Pool
	store        *idempotency.Store
	logger       *slog.Logger
	writeTimeout time.Duration
	afterCommit  func(tenant uuid.UUID)
	hooks        Hooks
	bound        RecoveryBound
	tracer       trace.Tracer
}

// RecoveryBound bounds the Recoverer's work on an attempt that keeps ending
// without an outcome (the provider is down, or keeps timing out): it spaces
// its recoveries out and, after MaxAttempts of them, holds the attempt for
// an operator (an attention item of reason recovery_exhausted) instead of
// trying forever. A client's own retry is never delayed by the backoff and
// does not count as a recovery: the client is there, and its retry is the
// same loop.
type RecoveryBound struct {
	// MaxAttempts is how many recoveries an attempt gets; 0 is no bound.
	MaxAttempts int
	// Backoff is the wait after an attempt's first recovery, doubled after
	// each further one, up to MaxBackoff.
	Backoff, MaxBackoff time.Duration
}

// The defaults of RecoveryBound: ten recoveries, waiting 30s, 1m, 2m, 4m,
// 8m and then 15m between them, so the last comes about 75 minutes after the
// first: an hour's provider outage does not exhaust the bound.
const (
	DefaultMaxRecoveries      = 10
	DefaultRecoveryBackoff    = 30 * time.Second
	DefaultMaxRecoveryBackoff = 15 * time.Minute
)

// DefaultRecoveryBound is the RecoveryBound unless WithRecoveryBound says
// otherwise.
var DefaultRecoveryBound = RecoveryBound{MaxAttempts: DefaultMaxRecoveries, Backoff: DefaultRecoveryBackoff, MaxBackoff: DefaultMaxRecoveryBackoff}

// wait returns how long after its nth recovery an attempt waits for the
// next one.
func (b RecoveryBound) wait(n int) time.Duration {
	d := b.Backoff
	for i := 1; i < n && d < b.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, b.MaxBackoff)
}

// exhausted reports whether claim is the Recoverer's last recovery of its
// attempt (or past it).
func (b RecoveryBound) exhausted(claim *idempotency.Claim) bool {
	return b.MaxAttempts > 0 && claim.Recovery >= b.MaxAttempts
}

// WithRecoveryBound sets the Recoverer's bound and backoff (default
// DefaultRecoveryBound).
func WithRecoveryBound(b RecoveryBound) Option { return func(r *Runner) { r.bound = b } }

// Option configures a Runner.
type Option func(*Runner)

// WithWriteTimeout bounds a started operation. It runs to its end even when
// the client hangs up (its context is detached from the request's), so a
// lost response never leaves half a decision behind and the retry is
// answered by a replay; the bound keeps a dead dependency from holding it
// forever (default DefaultWriteTimeout, 10s).
func WithWriteTimeout(d time.Duration) Option { return func(r *Runner) { r.writeTimeout = d } }

// WithAfterCommit calls fn after every commit that finished an operation
// (not after a replay, and not after a phase that only recorded a recovery
// point) with the request's tenant: the operation may have appended an
// outbox event of that tenant, and fn wakes the dispatcher for it
// (outbox.Signal.Committed). It must not block (default none).
func WithAfterCommit(fn func(tenant uuid.UUID)) Option { return func(r *Runner) { r.afterCommit = fn } }

// WithTracerProvider traces the Recoverer's work with tp: one span per
// resumed attempt, linked to the trace of the request that started it
// (default none: tracing.Disabled).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(r *Runner) { r.tracer = tp.Tracer(instrumentation) }
}

// instrumentation names this package's spans' instrumentation scope.
const instrumentation = "github.com/oncepay/oncepay/internal/operation"

// WithHooks injects faults at the points where a process can die. Only tests
// set it: production code never does (default none).
func WithHooks(h Hooks) Option { return func(r *Runner) { r.hooks = h } }

// NewRunner returns a Runner.
func NewRunner(pool *pgxpool.Pool, store *idempotency.Store, logger *slog.Logger, opts ...Option) *Runner {
	r := &Runner{pool: pool, store: store, logger: logger, writeTimeout: DefaultWriteTimeout, afterCommit: func(uuid.UUID) {}, bound: DefaultRecoveryBound,
		tracer: tracing.Disabled().Tracer(instrumentation)}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Store returns the idempotency store the runner claims keys with.
func (r *Runner) Store() *idempotency.Store { return r.store }

// Hooks inject faults for the failure drills; each nil hook does nothing.
// They exist for tests only (WithHooks).
type Hooks struct {
	// BeforeCall runs before a step's outside call, after the step before it
	// committed. An error stops the operation there, as a crash would: the
	// claim keeps its lease, and nothing reached the outside world.
	BeforeCall func(op idempotency.Operation, point idempotency.RecoveryPoint) error
	// AfterCall runs after a step's outside call returned and before the
	// step's transaction records its outcome. An error stops the operation
	// right there, as a crash would (drill 7): the claim keeps its lease,
	// which a dead process cannot give back.
	AfterCall func(op idempotency.Operation, point idempotency.RecoveryPoint) error
	// BeforeCommit runs inside every step's transaction just before it
	// commits. An error rolls the step back, as a lost database connection
	// would; the process lives on.
	BeforeCommit func(op idempotency.Operation, point idempotency.RecoveryPoint) error
}

// crashedError is the error of the BeforeCall and AfterCall hooks: the
// process "died" there, so nothing of it may run afterwards, release
// included.
type crashedError struct{ err error }

func (e *crashedError) Error() string { return e.err.Error() }
func (e *crashedError) Unwrap() error { return e.err }

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

// Outcome is what a step returns: the next recovery point (the step's
// transaction recorded it) or the final response (stored, or replayed
// because somebody else finished first). Build it with Attempt.Next,
// Attempt.Finish or Attempt.Refuse.
type Outcome struct {
	next  idempotency.RecoveryPoint
	final *idempotency.Response
	// queued reads the outcome of the record's update, when a Write queued
	// it into its second batch (Attempt.QueueFinish, QueueNext).
	queued func() error
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
}

// Request returns the request the attempt runs: the client's, or the one
// its claim was made for when the Recoverer resumes it.
func (a *Attempt[T]) Request() idempotency.Request { return a.req }

// Next records, in the step's transaction, that the operation reached point
// (with res, the resource it created, if any), and continues there.
func (a *Attempt[T]) Next(ctx context.Context, tx pgx.Tx, point idempotency.RecoveryPoint, res *idempotency.Resource) (Outcome, error) {
	if err := a.Claim.Checkpoint(ctx, tx, point, res); err != nil {
		return Outcome{}, err
	}
	return Outcome{next: point}, nil
}

// Finish stores resp as the operation's final outcome, in the step's
// transaction.
func (a *Attempt[T]) Finish(ctx context.Context, tx pgx.Tx, resp idempotency.Response, res *idempotency.Resource) (Outcome, error) {
	stored, err := a.Claim.Finish(ctx, tx, resp, res)
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{final: &stored}, nil
}

// Refuse stores a business failure (order_already_paid, card_declined, ...)
// as the operation's final outcome: it is replayed like a success, for the
// key's whole retention.
func (a *Attempt[T]) Refuse(ctx context.Context, tx pgx.Tx, pe *problem.Error, res *idempotency.Resource) (Outcome, error) {
	return a.Finish(ctx, tx, Refusal(pe), res)
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
// late retry arrived (drill 8). fingerprint is the one the resource kept.
// The same request is reported as OutcomeLateRetry and may go on to answer
// from the resource; another request under the key is refused.
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

// detach gives a started operation its own deadline: it runs to its end even
// when the client hangs up.
func (r *Runner) detach(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), r.writeTimeout)
}

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

// isCrash reports whether err is a hook's stand-in for a crash.
func isCrash(err error) bool {
	var c *crashedError
	return errors.As(err, &c)
}
