package outbox

import (
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"
)

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
	return c
}

// DispatcherHooks inject faults for the failure drills (WithHooks); nil in
// production.
type DispatcherHooks struct {
	// AfterPublish runs after the broker acknowledged the published rows of
	// a batch and before they are marked published. An error stops the
	// round right there, as a crash would: the rows stay leased until the
	// lease runs out, and are then published again.
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
