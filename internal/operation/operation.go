// Package operation runs every idempotent operation of the service on top
// of the idempotency store, so that each is written the same way and none
// copies the skeleton of another. Read it in this order:
//
//   - phases.go: Phases, an operation as a table of steps keyed by recovery
//     point, and the one loop that runs them (the design Stripe describes for
//     its API, written as one loop like rocket-rides-atomic's). Each step is
//     one transaction, or an outside call followed by the transaction that
//     records its outcome, and returns the next recovery point or the final
//     response. A local mutation is one step (orders.create); a payment is a
//     step, a provider call and a step (payments.create, refunds.create).
//     The request, a client's retry after the lease ran out and the
//     Recoverer all run that same loop from the recovery point stored on the
//     record, and the idempotency record, the business change, its outbox
//     row and the stored answer commit in one transaction.
//   - attempt.go: what a step works with (Attempt) and returns (Outcome).
//   - batch.go: the pipelined form of a step's transaction (Batch).
//   - hold.go: an attempt that stops without an outcome gives its lease back;
//     one no retry can finish (a step's NeedsOperatorError) is held for an
//     operator, with its item in the needs-attention queue (package
//     attention), and its client's retry is answered awaiting_operator.
//   - recoverer.go: Recoverer resumes abandoned attempts.
//   - request.go: ParseRequest reads what every idempotent POST needs, in
//     the order the contract checks it: the key, the path's id, the body's
//     fingerprint, and the body decoded strictly and validated as the
//     request's Input, which RunWith asks for only when the request is not a
//     replay.
//   - spec.go: Spec declares an operation for the service's registry
//     (internal/app), from which its retention, its configuration and the
//     Recoverer's list derive.
//   - keys.go: GET /v1/idempotency-keys/{operation}/{key}, what a client
//     may know of its own key (KeyHandler).
//   - hooks.go: the failure drills' fault hooks, which only tests set.
package operation

import (
	"context"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/idempotency"
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

// detach gives a started operation its own deadline: it runs to its end even
// when the client hangs up.
func (r *Runner) detach(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), r.writeTimeout)
}
