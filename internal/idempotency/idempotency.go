// Package idempotency makes a POST safe to repeat: the same business intent,
// sent any number of times, has its effect once and always gets the same
// answer.
//
// A key names a business intent, never a transport attempt, and is scoped
// by tenant and operation. The claim on a key is a row in api_idempotency
// written by the service's own transaction, the one that also writes the
// business mutation, the outbox row and the stored response; the primary
// key decides races, never a check-then-act. The same key with another
// request fingerprint is refused. Records live for a per-operation
// retention that covers the business process's whole replay horizon
// (Policy). docs/RULES.md maps these to the brief's rules.
//
// The Store is the record and nothing else:
//
//   - claim.go: claim a key (Begin, QueueClaim) and what a taken key means;
//     the replay fast path (Peek);
//   - record.go: a step's updates of its record: lock it again
//     (Claim.Reacquire), record a recovery point (Claim.Checkpoint), store
//     the final outcome (Claim.Finish), give the lease back (Claim.Release),
//     hold the attempt for an operator (Claim.Hold);
//   - recover.go: the abandoned attempts the recoverer takes over
//     (Store.ClaimExpired), and an operator's release of a held one
//     (Store.Unhold);
//   - inspect.go: what an operator reads (Store.Inspect);
//   - lookup.go: what a client may know of its own key (Store.Lookup);
//   - expire.go: what the retention sweeper deletes.
//
// Every method that writes takes the caller's transaction, so the record
// can only be written together with its effect. Package operation builds
// the loop of steps with recovery points on it.
package idempotency

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/tracing"
)

// Response headers of the contract.
const (
	// HeaderReplayed marks an answer that was stored earlier and sent again.
	HeaderReplayed = "Idempotent-Replayed"
	// HeaderExpires tells the client until when the key's record is kept: an
	// HTTP-date (RFC 9110). Until then a retry is answered from the record; after
	// it, business-level uniqueness still prevents a second effect.
	HeaderExpires = "Idempotency-Expires"
)

// Operation names what a key is scoped to, besides the tenant.
type Operation string

// State is the state of a record: pending until the operation has a final
// outcome, then completed (2xx) or failed (a business failure, 4xx). A final
// record never changes again. A pending record may be held for an operator
// (Claim.Hold): then nothing runs under its key until an operator releases
// it.
type State string

// The states of a record.
const (
	StatePending   State = "pending"
	StateCompleted State = "completed"
	StateFailed    State = "failed"
)

// RecoveryPoint is the last phase of an operation that committed: where a
// retry or the recoverer resumes it. Every operation starts at PointStarted
// and ends at PointFinished; an operation with an external call declares the
// points in between (package payments: payment_created, refund_created).
type RecoveryPoint string

// The recovery points every operation has.
const (
	// PointStarted is the point of a fresh claim: nothing of the operation
	// has committed yet.
	PointStarted RecoveryPoint = "started"
	// PointFinished is the point of a final record.
	PointFinished RecoveryPoint = "finished"
)

// Policy says how long the records of each operation are kept after they
// finish. It must cover the longest horizon over which the same intent may be
// sent again: for money, settlement and disputes (45 days), not the few
// minutes a queue deduplicates.
type Policy map[Operation]time.Duration

// Request is one attempt to execute an operation under a key.
type Request struct {
	TenantID    uuid.UUID
	Operation   Operation
	Key         Key
	Fingerprint Fingerprint
	// RequestID identifies the transport attempt, for tracing only:
	// it is stored with the claim and logged, never used for deduplication.
	RequestID string
}

// Response is an outcome as the client sees it: stored once, sent as is on the
// first answer and on every replay.
type Response struct {
	Status      int
	ContentType string
	Location    string
	Body        []byte
	// ExpiresAt is when the record may be deleted (HeaderExpires).
	ExpiresAt time.Time
	// Replayed is set when the response comes from an earlier execution.
	Replayed bool
}

// Write sends r. The body bytes are the stored ones, so a replay is
// byte-identical to the first answer.
func (r Response) Write(w http.ResponseWriter) error {
	h := w.Header()
	h.Set("Content-Type", r.ContentType)
	if r.Location != "" {
		h.Set("Location", r.Location)
	}
	if !r.ExpiresAt.IsZero() {
		h.Set(HeaderExpires, r.ExpiresAt.UTC().Format(http.TimeFormat))
	}
	if r.Replayed {
		h.Set(HeaderReplayed, "true")
	}
	w.WriteHeader(r.Status)
	_, err := w.Write(r.Body)
	return err
}

// Resource names what an execution created, stored beside the response.
type Resource struct {
	Type string
	ID   uuid.UUID
}

// Outcome is what happened to one request under a key, as reported to the
// observer (and counted in oncepay_idempotency_outcomes_total).
type Outcome string

// The outcomes.
const (
	OutcomeExecuted   Outcome = "executed"    // a new claim: the request runs
	OutcomeReplayed   Outcome = "replayed"    // a stored outcome was returned
	OutcomeMismatch   Outcome = "mismatch"    // same key, other request: 422
	OutcomeInProgress Outcome = "in_progress" // same key while it runs: 409
	OutcomeResumed    Outcome = "resumed"     // an abandoned claim was taken over
	OutcomeLateRetry  Outcome = "late_retry"  // no record, but the business resource exists
	// OutcomeAwaitingOperator: the key's attempt is held for an operator
	// (409 awaiting_operator); nothing ran.
	OutcomeAwaitingOperator Outcome = "awaiting_operator"
)

// Outcomes lists every Outcome, for observers that export a series per
// outcome before the first request.
func Outcomes() []Outcome {
	return []Outcome{OutcomeExecuted, OutcomeReplayed, OutcomeMismatch, OutcomeInProgress, OutcomeResumed, OutcomeLateRetry, OutcomeAwaitingOperator}
}

// DB runs queries: a pool, a connection or a transaction. Only the reads
// (Peek, CountStuck) take one, because they need no transaction; every
// method that writes takes a pgx.Tx.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Store claims, finishes and looks up idempotency records.
type Store struct {
	policy  Policy
	lease   time.Duration
	now     func() time.Time
	observe func(op Operation, outcome Outcome)
}

// StoreOption configures a Store.
type StoreOption func(*Store)

// WithObserver reports every outcome per operation, e.g. to metrics
// (default none).
func WithObserver(fn func(op Operation, outcome Outcome)) StoreOption {
	return func(s *Store) { s.observe = fn }
}

// DefaultLease is how long a claim is protected unless WithLease says
// otherwise.
const DefaultLease = 30 * time.Second

// WithLease is how long a pending claim of a multi-phase operation is
// protected (default DefaultLease, 30s; d <= 0 keeps the default); after
// it, a retry or the recoverer may take the claim over and resume from its
// recovery point. It must outlast an attempt: a lease that ends while its
// attempt still runs lets another owner take that attempt over.
func WithLease(d time.Duration) StoreOption {
	return func(s *Store) {
		if d > 0 {
			s.lease = d
		}
	}
}

// NewStore returns a Store that keeps the records of each operation for
// policy's retention of it, and leases claims for DefaultLease unless
// WithLease says otherwise.
func NewStore(policy Policy, now func() time.Time, opts ...StoreOption) *Store {
	s := &Store{policy: policy, lease: DefaultLease, now: now, observe: func(Operation, Outcome) {}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Observe reports an outcome decided outside the store, such as
// OutcomeLateRetry, which the features detect through their own uniqueness.
func (s *Store) Observe(op Operation, outcome Outcome) { s.observe(op, outcome) }

// Report tells the observer of r's outcome and annotates the span of ctx,
// as the store does for the outcomes it decides: for Peek's caller.
func (s *Store) Report(ctx context.Context, r Request, outcome Outcome) { s.report(ctx, r, outcome) }

// report tells the observer of r's outcome, and puts the operation, the key
// and the outcome on the span of ctx, the request's (Annotate).
func (s *Store) report(ctx context.Context, r Request, outcome Outcome) {
	s.observe(r.Operation, outcome)
	Annotate(trace.SpanFromContext(ctx), r, outcome)
}

// Annotate puts r's operation, key and outcome on span, when it records: a
// trace shows which request was a replay, a mismatch or a take-over. A later
// outcome of the same request (a late retry found by the feature) replaces
// the earlier one.
func Annotate(span trace.Span, r Request, outcome Outcome) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(tracing.Operation.String(string(r.Operation)), tracing.IdempotencyKey.String(string(r.Key)),
		tracing.Outcome.String(string(outcome)))
}

func (s *Store) nowUTC() time.Time { return s.now().UTC().Truncate(time.Microsecond) }

// retention returns how long records of op are kept.
func (s *Store) retention(op Operation) (time.Duration, error) {
	d, ok := s.policy[op]
	if !ok || d <= 0 {
		return 0, fmt.Errorf("idempotency: no retention for operation %q", op)
	}
	return d, nil
}

// AwaitingOperator is the answer to a request whose key's attempt is held
// for an operator: nothing runs under the key until an operator releases
// the attempt, and the same request gets this answer until then. cause, when
// set, is for the log only.
func AwaitingOperator(cause error) error {
	return &problem.Error{
		Code: problem.AwaitingOperator,
		Detail: "This attempt is held for an operator: it cannot finish without one. Nothing runs under this " +
			"Idempotency-Key until an operator has looked at it; retrying is harmless, and a new key would be a new intent.",
		Err: cause,
	}
}

func reused() error {
	return problem.New(problem.IdempotencyKeyReused,
		"This Idempotency-Key was already used with a different request. Use a new key for a new intent.")
}

// briefInProgress is how long an owner that has just taken its lease is
// given before a duplicate asks again: a live attempt usually finishes in
// milliseconds (one provider round trip).
const briefInProgress = 2 * time.Second

// leaseRetryAfter is the Retry-After of request_in_progress for a pending
// claim whose lease runs until until. While the owner has held the lease for
// less than briefInProgress it is most likely at work and about to finish:
// ask again shortly. After that the owner is slow or gone (its process
// crashed; nothing here tells the two apart), and the key cannot be taken
// over before its lease runs out: ask again then, when the retry resumes the
// attempt itself. A client that kept asking every two seconds would instead
// use up its attempts against a lease nobody works under.
func (s *Store) leaseRetryAfter(until, now time.Time) time.Duration {
	remaining := until.Sub(now)
	if held := s.lease - remaining; held < briefInProgress {
		return min(remaining, briefInProgress)
	}
	return remaining
}

// inProgress is the answer to a duplicate that arrives while the first request
// still runs: retry the same request after retryAfter, in whole seconds
// rounded up (at least one).
func inProgress(retryAfter time.Duration, cause error) error {
	return &problem.Error{
		Code:       problem.RequestInProgress,
		Detail:     "A request with this Idempotency-Key is still in progress. Retry it with the same key.",
		RetryAfter: wholeSeconds(retryAfter),
		Err:        cause,
	}
}

// wholeSeconds is a Retry-After as it is sent: d in whole seconds, rounded
// up, at least one. The 409's header and a lookup's retry_after
// (Store.Lookup) both take it from here, so they agree.
func wholeSeconds(d time.Duration) time.Duration {
	return time.Duration(max(math.Ceil(d.Seconds()), 1)) * time.Second
}

func ptr[T any](v T) *T { return &v }
