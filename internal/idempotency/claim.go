package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/idempotency/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/tracing"
)

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
	// locked says that the transaction at hand locked the record and found
	// it pending (the claim, or Reacquire): the one case where the
	// record's update (Checkpoint, Finish) may be queued blind, its outcome
	// read only after COMMIT was sent with it. The update uses it up.
	locked bool
}

// Request returns the request the claim was made for.
func (c *Claim) Request() Request { return c.req }

// TraceContext returns the trace context the request that created the
// record stored (tracing.Capture; nil without tracing), so that whoever
// resumes the attempt can link to its trace (tracing.Link).
func (c *Claim) TraceContext() []byte { return c.traceContext }

// Begin claims r's key in tx, at once: QueueClaim and QueuedClaim.Claim in
// one call.
func (s *Store) Begin(ctx context.Context, tx pgx.Tx, r Request) (*Claim, error) {
	q, err := s.QueueClaim(ctx, tx, r)
	if err != nil {
		return nil, err
	}
	return q.Claim(ctx, tx)
}

// QueuedClaim is the claim of a key, sent on a transaction or queued into a
// pipeline (QueueClaim); Claim reads what it came to.
type QueuedClaim struct {
	store   *Store
	req     Request
	params  dbsqlc.IdempotencyInsertParams
	results *dbsqlc.IdempotencyInsertBatchResults
	// read, row and err are the insert's result, once read (Taken).
	read bool
	row  dbsqlc.ApiIdempotency
	err  error
}

// QueueClaim claims r's key in db: a transaction, where the claim's insert
// runs at once, or a pipeline (postgres.Pipeline) after its BEGIN, where it
// runs when the pipeline is sent, together with the statements queued
// after it. The primary key decides a race between two claims of one key
// (INSERT ... ON CONFLICT DO NOTHING): a concurrent transaction that claimed
// it and has not committed makes the insert wait for it (at most the pool's
// lock_timeout).
func (s *Store) QueueClaim(ctx context.Context, db DB, r Request) (*QueuedClaim, error) {
	params, err := s.claimParams(ctx, r, s.nowUTC())
	if err != nil {
		return nil, err
	}
	return &QueuedClaim{store: s, req: r, params: params,
		results: dbsqlc.New(db).IdempotencyInsert(ctx, []dbsqlc.IdempotencyInsertParams{params})}, nil
}

// Taken reads the claim's insert, once sent, and reports whether the key
// has a record already: Claim then locks and reads that record in the
// transaction, a statement of its own, so whatever was sent with the claim
// must have been read (or the pipeline closed) before Claim is called.
func (q *QueuedClaim) Taken() bool {
	if !q.read {
		q.read = true
		q.results.QueryRow(func(_ int, row dbsqlc.ApiIdempotency, err error) { q.row, q.err = row, err })
	}
	return errors.Is(q.err, pgx.ErrNoRows)
}

// Claim returns what the claim came to. tx is the transaction it was sent
// in; a taken key's record is locked and read in it (Taken says when).
//   - new key: a ClaimFresh; the caller executes.
//   - final record with the same fingerprint: a ClaimReplay with the stored
//     response.
//   - any record with another fingerprint: problem idempotency_key_reused;
//     but a tombstone (Tombstone) is a ClaimReplay of its stored answer,
//     whatever the fingerprint.
//   - pending record held for an operator (Claim.Hold): problem
//     awaiting_operator; nothing was done.
//   - pending record whose lease is live: problem request_in_progress with
//     Retry-After; nothing was done.
//   - pending record whose lease ran out: a ClaimResumed, leased anew.
//
// A fresh or resumed claim holds the record's lock in tx, so the record's
// update may be queued blind (Checkpoint, Finish).
func (q *QueuedClaim) Claim(ctx context.Context, tx DB) (*Claim, error) {
	s, r := q.store, q.req
	taken := q.Taken()
	switch {
	case q.err == nil:
		s.report(ctx, r, OutcomeExecuted)
		return &Claim{store: s, req: r, Kind: ClaimFresh, RecoveryPoint: RecoveryPoint(q.row.RecoveryPoint),
			lease: *q.params.LockedUntil, holder: q.row.RequestID, locked: true}, nil
	case postgres.IsLockTimeout(q.err):
		s.report(ctx, r, OutcomeInProgress)
		return nil, inProgress(time.Second, q.err)
	case !taken:
		return nil, fmt.Errorf("claim idempotency key: %w", q.err)
	}
	return s.decide(ctx, tx, r)
}

// decide reads, under its lock, the record that took r's key, and says
// what it means for r (Claim lists the cases).
func (s *Store) decide(ctx context.Context, tx DB, r Request) (*Claim, error) {
	now := s.nowUTC()
	row, err := lockRecord(ctx, tx, r)
	switch {
	case postgres.IsLockTimeout(err):
		s.report(ctx, r, OutcomeInProgress)
		return nil, inProgress(time.Second, err)
	case errors.Is(err, pgx.ErrNoRows):
		// The record was deleted between our insert and our read (the
		// sweeper). Treat it as a transient conflict; the retry claims anew.
		return nil, inProgress(time.Second, err)
	case err != nil:
		return nil, err
	}
	if !answers(row, r.Fingerprint) {
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
		traceContext: row.TraceContext, locked: true}
	if err := taken.renew(ctx, tx, now); err != nil {
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

// Peek returns the stored final outcome for r without taking any lock, or
// nil when there is none (no record, or one still pending), and
// idempotency_key_reused for a record of another request. It is the replay
// fast path, taken before a write transaction is opened: final records never
// change, so reading one without a lock is safe, and Peek never acts on the
// absence of a record (the claim decides that, under the primary key). It
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
	if !answers(row, r.Fingerprint) {
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

// answers reports whether row's record answers a request of fingerprint fp:
// its own request's, or any when it is a tombstone (tombstone.go).
func answers(row dbsqlc.ApiIdempotency, fp Fingerprint) bool {
	return tombstone(row) || Fingerprint(row.RequestHash) == fp
}
