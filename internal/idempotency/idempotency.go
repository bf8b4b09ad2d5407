// Package idempotency makes a POST safe to repeat: the same business intent,
// sent any number of times, has its effect once and always gets the same
// answer.
//
// It implements rules 1 to 5 of the service. A key names a business intent
// (rule 1) and is scoped by tenant and operation (rule 2). The claim on a key
// is a row in api_idempotency written by the service's own transaction, the
// one that also writes the business mutation, the outbox row and the stored
// response (rule 3); the primary key decides races, never a check-then-act.
// The same key with another request fingerprint is refused (rule 4). Records
// live for a per-operation retention that covers the business process's whole
// replay horizon (rule 5; Policy).
//
// The Store is the record and nothing else: claim (Begin), replay (Peek),
// record a recovery point (Claim.Checkpoint), store the final outcome
// (Claim.Finish). Every method that writes takes a pgx.Tx, so the record can
// only be written inside a transaction the caller owns, together with its
// effect. Package operation builds the two flows of the brief on it: an
// idempotent local mutation, and a multi-phase operation with an external
// call whose recovery points this package stores.
package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/idempotency/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/postgres"
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

// Operation names what a key is scoped to, besides the tenant (rule 2).
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
// minutes a queue deduplicates (rule 5).
type Policy map[Operation]time.Duration

// Request is one attempt to execute an operation under a key.
type Request struct {
	TenantID    uuid.UUID
	Operation   Operation
	Key         Key
	Fingerprint Fingerprint
	// RequestID identifies the transport attempt, for tracing only (rule 1):
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

// ClaimKind says which of the three cases a Claim is.
type ClaimKind int

// The kinds of claim.
const (
	// ClaimFresh is a new record: the request executes from PointStarted.
	ClaimFresh ClaimKind = iota + 1
	// ClaimReplay is a key whose record has its final outcome: the caller
	// answers Claim.Stored and does nothing else.
	ClaimReplay
	// ClaimResumed is a pending record whose owner's lease had run out (a
	// crashed or abandoned attempt), now taken over: the caller resumes the
	// operation from Claim.RecoveryPoint.
	ClaimResumed
)

func (k ClaimKind) String() string {
	switch k {
	case ClaimFresh:
		return "fresh"
	case ClaimReplay:
		return "replay"
	case ClaimResumed:
		return "resumed"
	}
	return fmt.Sprintf("ClaimKind(%d)", int(k))
}

// Claim is the right to execute a request, or the stored outcome when the
// request has run already.
type Claim struct {
	store *Store
	req   Request
	// Kind says which case this is.
	Kind ClaimKind
	// Stored is the final outcome of a ClaimReplay.
	Stored Response
	// RecoveryPoint is the last phase a previous attempt committed
	// (PointStarted for a fresh claim, PointFinished for a replay).
	RecoveryPoint RecoveryPoint
	// Resource is what an earlier phase recorded, if anything.
	Resource *Resource
	// Recovery counts the recoveries of a claim ClaimExpired took over, this
	// one included (1 for the first); it is 0 for a client's claim, which
	// never counts as a recovery.
	Recovery int

	// lease is the locked_until this claim last wrote and holder the
	// record's request_id when it was claimed: together they tell this
	// claim's lease from another owner's (Release).
	lease  time.Time
	holder string
	// traceContext is what the record's first request stored
	// (tracing.Capture), for a resumer's link to it.
	traceContext []byte
	// locked says that the record was locked and found pending in a
	// pipeline's first batch (QueuedClaim.Claim, QueuedReacquire.Result):
	// the one case where an update queued blind (QueueFinish,
	// QueueCheckpoint) is known to hit it.
	locked bool
}

// Request returns the request the claim was made for.
func (c *Claim) Request() Request { return c.req }

// TraceContext returns the trace context the request that created the
// record stored (tracing.Capture; nil without tracing), so that whoever
// resumes the attempt can link to its trace (tracing.Link).
func (c *Claim) TraceContext() []byte { return c.traceContext }

// Begin claims r's key inside tx. The outcomes:
//   - new key: a ClaimFresh; the caller executes.
//   - final record with the same fingerprint: a ClaimReplay with the stored
//     response.
//   - any record with another fingerprint: problem idempotency_key_reused.
//   - pending record held for an operator (Claim.Hold): problem
//     awaiting_operator; nothing was done.
//   - pending record whose lease is live: problem request_in_progress with
//     Retry-After; nothing was done.
//   - pending record whose lease ran out: a ClaimResumed, leased anew.
//
// A concurrent transaction that claimed the same key and has not committed
// makes Begin wait for it (at most the pool's lock_timeout); then Begin sees
// the committed outcome, or a free key if that transaction rolled back.
func (s *Store) Begin(ctx context.Context, tx pgx.Tx, r Request) (*Claim, error) {
	q := dbsqlc.New(tx)
	now := s.nowUTC()
	p, err := s.claimParams(ctx, r, now)
	if err != nil {
		return nil, err
	}
	row, err := q.IdempotencyInsert(ctx, p)
	if c, err := s.claimed(ctx, r, *p.LockedUntil, row, err, true); c != nil || !errors.Is(err, ErrTaken) {
		return c, err
	}

	row, err = q.IdempotencyGetForUpdate(ctx, dbsqlc.IdempotencyGetForUpdateParams{
		TenantID: r.TenantID, Operation: string(r.Operation), IdempotencyKey: string(r.Key),
	})
	switch {
	case postgres.IsLockTimeout(err):
		s.report(ctx, r, OutcomeInProgress)
		return nil, inProgress(time.Second, err)
	case errors.Is(err, pgx.ErrNoRows):
		// The record was deleted between our insert and our read (the
		// sweeper). Treat it as a transient conflict; the retry claims anew.
		return nil, inProgress(time.Second, err)
	case err != nil:
		return nil, fmt.Errorf("lock idempotency record: %w", err)
	}
	if Fingerprint(row.RequestHash) != r.Fingerprint {
		s.report(ctx, r, OutcomeMismatch)
		return nil, reused()
	}
	if State(row.State) != StatePending {
		resp, err := storedResponse(row)
		if err != nil {
			return nil, err
		}
		s.report(ctx, r, OutcomeReplayed)
		return &Claim{store: s, req: r, Kind: ClaimReplay, Stored: resp, RecoveryPoint: RecoveryPoint(row.RecoveryPoint), Resource: resourceOf(row)}, nil
	}
	if row.HeldAt != nil {
		s.report(ctx, r, OutcomeAwaitingOperator)
		return nil, AwaitingOperator(nil)
	}
	if row.LockedUntil != nil && row.LockedUntil.After(now) {
		s.report(ctx, r, OutcomeInProgress)
		return nil, inProgress(s.leaseRetryAfter(*row.LockedUntil, now), nil)
	}
	s.report(ctx, r, OutcomeResumed)
	// The previous owner's lease ran out: take the claim over. This
	// request's trace links to the one that started the attempt.
	if l, ok := tracing.Link(row.TraceContext); ok {
		trace.SpanFromContext(ctx).AddLink(l)
	}
	taken := &Claim{store: s, req: r, Kind: ClaimResumed, RecoveryPoint: RecoveryPoint(row.RecoveryPoint), Resource: resourceOf(row), holder: row.RequestID,
		traceContext: row.TraceContext}
	if err := taken.checkpoint(ctx, tx, taken.RecoveryPoint, nil, *p.LockedUntil, now); err != nil {
		return nil, fmt.Errorf("renew idempotency lease: %w", err)
	}
	return taken, nil
}

// claimParams are the parameters of the insert that claims r's key.
func (s *Store) claimParams(ctx context.Context, r Request, now time.Time) (dbsqlc.IdempotencyInsertParams, error) {
	retention, err := s.retention(r.Operation)
	if err != nil {
		return dbsqlc.IdempotencyInsertParams{}, err
	}
	leaseUntil := now.Add(s.lease)
	return dbsqlc.IdempotencyInsertParams{
		TenantID:       r.TenantID,
		Operation:      string(r.Operation),
		IdempotencyKey: string(r.Key),
		RequestHash:    r.Fingerprint[:],
		LockedUntil:    &leaseUntil,
		RequestID:      r.RequestID,
		CreatedAt:      now,
		ExpiresAt:      now.Add(retention),
		TraceContext:   tracing.Capture(ctx),
	}, nil
}

// ErrTaken is what claiming a key that has a record already returns from
// the claim's insert: Begin then reads that record, under a lock, to decide
// (QueuedClaim.Claim leaves that to the caller).
var ErrTaken = errors.New("idempotency key has a record")

// claimed interprets the claim's insert: a fresh claim (reported as
// executed when reportFresh), ErrTaken, or the error (a lock timeout is
// request_in_progress).
func (s *Store) claimed(ctx context.Context, r Request, leaseUntil time.Time, row dbsqlc.ApiIdempotency, err error, reportFresh bool) (*Claim, error) {
	switch {
	case err == nil:
		if reportFresh {
			s.report(ctx, r, OutcomeExecuted)
		}
		return &Claim{store: s, req: r, Kind: ClaimFresh, RecoveryPoint: RecoveryPoint(row.RecoveryPoint), lease: leaseUntil, holder: row.RequestID}, nil
	case postgres.IsLockTimeout(err):
		s.report(ctx, r, OutcomeInProgress)
		return nil, inProgress(time.Second, err)
	case errors.Is(err, pgx.ErrNoRows):
		return nil, ErrTaken
	}
	return nil, fmt.Errorf("claim idempotency key: %w", err)
}

// Peek returns the stored final outcome for r without taking any lock, or
// nil when there is none (no record, or one still pending), and
// idempotency_key_reused for a record of another request. It is the replay
// fast path, taken before a write transaction is opened: final records never
// change, so reading one without a lock is safe, and Peek never acts on the
// absence of a record (Begin decides that, under the primary key). It
// reports no outcome: its caller may answer with another error first (the
// request's body is invalid), and reports the outcome it answers with
// (Report: OutcomeReplayed, OutcomeMismatch).
func (s *Store) Peek(ctx context.Context, db DB, r Request) (*Response, error) {
	row, err := dbsqlc.New(db).IdempotencyGet(ctx, dbsqlc.IdempotencyGetParams{
		TenantID: r.TenantID, Operation: string(r.Operation), IdempotencyKey: string(r.Key),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up idempotency record: %w", err)
	}
	if Fingerprint(row.RequestHash) != r.Fingerprint {
		return nil, reused()
	}
	if State(row.State) == StatePending {
		return nil, nil
	}
	resp, err := storedResponse(row)
	if err != nil {
		return nil, err
	}
	return &resp, nil
}

// Checkpoint records that a phase of a multi-phase operation committed, and
// the resource it created (nil keeps the one recorded), and renews the lease.
// It runs in the transaction of that phase.
func (c *Claim) Checkpoint(ctx context.Context, tx pgx.Tx, point RecoveryPoint, res *Resource) error {
	now := c.store.nowUTC()
	return c.checkpoint(ctx, tx, point, res, now.Add(c.store.lease), now)
}

// Release ends this claim's lease at once, keeping its recovery point and
// its pending state, for an attempt that stopped without a final outcome
// while its process lives on (an unknown provider outcome, a failed phase 2):
// nobody works on it any more, so a retry or the recoverer may resume it
// right away instead of meeting request_in_progress until the lease runs out.
//
// It releases only the lease this claim holds. When the record is finished
// or gone, or carries another lease (this claim's transaction never
// committed and another request claimed the key, or this lease ran out and
// another owner took the claim over and may be at the provider now), Release
// changes nothing and reports false: ending someone else's lease would let a
// third party resume an attempt that is still running.
func (c *Claim) Release(ctx context.Context, tx pgx.Tx) (bool, error) {
	row, err := c.lock(ctx, tx)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if State(row.State) != StatePending || row.LockedUntil == nil || !row.LockedUntil.Equal(c.lease) || row.RequestID != c.holder {
		return false, nil
	}
	now := c.store.nowUTC()
	if err := c.checkpoint(ctx, tx, RecoveryPoint(row.RecoveryPoint), nil, now, now); err != nil {
		return false, err
	}
	return true, nil
}

// Hold holds the claim's record for an operator, in tx, and returns when:
// for an attempt that no retry can finish (its step needs a person) or
// that the recoverer gave up on. The record keeps its recovery point and
// loses its lease; from then on Begin answers awaiting_operator and nobody
// resumes it until an operator releases it. Like Release, it acts only on a
// pending record that carries this claim's lease, and reports false
// otherwise (finished, gone, or another owner's): the caller must then not
// report the attempt held.
func (c *Claim) Hold(ctx context.Context, tx pgx.Tx) (time.Time, bool, error) {
	row, err := c.lock(ctx, tx)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, err
	}
	if State(row.State) != StatePending || row.HeldAt != nil || row.LockedUntil == nil || !row.LockedUntil.Equal(c.lease) || row.RequestID != c.holder {
		return time.Time{}, false, nil
	}
	now := c.store.nowUTC()
	if err := dbsqlc.New(tx).IdempotencyHold(ctx, dbsqlc.IdempotencyHoldParams{
		Now: now, TenantID: c.req.TenantID, Operation: string(c.req.Operation), IdempotencyKey: string(c.req.Key),
	}); err != nil {
		return time.Time{}, false, fmt.Errorf("hold idempotency record: %w", err)
	}
	c.lease = time.Time{}
	return now, true, nil
}

func (c *Claim) lock(ctx context.Context, tx pgx.Tx) (dbsqlc.ApiIdempotency, error) {
	row, err := dbsqlc.New(tx).IdempotencyGetForUpdate(ctx, dbsqlc.IdempotencyGetForUpdateParams{
		TenantID: c.req.TenantID, Operation: string(c.req.Operation), IdempotencyKey: string(c.req.Key),
	})
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return row, fmt.Errorf("lock idempotency record: %w", err)
	}
	return row, err
}

func (c *Claim) checkpoint(ctx context.Context, tx pgx.Tx, point RecoveryPoint, res *Resource, leaseUntil, now time.Time) error {
	p := c.checkpointParams(point, res, leaseUntil, now)
	if err := dbsqlc.New(tx).IdempotencyCheckpoint(ctx, p); err != nil {
		return fmt.Errorf("checkpoint idempotency record: %w", err)
	}
	c.RecoveryPoint = point
	c.lease = leaseUntil
	return nil
}

// checkpointParams are the parameters of the update that records point
// (and res, when not nil) and the lease leaseUntil; res becomes the claim's
// resource.
func (c *Claim) checkpointParams(point RecoveryPoint, res *Resource, leaseUntil, now time.Time) dbsqlc.IdempotencyCheckpointParams {
	p := dbsqlc.IdempotencyCheckpointParams{
		RecoveryPoint:  string(point),
		LockedUntil:    &leaseUntil,
		Now:            now,
		TenantID:       c.req.TenantID,
		Operation:      string(c.req.Operation),
		IdempotencyKey: string(c.req.Key),
	}
	if res != nil {
		p.ResourceType, p.ResourceID = &res.Type, &res.ID
		c.Resource = res
	}
	return p
}

// Reacquire locks the claim's record again in a later transaction of the same
// operation. It returns the stored outcome when somebody else (a retry or the
// recoverer that took the claim over after its lease, or a webhook) finished
// the operation first; the caller then answers with that and does nothing.
// A record held for an operator meanwhile is the problem awaiting_operator:
// the caller stops.
func (c *Claim) Reacquire(ctx context.Context, tx pgx.Tx) (*Response, error) {
	row, err := c.lock(ctx, tx)
	return reacquired(row, err)
}

// reacquired interprets the record Reacquire locked.
func reacquired(row dbsqlc.ApiIdempotency, err error) (*Response, error) {
	if err != nil {
		return nil, fmt.Errorf("relock idempotency record: %w", err)
	}
	if State(row.State) == StatePending {
		if row.HeldAt != nil {
			return nil, AwaitingOperator(nil)
		}
		return nil, nil
	}
	resp, err := storedResponse(row)
	if err != nil {
		return nil, err
	}
	return &resp, nil
}

// ExpiredTenants lists up to limit tenants that have pending claims of ops
// whose lease ran out and that ClaimExpired may take over, the tenant of the
// longest expired claim first. It locks nothing (on Citus it reads every
// shard); ClaimExpired then takes them tenant by tenant.
func (s *Store) ExpiredTenants(ctx context.Context, db DB, ops []Operation, limit int) ([]uuid.UUID, error) {
	tenants, err := dbsqlc.New(db).IdempotencyExpiredTenants(ctx, dbsqlc.IdempotencyExpiredTenantsParams{
		Operations: operationNames(ops),
		Now:        s.nowUTC(),
		MaxRows:    int32(min(limit, math.MaxInt32)), // #nosec G115 -- min() bounds it to MaxInt32
	})
	if err != nil {
		return nil, fmt.Errorf("list tenants with expired idempotency records: %w", err)
	}
	return tenants, nil
}

func operationNames(ops []Operation) []string {
	names := make([]string, len(ops))
	for i, op := range ops {
		names[i] = string(op)
	}
	return names
}

// ClaimExpired takes over up to limit of the tenant's pending claims of ops
// whose lease ran out: attempts abandoned by a crash or a client that gave
// up. It is the
// recoverer's Begin: every claim it returns is a ClaimResumed. Concurrent
// callers (several API processes) never get the same claim: the rows are
// locked with SKIP LOCKED and leased anew.
//
// Each take-over counts as a recovery (Claim.Recovery). backoff, when set,
// says how long after its nth recovery an attempt is not taken over again,
// should that recovery end without an outcome: the recoverer's backoff. A
// held record, and one whose backoff has not run out, is not taken. A
// client's retry (Begin) never waits for the backoff.
func (s *Store) ClaimExpired(ctx context.Context, tx pgx.Tx, tenantID uuid.UUID, ops []Operation, limit int, backoff func(recovery int) time.Duration) ([]*Claim, error) {
	now := s.nowUTC()
	leaseUntil := now.Add(s.lease)
	rows, err := dbsqlc.New(tx).IdempotencyClaimExpired(ctx, dbsqlc.IdempotencyClaimExpiredParams{
		TenantID:    tenantID,
		Operations:  operationNames(ops),
		Now:         now,
		MaxRows:     int32(min(limit, math.MaxInt32)), // #nosec G115 -- min() bounds it to MaxInt32
		LockedUntil: &leaseUntil,
	})
	if err != nil {
		return nil, fmt.Errorf("claim expired idempotency records: %w", err)
	}
	claims := make([]*Claim, len(rows))
	for i, row := range rows {
		if backoff != nil {
			if err := dbsqlc.New(tx).IdempotencySetNextRecovery(ctx, dbsqlc.IdempotencySetNextRecoveryParams{
				NextRecoveryAt: now.Add(backoff(int(row.Recoveries))),
				TenantID:       row.TenantID, Operation: row.Operation, IdempotencyKey: row.IdempotencyKey,
			}); err != nil {
				return nil, fmt.Errorf("set the next recovery: %w", err)
			}
		}
		claims[i] = &Claim{
			store: s,
			req: Request{
				TenantID:    row.TenantID,
				Operation:   Operation(row.Operation),
				Key:         Key(row.IdempotencyKey),
				Fingerprint: Fingerprint(row.RequestHash),
				RequestID:   "recoverer",
			},
			Kind:          ClaimResumed,
			RecoveryPoint: RecoveryPoint(row.RecoveryPoint),
			Resource:      resourceOf(row),
			Recovery:      int(row.Recoveries),
			lease:         leaseUntil,
			holder:        row.RequestID,
			traceContext:  row.TraceContext,
		}
	}
	return claims, nil
}

// Unhold releases a record held for an operator (Claim.Hold) for another
// try, in tx: it is due at once, for its client's retry and the recoverer,
// with its recoveries counted from zero. It reports false when the record
// is not held (never was, released already, or gone).
func (s *Store) Unhold(ctx context.Context, tx pgx.Tx, tenantID uuid.UUID, op Operation, key Key) (bool, error) {
	_, err := dbsqlc.New(tx).IdempotencyUnhold(ctx, dbsqlc.IdempotencyUnholdParams{
		Now: s.nowUTC(), TenantID: tenantID, Operation: string(op), IdempotencyKey: string(key),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("release held idempotency record: %w", err)
	}
	return true, nil
}

// Record is everything a record says, for an operator (Inspect).
type Record struct {
	TenantID      uuid.UUID
	Operation     Operation
	Key           Key
	State         State
	RecoveryPoint RecoveryPoint
	// LockedUntil is the lease: a live one means an attempt is running.
	LockedUntil *time.Time
	// RequestID is the request that holds, or last held, the claim.
	RequestID   string
	Fingerprint Fingerprint
	Resource    *Resource
	// StatusCode, ContentType and Body are the stored outcome of a final
	// record.
	StatusCode  int
	ContentType string
	Body        []byte
	// HeldAt is when the attempt was held for an operator (nil: not held).
	HeldAt *time.Time
	// Recoveries counts the recoverer's take-overs; NextRecoveryAt is its
	// backoff.
	Recoveries     int
	NextRecoveryAt *time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
	ExpiresAt      time.Time
}

// ErrNotFound is returned by Inspect for a key without a record.
var ErrNotFound = errors.New("no such idempotency record")

// Inspect returns the record of (tenant, op, key), without locking it, or
// ErrNotFound.
func (s *Store) Inspect(ctx context.Context, db DB, tenantID uuid.UUID, op Operation, key Key) (Record, error) {
	row, err := dbsqlc.New(db).IdempotencyGet(ctx, dbsqlc.IdempotencyGetParams{
		TenantID: tenantID, Operation: string(op), IdempotencyKey: string(key),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, ErrNotFound
	}
	if err != nil {
		return Record{}, fmt.Errorf("read idempotency record: %w", err)
	}
	rec := Record{
		TenantID: row.TenantID, Operation: Operation(row.Operation), Key: Key(row.IdempotencyKey),
		State: State(row.State), RecoveryPoint: RecoveryPoint(row.RecoveryPoint),
		LockedUntil: utc(row.LockedUntil), RequestID: row.RequestID, Fingerprint: Fingerprint(row.RequestHash),
		Resource: resourceOf(row), Body: row.ResponseBody, HeldAt: utc(row.HeldAt),
		Recoveries: int(row.Recoveries), NextRecoveryAt: utc(row.NextRecoveryAt),
		CreatedAt: row.CreatedAt.UTC(), UpdatedAt: row.UpdatedAt.UTC(), ExpiresAt: row.ExpiresAt.UTC(),
	}
	if row.StatusCode != nil {
		rec.StatusCode = int(*row.StatusCode)
	}
	if resp, err := storedResponse(row); err == nil && row.State != string(StatePending) {
		rec.ContentType = resp.ContentType
	}
	return rec, nil
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// TraceContext returns the trace context stored by the claim of (tenant, op,
// key), and nil when the record has none or is gone: for a trace that links
// to the request that started the operation (a webhook that finished it).
func (s *Store) TraceContext(ctx context.Context, db DB, tenant uuid.UUID, op Operation, key Key) ([]byte, error) {
	tc, err := dbsqlc.New(db).IdempotencyTraceContext(ctx, dbsqlc.IdempotencyTraceContextParams{
		TenantID: tenant, Operation: string(op), IdempotencyKey: string(key),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read trace context of %s %q: %w", op, key, err)
	}
	return tc, nil
}

// ErrNotPending is returned by Finish for a record that already has its
// final outcome: a final record is never overwritten.
var ErrNotPending = errors.New("idempotency record is not pending")

// Finish stores resp as the final outcome of the claim, in the caller's
// transaction: 2xx as completed, 4xx (business failures) as failed. It
// returns resp with ExpiresAt set. 5xx outcomes are never stored: the caller
// must roll back (or leave the claim pending for recovery) instead. Only a
// pending record is finished (ErrNotPending otherwise).
func (c *Claim) Finish(ctx context.Context, tx pgx.Tx, resp Response, res *Resource) (Response, error) {
	p, resp, err := c.finishParams(resp, res)
	if err != nil {
		return Response{}, err
	}
	n, err := dbsqlc.New(tx).IdempotencyFinish(ctx, p)
	if err != nil {
		return Response{}, fmt.Errorf("store idempotent response: %w", err)
	}
	if n == 0 {
		return Response{}, fmt.Errorf("finish %s %q: %w", c.req.Operation, c.req.Key, ErrNotPending)
	}
	c.RecoveryPoint = PointFinished
	return resp, nil
}

// finishParams are the parameters of the update that stores resp as the
// claim's final outcome, and resp with ExpiresAt set.
func (c *Claim) finishParams(resp Response, res *Resource) (dbsqlc.IdempotencyFinishParams, Response, error) {
	state := StateCompleted
	switch {
	case resp.Status >= 200 && resp.Status < 300:
	case resp.Status >= 400 && resp.Status < 500:
		state = StateFailed
	default:
		return dbsqlc.IdempotencyFinishParams{}, Response{}, fmt.Errorf("idempotency: status %d is not a final outcome", resp.Status)
	}
	retention, err := c.store.retention(c.req.Operation)
	if err != nil {
		return dbsqlc.IdempotencyFinishParams{}, Response{}, err
	}
	now := c.store.nowUTC()
	resp.ExpiresAt = now.Add(retention)
	headers, err := json.Marshal(storedHeaders{ContentType: resp.ContentType, Location: resp.Location})
	if err != nil {
		return dbsqlc.IdempotencyFinishParams{}, Response{}, fmt.Errorf("encode stored headers: %w", err)
	}
	p := dbsqlc.IdempotencyFinishParams{
		State:           string(state),
		StatusCode:      ptr(int32(resp.Status)), // #nosec G115 -- an HTTP status code has three digits
		ResponseHeaders: headers,
		ResponseBody:    resp.Body,
		Now:             now,
		ExpiresAt:       resp.ExpiresAt,
		TenantID:        c.req.TenantID,
		Operation:       string(c.req.Operation),
		IdempotencyKey:  string(c.req.Key),
	}
	if res != nil {
		p.ResourceType = &res.Type
		p.ResourceID = &res.ID
	}
	return p, resp, nil
}

// storedHeaders are the response headers that matter for a replay.
type storedHeaders struct {
	ContentType string `json:"Content-Type"`
	Location    string `json:"Location,omitempty"`
}

func storedResponse(row dbsqlc.ApiIdempotency) (Response, error) {
	var h storedHeaders
	if err := json.Unmarshal(row.ResponseHeaders, &h); err != nil {
		return Response{}, fmt.Errorf("decode stored headers: %w", err)
	}
	if row.StatusCode == nil {
		return Response{}, fmt.Errorf("idempotency record %s/%s is final without a status", row.Operation, row.IdempotencyKey)
	}
	return Response{
		Status:      int(*row.StatusCode),
		ContentType: h.ContentType,
		Location:    h.Location,
		Body:        row.ResponseBody,
		ExpiresAt:   row.ExpiresAt,
		Replayed:    true,
	}, nil
}

func resourceOf(row dbsqlc.ApiIdempotency) *Resource {
	if row.ResourceID == nil {
		return nil
	}
	r := &Resource{ID: *row.ResourceID}
	if row.ResourceType != nil {
		r.Type = *row.ResourceType
	}
	return r
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
	secs := math.Ceil(retryAfter.Seconds())
	return &problem.Error{
		Code:       problem.RequestInProgress,
		Detail:     "A request with this Idempotency-Key is still in progress. Retry it with the same key.",
		RetryAfter: time.Duration(max(secs, 1)) * time.Second,
		Err:        cause,
	}
}

func ptr[T any](v T) *T { return &v }
