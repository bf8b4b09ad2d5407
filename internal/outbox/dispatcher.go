package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/tracing"
)

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
//
// One concern per file: options.go (the options and their defaults),
// loop.go (when a round runs: the loops, wake-ups, the linger, the poll),
// dispatch.go (one round: claim, mark published, record failures),
// publish.go (the publish itself: atomic batches, one by one, tracing) and
// listen.go (notifications from other processes).
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

func (d *Dispatcher) nowUTC() time.Time { return d.now().UTC().Truncate(time.Microsecond) }
