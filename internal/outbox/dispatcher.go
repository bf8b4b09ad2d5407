package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/broker"
	"github.com/oncepay/oncepay/internal/outbox/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/tracing"
)

// NotifyChannel is the PostgreSQL channel the dispatchers listen on, for
// wake-ups from other processes (OutboxNotify: an operator's retry). The
// services of the same process wake it with a Signal instead.
const NotifyChannel = "oncepay_outbox"

// maxErrorLen bounds last_error.
const maxErrorLen = 1000

// dispatcherConfig is what the options tune. Zero values take the defaults
// the options name (withDefaults).
type dispatcherConfig struct {
	batchSize      int
	lease          time.Duration
	pollInterval   time.Duration
	publishTimeout time.Duration
	maxAttempts    int
	concurrency    int
	backoffBase    time.Duration
	backoffMax     time.Duration
	dbTimeout      time.Duration
	listenCheck    time.Duration
	// atomicMin is the smallest batch published as one atomic batch;
	// atomicSet says an option set it (0 included: never).
	atomicMin int
	atomicSet bool
	// linger is how long a woken loop waits before it claims; lingerSet
	// says an option set it (0 included: not at all).
	linger    time.Duration
	lingerSet bool
}

// The defaults of the options, which the service's tuning (app.Tuning's
// Outbox fields) starts from; the service keeps DefaultMaxAttempts.
const (
	DefaultPollInterval   = time.Second
	DefaultMaxAttempts    = 10
	DefaultPublishTimeout = 10 * time.Second
	DefaultLease          = 30 * time.Second
	DefaultAtomicMin      = 32
	DefaultLinger         = 5 * time.Millisecond
	// MaxLinger bounds WithLinger: a linger is a wait for more commits, not
	// a polling interval.
	MaxLinger = time.Second
)

func (c dispatcherConfig) withDefaults() dispatcherConfig {
	if c.batchSize <= 0 {
		c.batchSize = 500
	}
	if !c.atomicSet {
		c.atomicMin = DefaultAtomicMin
	}
	if !c.lingerSet {
		c.linger = DefaultLinger
	}
	if c.lease <= 0 {
		c.lease = DefaultLease
	}
	if c.pollInterval <= 0 {
		c.pollInterval = DefaultPollInterval
	}
	if c.publishTimeout <= 0 {
		c.publishTimeout = DefaultPublishTimeout
	}
	if c.maxAttempts <= 0 {
		c.maxAttempts = DefaultMaxAttempts
	}
	if c.concurrency <= 0 {
		c.concurrency = 2
	}
	if c.backoffBase <= 0 {
		c.backoffBase = time.Second
	}
	if c.backoffMax <= 0 {
		c.backoffMax = 5 * time.Minute
	}
	if c.dbTimeout <= 0 {
		c.dbTimeout = 5 * time.Second
	}
	if c.listenCheck <= 0 {
		c.listenCheck = 30 * time.Second
	}
	return c
}

// DispatcherHooks inject faults for the failure drills (WithHooks); nil in
// production.
type DispatcherHooks struct {
	// AfterPublish runs after the broker acknowledged the published rows of
	// a batch and before they are marked published. An error stops the
	// round right there, as a crash would: the rows stay leased until the
	// lease runs out, and are then published again (drill 6).
	AfterPublish func(ids []uuid.UUID) error
}

// Results of a publish attempt, as WithPublishObserver reports them.
const (
	// AttemptPublished: the broker acknowledged the row (stored it, or
	// recognised it as a duplicate inside its window).
	AttemptPublished = "published"
	// AttemptFailed: no PubAck (no connection, no stream, an error from the
	// broker, or none within the publish timeout); the row gets an attempt, an
	// error and a backoff, or becomes stuck.
	AttemptFailed = "failed"
)

// AttemptResults lists every result of a publish attempt.
func AttemptResults() []string { return []string{AttemptPublished, AttemptFailed} }

// DispatcherOption configures a Dispatcher. An option given a value that is
// not positive keeps its default.
type DispatcherOption func(*Dispatcher)

// WithBatchSize is how many rows one claim takes (default 500). A batch is
// published with asynchronous publishes and marked published with one
// UPDATE, so larger batches mean fewer round trips.
func WithBatchSize(n int) DispatcherOption { return func(d *Dispatcher) { d.cfg.batchSize = n } }

// WithLease is how long a claimed row stays the claimer's (default
// DefaultLease, 30s). It
// must comfortably exceed the publish timeout: a row whose lease runs out
// while it is still being published is claimed and published again by
// another dispatcher (harmless, but wasted).
func WithLease(l time.Duration) DispatcherOption { return func(d *Dispatcher) { d.cfg.lease = l } }

// WithPollInterval is the backstop for lost notifications and the cadence
// at which rows in backoff are retried (default DefaultPollInterval, 1s).
func WithPollInterval(i time.Duration) DispatcherOption {
	return func(d *Dispatcher) { d.cfg.pollInterval = i }
}

// WithPublishTimeout bounds the wait for a batch's PubAcks (default
// DefaultPublishTimeout, 10s). A row without its PubAck by then counts as a
// failed attempt.
func WithPublishTimeout(t time.Duration) DispatcherOption {
	return func(d *Dispatcher) { d.cfg.publishTimeout = t }
}

// WithDatabaseTimeout bounds each of the dispatcher's statements on our side
// (default 5s): the claim, the mark and the record of failures, and the
// check that the listening connection is alive. The server's
// statement_timeout cannot end a wait for a database that stopped
// answering; this does, and the next round (or, for a mark, the lease)
// carries on once it answers again.
func WithDatabaseTimeout(t time.Duration) DispatcherOption {
	return func(d *Dispatcher) { d.cfg.dbTimeout = t }
}

// WithListenCheck is how long the listening connection may stay quiet
// before the dispatcher checks that the database is still there (default
// 30s): a connection whose peer vanished without closing it would
// otherwise wait for notifications forever, and only polling would
// remain.
func WithListenCheck(quiet time.Duration) DispatcherOption {
	return func(d *Dispatcher) { d.cfg.listenCheck = quiet }
}

// WithMaxAttempts is the number of failed attempts after which a row is
// stuck (default DefaultMaxAttempts, 10): it is no longer retried
// automatically, it shows as stuck in GET /v1/events and in the log, and an
// operator retries it with Retry.
func WithMaxAttempts(n int) DispatcherOption { return func(d *Dispatcher) { d.cfg.maxAttempts = n } }

// WithAtomicBatches publishes a claimed batch of at least min events as one
// JetStream atomic batch (default DefaultAtomicMin, 32; the service's
// tuning field OutboxAtomicMin).
// Unlike the other options, 0 or less is a value: no batch is. See publish
// for what an atomic batch costs and saves.
func WithAtomicBatches(min int) DispatcherOption {
	return func(d *Dispatcher) { d.cfg.atomicMin, d.cfg.atomicSet = max(min, 0), true }
}

// WithLinger makes a loop that a commit woke wait l before it claims
// (default DefaultLinger, 5 ms; the tuning's OutboxLinger), so that the commits of
// that time share its batch: under load one claim, one publish and one
// mark serve many events instead of one each, for at most l more between
// a commit and its publish. While one loop lingers, wake-ups go to it and
// the other loops stay idle. Like WithAtomicBatches, 0 is a value: claim
// at once. A value above MaxLinger is MaxLinger. The poll does not
// linger, nor does a round draining a backlog (a loop it woke to help
// does, once).
func WithLinger(l time.Duration) DispatcherOption {
	return func(d *Dispatcher) { d.cfg.linger, d.cfg.lingerSet = min(max(l, 0), MaxLinger), true }
}

// WithConcurrency is the number of claim-publish-mark loops one dispatcher
// runs (default 2). Two loops overlap one batch's database work with the
// other's publishing; they claim disjoint rows like separate dispatchers do.
func WithConcurrency(n int) DispatcherOption { return func(d *Dispatcher) { d.cfg.concurrency = n } }

// WithBackoff shapes the wait after a failed attempt: base * 2^(attempts-1),
// capped at max, with jitter (defaults 1s and 5m; each value that is not
// positive keeps its default).
func WithBackoff(base, max time.Duration) DispatcherOption {
	return func(d *Dispatcher) { d.cfg.backoffBase, d.cfg.backoffMax = base, max }
}

// WithHooks injects faults for the failure drills (DispatcherHooks). Only
// tests set it: production code never does (default none).
func WithHooks(h DispatcherHooks) DispatcherOption { return func(d *Dispatcher) { d.hooks = h } }

// WithSignal makes s wake the dispatcher: the services of the same process
// call s.Committed after a transaction that appended events committed
// (default none: the dispatcher polls and listens for notifications only).
func WithSignal(s *Signal) DispatcherOption {
	return func(d *Dispatcher) {
		if s != nil {
			d.sig = s
		}
	}
}

// WithPublishObserver reports the publish attempts of every batch, once per
// result with the number of rows: AttemptPublished and AttemptFailed. It is
// called after the PubAcks are in and before the rows are marked, from the
// dispatcher's loops (concurrently), and must not block; internal/app
// connects it to metrics. Failed attempts are what a broker outage looks
// like from here, long before an event is stuck. The default is none.
func WithPublishObserver(fn func(result string, n int)) DispatcherOption {
	return func(d *Dispatcher) {
		if fn != nil {
			d.observe = fn
		}
	}
}

// WithTracerProvider traces each publish of an event that was appended
// inside a trace (its row stores the trace context): a producer span in that
// trace, from the publish to the PubAck, with how long the event waited in
// the outbox, whose context the message carries on to the consumers in its
// headers. The default is none (tracing.Disabled): the stored context is
// still sent on, so a consumer that traces continues the request's trace.
func WithTracerProvider(tp trace.TracerProvider) DispatcherOption {
	return func(d *Dispatcher) { d.tracer = tp.Tracer(instrumentation) }
}

// instrumentation names this package's spans' instrumentation scope.
const instrumentation = "github.com/oncepay/oncepay/internal/outbox"

// Dispatcher publishes the outbox to JetStream, at least once, with the
// event id as Nats-Msg-Id.
//
// A round claims a batch of due rows (FOR UPDATE SKIP LOCKED, then a lease,
// in one short transaction), publishes them outside any transaction,
// waits for every PubAck, and marks the acknowledged rows published in one
// UPDATE; rows that failed get an attempt, an error and a backoff. Several
// dispatchers, in one process or many, share the table safely: a claim
// skips rows another dispatcher locked or leased. A dispatcher that dies
// mid-batch leaves leased rows behind; when the lease runs out they are
// claimed and published again, which is why publishing is at least once
// and consumers keep an inbox.
//
// No row is ever skipped because it committed late. The claim asks for
// "unpublished", not for "seq above the last one published": a transaction
// that took seq 5 and commits after seqs 6..100 were published leaves an
// unpublished row behind, which the next round (woken by that very commit's
// notification) claims like any other. Sequence numbers are allocated at
// insert and become visible at commit, so a high-water mark would lose
// exactly these rows. The price is that events reach the stream in commit
// order only roughly; consumers must not depend on order (fulfillment's
// status changes are forward-only).
type Dispatcher struct {
	// pool is the service's pool; the dispatcher takes its configuration
	// for its own connections: book, and the listening connection.
	pool *pgxpool.Pool
	// book runs the dispatcher's bookkeeping with synchronous_commit off
	// (see NewDispatcher).
	book   *pgxpool.Pool
	js     jetstream.JetStream
	cfg    dispatcherConfig
	logger *slog.Logger
	now    func() time.Time
	hooks  DispatcherHooks
	// observe sees every batch's publish attempts (WithPublishObserver).
	observe func(result string, n int)
	// sig is shared by the loops: a commit or a notification wakes one
	// idle loop, and a loop that claimed a full batch wakes another to help
	// drain. It names the tenants to claim (WithSignal).
	sig *Signal
	// tracer starts the publish spans (WithTracerProvider).
	tracer trace.Tracer
	// lingering is true while a loop waits out the linger before its
	// claim (WithLinger); a wake-up meanwhile is its, not another loop's.
	lingering atomic.Bool
}

// NewDispatcher returns a dispatcher that publishes with js, with the
// defaults each option names unless opts say otherwise. Call Run, and Close
// after it returned. It fails when it cannot configure its own pool.
//
// The dispatcher opens its own connections to pool's database (at most
// WithConcurrency+1, and one more to listen), because all it writes is
// bookkeeping of an at-least-once process, and those connections commit
// with synchronous_commit off: no wait for the WAL flush, one round trip
// per claim and per mark. If a crash of PostgreSQL loses the last few
// milliseconds of commits, a lease disappears (the rows are claimed again),
// a published mark disappears (the rows are published again: a duplicate
// that the stream's window or the consumers' inbox absorbs), or a failed
// attempt goes uncounted. Nothing the business depends on is written on
// them: the outbox rows themselves and the consumers' effects commit
// synchronously on the service's pool.
func NewDispatcher(pool *pgxpool.Pool, js jetstream.JetStream, logger *slog.Logger, now func() time.Time, opts ...DispatcherOption) (*Dispatcher, error) {
	d := &Dispatcher{
		pool: pool, js: js, logger: logger, now: now,
		observe: func(string, int) {},
		sig:     NewSignal(),
		tracer:  tracing.Disabled().Tracer(instrumentation),
	}
	for _, o := range opts {
		o(d)
	}
	d.cfg = d.cfg.withDefaults()
	pc := pool.Config() // a deep copy
	pc.MinConns = 0
	pc.MaxConns = int32(d.cfg.concurrency) + 1 // #nosec G115 -- the concurrency is set in code (default 2), never near MaxInt32
	pc.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	// The pool's own name (oncepay, or what DATABASE_URL says) with
	// "-outbox": the bookkeeping connections of this process.
	pc.ConnConfig.RuntimeParams["application_name"] += "-outbox"
	book, err := pgxpool.NewWithConfig(context.Background(), pc) // connects lazily
	if err != nil {
		return nil, fmt.Errorf("outbox dispatcher pool: %w", err)
	}
	d.book = book
	return d, nil
}

// Close releases the dispatcher's own connections. Call it after Run
// returned.
func (d *Dispatcher) Close() { d.book.Close() }

// Notify wakes Run for a round that looks for every tenant's due rows. It
// never blocks; wake-ups that arrive while one is pending merge into it.
// Run calls it on every notification; callers in the same process may call
// it too.
func (d *Dispatcher) Notify() { d.sig.CommittedAny() }

func (d *Dispatcher) nowUTC() time.Time { return d.now().UTC().Truncate(time.Microsecond) }

// Result counts what one DispatchOnce did.
type Result struct {
	// Claimed rows, published (acknowledged and marked) rows, and rows whose
	// attempt failed. Stuck counts the failed rows that reached WithMaxAttempts.
	Claimed, Published, Failed, Stuck int
}

// DispatchOnce claims one batch of due rows of each tenant that has some,
// publishes it and records the outcome. The error is for the round as a
// whole (database unreachable); a failed publish is not an error but a
// recorded attempt.
//
// The claim goes tenant by tenant: it finds the tenants with due rows
// (OutboxDueTenants, no lock), then claims each one's rows
// (OutboxClaimBatch, FOR UPDATE SKIP LOCKED on one tenant's rows). On Citus
// every claim is then a single-shard statement; a FOR UPDATE across shards
// is refused there.
//
// Once a batch is claimed, DispatchOnce finishes it even when ctx is
// cancelled, bounded by the publish timeout: a shutdown does not leave rows
// leased behind for a full lease.
func (d *Dispatcher) DispatchOnce(ctx context.Context) (Result, error) {
	res, _, err := d.dispatchDue(ctx)
	return res, err
}

// dispatchDue is DispatchOnce; it also returns the tenants whose batch was
// full, who probably have more due rows.
func (d *Dispatcher) dispatchDue(ctx context.Context) (Result, []uuid.UUID, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, nil, err
	}
	listCtx, cancelList := context.WithTimeout(ctx, d.cfg.dbTimeout)
	tenants, err := dbsqlc.New(d.book).OutboxDueTenants(listCtx, dbsqlc.OutboxDueTenantsParams{Now: d.nowUTC(), MaxRows: maxTenantsPerRound})
	cancelList()
	if err != nil {
		return Result{}, nil, fmt.Errorf("list tenants with due outbox events: %w", err)
	}
	if len(tenants) == maxTenantsPerRound {
		d.Notify() // more tenants wait: another round takes them
	}
	return d.dispatchTenants(ctx, tenants)
}

// dispatchTenants claims, publishes and records one batch of each tenant's
// due rows, and returns the tenants whose batch was full.
func (d *Dispatcher) dispatchTenants(ctx context.Context, tenants []uuid.UUID) (Result, []uuid.UUID, error) {
	var res Result
	var full []uuid.UUID
	for _, tenant := range tenants {
		r, err := d.dispatchTenant(ctx, tenant)
		res.Claimed += r.Claimed
		res.Published += r.Published
		res.Failed += r.Failed
		res.Stuck += r.Stuck
		if err != nil {
			return res, full, err
		}
		if r.Claimed == d.cfg.batchSize {
			full = append(full, tenant)
		}
		if ctx.Err() != nil {
			break // what is claimed is finished; the rest waits for the next process
		}
	}
	return res, full, nil
}

// maxTenantsPerRound bounds the tenants one round visits.
const maxTenantsPerRound = 100

// dispatchTenant claims one batch of the tenant's due rows, publishes it and
// records the outcome.
func (d *Dispatcher) dispatchTenant(ctx context.Context, tenant uuid.UUID) (Result, error) {
	token, err := uuid.NewV7()
	if err != nil {
		return Result{}, fmt.Errorf("claim token: %w", err)
	}
	now := d.nowUTC()
	began := time.Now()
	claimCtx, cancelClaim := context.WithTimeout(ctx, d.cfg.dbTimeout)
	rows, err := dbsqlc.New(d.book).OutboxClaimBatch(claimCtx, dbsqlc.OutboxClaimBatchParams{
		TenantID:   tenant,
		Now:        now,
		MaxRows:    int32(d.cfg.batchSize), // #nosec G115 -- the batch size is set in code (default 500), never near MaxInt32
		LeaseUntil: now.Add(d.cfg.lease),
		Token:      token,
	})
	cancelClaim()
	if err != nil {
		return Result{}, fmt.Errorf("claim outbox batch: %w", err)
	}
	res := Result{Claimed: len(rows)}
	if len(rows) == 0 {
		return res, nil
	}
	if len(rows) == d.cfg.batchSize {
		// More rows are probably waiting: wake another loop to claim the
		// tenant's next batch while this one publishes.
		d.sig.Committed(tenant)
	}
	// UPDATE ... RETURNING keeps no order; publish oldest first.
	slices.SortFunc(rows, func(a, b dbsqlc.OutboxEvent) int { return cmp.Compare(a.Seq, b.Seq) })

	// Publishing waits at most the publish timeout, and each statement
	// after it at most the database timeout.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.publishTimeout+2*d.cfg.dbTimeout)
	defer cancel()
	claimed := time.Now()
	errs := d.publish(ctx, rows, now)
	acked := time.Now()

	published := make([]uuid.UUID, 0, len(rows))
	var failed []int
	for i, r := range rows {
		if errs[i] == nil {
			published = append(published, r.ID)
		} else {
			failed = append(failed, i)
		}
	}
	if len(published) > 0 {
		d.observe(AttemptPublished, len(published))
	}
	if len(failed) > 0 {
		d.observe(AttemptFailed, len(failed))
	}
	if h := d.hooks.AfterPublish; h != nil && len(published) > 0 {
		if err := h(published); err != nil {
			return res, err
		}
	}
	if len(published) > 0 {
		markCtx, cancelMark := context.WithTimeout(ctx, d.cfg.dbTimeout)
		n, err := dbsqlc.New(d.book).OutboxMarkPublished(markCtx, dbsqlc.OutboxMarkPublishedParams{PublishedAt: d.nowUTC(), TenantID: tenant, Ids: published})
		cancelMark()
		if err != nil {
			// The rows stay leased and are published again after the
			// lease: a duplicate the stream's window or the inbox absorbs.
			return res, fmt.Errorf("mark %d outbox events published: %w", len(published), err)
		}
		res.Published = int(n)
	}
	if len(failed) > 0 {
		stuck, err := d.recordFailures(ctx, tenant, token, rows, errs, failed)
		if err != nil {
			return res, err
		}
		res.Failed, res.Stuck = len(failed), stuck
	}
	d.logger.DebugContext(ctx, "outbox batch dispatched", "claimed", res.Claimed, "published", res.Published, "failed", res.Failed,
		"claim_ms", ms(claimed.Sub(began)), "publish_ms", ms(acked.Sub(claimed)), "record_ms", ms(time.Since(acked)))
	return res, nil
}

// publish sends rows, claimed at claimedAt, and waits for their
// acknowledgement, at most the publish timeout (WithPublishTimeout). errs[i]
// is nil when rows[i] was acknowledged (stored, or recognised as a
// duplicate within the window).
//
// A batch of at least WithAtomicBatches' events goes first as one
// JetStream atomic batch (publishAtomic): stored all or nothing, and, on a
// server that syncs every write to disk before it acknowledges
// (sync_always: the embedded server's default, and what the documented
// deployments run), synced once for the whole batch instead of once per
// message. Measured here (docs/BENCHMARKS.md): an atomic batch costs the
// server about 8 ms whatever its size, sync or not, where sync_always costs
// about 0.5 ms per message published one by one: it pays from about 20
// events up (500 events: 22 ms instead of 253 ms), and not at all on a
// server that does not sync each write (500 events: 18 ms instead of 10).
// Smaller batches, the common case at a steady low rate, go message by
// message.
//
// When the server refuses the batch, it goes again message by message
// (publishEach), where each row succeeds or fails on its own: that is the
// path of a batch with an event the stream has already (an atomic batch
// may not hold a duplicate; the re-publish after a crash between publish
// and mark, drill 6, is one), of a server without atomic batches, and of
// any other refusal.
func (d *Dispatcher) publish(ctx context.Context, rows []dbsqlc.OutboxEvent, claimedAt time.Time) []error {
	errs := make([]error, len(rows))
	msgs := make([]*nats.Msg, len(rows))
	spans := make([]trace.Span, len(rows))
	defer func() {
		for i, span := range spans {
			if errs[i] != nil {
				span.SetStatus(codes.Error, errs[i].Error())
			}
			span.End()
		}
	}()
	for i, r := range rows {
		msgs[i] = message(r)
		spans[i] = d.traced(ctx, r, msgs[i], claimedAt)
	}
	// One publish timeout for the batch, the atomic attempt and the
	// message-by-message one together: the round's budget and the lease
	// (the lease longer than the publish timeout) count on it.
	wait, cancel := context.WithTimeout(ctx, d.cfg.publishTimeout)
	defer cancel()
	if d.cfg.atomicMin > 0 && len(msgs) >= max(d.cfg.atomicMin, 2) && len(msgs) <= MaxAtomicBatch {
		err := d.publishAtomic(wait, msgs)
		if err == nil {
			return errs
		}
		d.logger.DebugContext(ctx, "outbox batch refused as an atomic batch; publishing it message by message", "events", len(msgs), "error", err.Error())
	}
	d.publishEach(wait, msgs, errs)
	return errs
}

// MaxAtomicBatch is the largest batch the dispatcher publishes as one
// atomic batch: the server's default limit. A larger claim (WithBatchSize)
// goes message by message.
const MaxAtomicBatch = 1000

// publishAtomic publishes msgs as one atomic batch (jetstreamext.PublishMsgBatch)
// by wait's deadline, on copies: their batch headers stay off msgs.
func (d *Dispatcher) publishAtomic(wait context.Context, msgs []*nats.Msg) error {
	batch := make([]*nats.Msg, len(msgs))
	for i, m := range msgs {
		batch[i] = &nats.Msg{Subject: m.Subject, Data: m.Data, Header: nats.Header(http.Header(m.Header).Clone())}
	}
	// The first message's acknowledgement waits AckTimeout, whatever the
	// context says: what is left of the deadline.
	deadline, _ := wait.Deadline()
	left := time.Until(deadline)
	if left <= 0 {
		return wait.Err()
	}
	ack, err := jetstreamext.PublishMsgBatch(wait, d.js, batch,
		jetstreamext.BatchFlowControl{AckFirst: true, AckTimeout: left})
	if err != nil {
		return err
	}
	if ack.BatchSize != uint64(len(msgs)) {
		return fmt.Errorf("atomic batch of %d acknowledged as %d", len(msgs), ack.BatchSize)
	}
	return nil
}

// publishEach publishes msgs with asynchronous publishes and waits for
// every PubAck until wait is done; errs[i] is msgs[i]'s outcome.
func (d *Dispatcher) publishEach(wait context.Context, msgs []*nats.Msg, errs []error) {
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		f, err := d.js.PublishMsgAsync(m)
		if err != nil {
			errs[i] = fmt.Errorf("publish: %w", err)
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = fmt.Errorf("publish: %w", err)
		case <-wait.Done():
			errs[i] = fmt.Errorf("no PubAck within %v", d.cfg.publishTimeout)
		}
	}
}

// traced continues the trace r was appended in (its stored context) with
// the producer span of this publish, and writes the span's context into m's
// headers for the consumers. A row appended without tracing gets neither:
// its span is a no-op.
func (d *Dispatcher) traced(ctx context.Context, r dbsqlc.OutboxEvent, m *nats.Msg, claimedAt time.Time) trace.Span {
	if len(r.TraceContext) == 0 {
		return trace.SpanFromContext(context.Background())
	}
	ctx, span := d.tracer.Start(tracing.Restore(ctx, r.TraceContext), "publish "+m.Subject,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			semconv.MessagingSystemKey.String("nats"),
			semconv.MessagingOperationTypeSend,
			semconv.MessagingOperationName("publish"),
			semconv.MessagingDestinationName(m.Subject),
			semconv.MessagingMessageID(r.ID.String()),
			tracing.EventType.String(r.EventType),
			tracing.OutboxWait.Float64(max(0, claimedAt.Sub(r.OccurredAt).Seconds())),
		))
	tracing.InjectHeader(ctx, m.Header)
	return span
}

// recordFailures counts a failed attempt for each failed row and reports how
// many became stuck.
func (d *Dispatcher) recordFailures(ctx context.Context, tenant, token uuid.UUID, rows []dbsqlc.OutboxEvent, errs []error, failed []int) (int, error) {
	now := d.nowUTC()
	p := dbsqlc.OutboxRecordFailuresParams{Now: now, TenantID: tenant, Token: token}
	for _, i := range failed {
		attempts := int(rows[i].Attempts) + 1
		p.Ids = append(p.Ids, rows[i].ID)
		p.LastErrors = append(p.LastErrors, truncate(errs[i].Error(), maxErrorLen))
		p.NextAttemptAts = append(p.NextAttemptAts, now.Add(Backoff(attempts, d.cfg.backoffBase, d.cfg.backoffMax, rand.Float64()))) // #nosec G404 -- backoff jitter; nothing depends on it being unpredictable
		p.Stuck = append(p.Stuck, attempts >= d.cfg.maxAttempts)
	}
	rctx, cancel := context.WithTimeout(ctx, d.cfg.dbTimeout)
	defer cancel()
	recorded, err := dbsqlc.New(d.book).OutboxRecordFailures(rctx, p)
	if err != nil {
		return 0, fmt.Errorf("record %d failed outbox publishes: %w", len(failed), err)
	}
	stuck := 0
	for _, r := range recorded {
		if r.StuckAt != nil {
			stuck++
			d.logger.ErrorContext(ctx, "outbox event stuck: no more automatic attempts; retry it once the cause is fixed",
				"event_id", r.ID, "tenant_id", r.TenantID, "type", r.EventType, "attempts", r.Attempts, "error", p.LastErrors[slices.Index(p.Ids, r.ID)])
		}
	}
	if retrying := len(recorded) - stuck; retrying > 0 {
		d.logger.WarnContext(ctx, "outbox events not published; will retry", "count", retrying, "first_error", p.LastErrors[0])
	}
	return stuck, nil
}

// Backoff is the wait after the attempts-th failed attempt: base * 2^(attempts-1),
// capped at max, of which the upper half is scaled by jitter in [0, 1) so that
// rows failing together do not retry together.
func Backoff(attempts int, base, max time.Duration, jitter float64) time.Duration {
	d := base
	for i := 1; i < attempts && d < max; i++ { // at most 63 doublings
		d *= 2
	}
	if d > max || d <= 0 {
		d = max
	}
	return d/2 + time.Duration(float64(d/2)*jitter)
}

// Run dispatches until ctx is cancelled, then returns nil. It runs as many
// loops as WithConcurrency says. A loop starts a round at once, when a service of this
// process signals a commit (WithSignal) or another process notifies
// (LISTEN oncepay_outbox on a connection of its own; one wake-up wakes one
// idle loop), when another loop claimed a full batch, and every
// poll interval (WithPollInterval) otherwise. A round drains full
// batches before it waits again. Losing the listening connection
// is logged and repaired in the background; polling carries on meanwhile.
func (d *Dispatcher) Run(ctx context.Context) error {
	listenDone := make(chan struct{})
	go func() {
		defer close(listenDone)
		d.listen(ctx)
	}()
	defer func() { <-listenDone }()

	var wg sync.WaitGroup
	for range d.cfg.concurrency {
		wg.Go(func() { d.loop(ctx) })
	}
	wg.Wait()
	return nil
}

// loop runs rounds until ctx is cancelled: at once, when woken (after the
// linger), and every poll interval.
func (d *Dispatcher) loop(ctx context.Context) {
	timer := time.NewTimer(d.cfg.pollInterval)
	defer timer.Stop()
	woken := false // the first round looks for every tenant's rows
	for {
		d.round(ctx, woken)
		timer.Reset(d.cfg.pollInterval)
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case <-d.sig.c:
				if d.linger(ctx) {
					woken = true
					break wait
				}
			case <-timer.C:
				woken = false
				break wait
			}
		}
	}
}

// linger waits out WithLinger after a wake-up and reports whether this loop
// should run a round now. It does not when another loop is lingering: that
// loop claims after the wake-up was sent, so after the commit it announced,
// and takes its rows.
func (d *Dispatcher) linger(ctx context.Context) bool {
	if d.cfg.linger == 0 {
		return true
	}
	if !d.lingering.CompareAndSwap(false, true) {
		return false
	}
	defer d.lingering.Store(false) // before the round's claim: a later wake-up is another loop's
	t := time.NewTimer(d.cfg.linger)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return true
}

// round claims one batch of each tenant with due rows, then drains: a
// tenant whose batch was full has more rows waiting, and the round claims
// its next batch at once, until the tenant's batch is not full.
//
// A round that a Signal woke claims the tenants the commits named and does
// not look for others (the poll and the notifications do): OutboxDueTenants
// reads every due row's tenant (a DISTINCT, which PostgreSQL answers by
// reading all of them, on Citus from every shard), and asked in every
// commit's round it was one of the round's three statements. Woken with no
// tenant left to claim (another round took them after their commits), it
// does nothing; a round that fails puts the tenants it took back for the
// next one. The drain does not look for tenants again either: a backlog of
// n rows drained by batches of b would cost n*n/2b row reads instead of n;
// the other tenants are found by the next round.
func (d *Dispatcher) round(ctx context.Context, woken bool) {
	var (
		full []uuid.UUID
		err  error
	)
	tenants, all := d.sig.take(!woken, maxTenantsPerRound)
	switch {
	case all:
		_, full, err = d.dispatchDue(ctx)
	case len(tenants) > 0:
		if _, full, err = d.dispatchTenants(ctx, tenants); err != nil {
			// The tenants after the one that failed were not reached; the
			// ones before it are claimed again for nothing, which is cheap.
			d.sig.putBack(tenants)
		}
	}
	for err == nil && len(full) > 0 && ctx.Err() == nil {
		_, full, err = d.dispatchTenants(ctx, full)
	}
	if err != nil && ctx.Err() == nil {
		d.logger.ErrorContext(ctx, "outbox dispatch round", "error", err.Error())
	}
}

// listen holds a LISTEN connection and turns notifications into Notify
// calls, reconnecting with backoff until ctx is cancelled. A connection
// quiet for WithListenCheck is pinged (bounded by WithDatabaseTimeout), so
// one whose peer vanished is replaced instead of waited on forever.
func (d *Dispatcher) listen(ctx context.Context) {
	wait := 100 * time.Millisecond
	for {
		err := d.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		d.logger.WarnContext(ctx, "outbox listener lost; polling until it is back", "error", err.Error(), "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
}

func (d *Dispatcher) listenOnce(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, d.pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// Rows committed while nobody listened were announced to nobody.
	d.Notify()
	for {
		wait, cancel := context.WithTimeout(ctx, d.cfg.listenCheck)
		_, err := conn.WaitForNotification(wait)
		cancel()
		switch {
		case err == nil:
			d.Notify()
			continue
		case ctx.Err() != nil:
			return ctx.Err()
		case !errors.Is(err, context.DeadlineExceeded):
			return fmt.Errorf("wait for notification: %w", err)
		}
		// Quiet for a while: is anybody still there? A timed-out wait
		// leaves the connection usable.
		ping, cancel := context.WithTimeout(ctx, d.cfg.dbTimeout)
		err = conn.Ping(ping)
		cancel()
		if err != nil {
			return fmt.Errorf("listening connection does not answer: %w", err)
		}
	}
}

// message is the broker message of an outbox row: the payload as body, the
// event id as Nats-Msg-Id, the rest in headers.
func message(r dbsqlc.OutboxEvent) *nats.Msg {
	m := nats.NewMsg(broker.Subject(r.EventType))
	m.Data = r.Payload
	m.Header.Set(jetstream.MsgIDHeader, r.ID.String())
	m.Header.Set(broker.HeaderTenantID, r.TenantID.String())
	m.Header.Set(broker.HeaderEventType, r.EventType)
	m.Header.Set(broker.HeaderAggregateType, r.AggregateType)
	m.Header.Set(broker.HeaderAggregateID, r.AggregateID.String())
	m.Header.Set(broker.HeaderIdempotencyKey, r.IdempotencyKey)
	m.Header.Set(broker.HeaderOccurredAt, r.OccurredAt.UTC().Format(time.RFC3339Nano))
	return m
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// truncate cuts s to at most n bytes of valid UTF-8 (PostgreSQL refuses
// anything else in a text column).
func truncate(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.ToValidUTF8(s, "")
}
