package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncepay/oncepay/internal/broker"
	"github.com/oncepay/oncepay/internal/broker/brokertest"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/testkit"
)

func TestDispatcherPublishesWithEventIDAsMessageID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	run(t, b.dispatcher(t, b.pool, b.nats.JS, fast()...))
	id := b.appendEvent(t, "order.created")
	testkit.WaitFor(t, 10*time.Second, "the event to be published", func() bool {
		return b.count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND published_at IS NOT NULL`, id) == 1
	})
	if n := b.count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND attempts = 1 AND locked_until IS NULL AND locked_by IS NULL`, id); n != 1 {
		t.Fatalf("published row keeps lease or has wrong attempts")
	}

	ctx := context.Background()
	s, err := b.nats.JS.Stream(ctx, broker.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, "oncepay.events.order.created")
	if err != nil {
		t.Fatalf("message on oncepay.events.order.created: %v", err)
	}
	if got := m.Header.Get(jetstream.MsgIDHeader); got != id.String() {
		t.Fatalf("Nats-Msg-Id = %q, want the event id %s", got, id)
	}
	if got := m.Header.Get(broker.HeaderTenantID); got != b.tenant.ID.String() {
		t.Fatalf("%s = %q, want %s", broker.HeaderTenantID, got, b.tenant.ID)
	}
	if got := m.Header.Get(broker.HeaderEventType); got != "order.created" {
		t.Fatalf("%s = %q", broker.HeaderEventType, got)
	}
	var payload map[string]any
	if err := json.Unmarshal(m.Data, &payload); err != nil || payload["n"] != float64(1) {
		t.Fatalf("body = %s (%v), want the event payload", m.Data, err)
	}
}

// A transaction that appended an event and commits after later events were
// published must still get its event published: the dispatcher claims by
// "unpublished", never by a high-water mark of seq. Polling is off here, so
// the signal after the late commit is what wakes the dispatcher.
func TestDispatcherNeverSkipsALateCommittingLowerSeq(t *testing.T) {
	t.Parallel()
	b := setup(t)
	run(t, b.dispatcher(t, b.pool, b.nats.JS, fast(outbox.WithPollInterval(time.Hour))...))
	ctx := context.Background()

	late, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback(ctx)
	lateID, err := outbox.Append(ctx, late, b.event("order.created"))
	if err != nil {
		t.Fatal(err)
	}

	first := b.appendEvent(t, "order.created")
	second := b.appendEvent(t, "order.created")
	testkit.WaitFor(t, 10*time.Second, "the later events to be published", func() bool {
		return b.count(t, `SELECT count(*) FROM outbox_events WHERE id = ANY($1) AND published_at IS NOT NULL`, []uuid.UUID{first, second}) == 2
	})

	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b.events.Committed(b.tenant.ID)
	if n := b.count(t, `SELECT count(*) FROM outbox_events l, outbox_events f WHERE l.tenant_id = f.tenant_id AND l.id = $1 AND f.id = $2 AND l.seq < f.seq`, lateID, first); n != 1 {
		t.Fatal("the late transaction's event does not have the lower seq; the test proves nothing")
	}
	testkit.WaitFor(t, 10*time.Second, "the late-committed lower seq to be published", func() bool {
		return b.count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND published_at IS NOT NULL`, lateID) == 1
	})
	if ids := b.streamIDs(t); len(ids) != 3 || ids[lateID.String()] != 1 {
		t.Fatalf("stream = %v, want the three events once each", ids)
	}
}

// Three dispatchers, each with its own database pool and broker connection
// like three processes, race for 300 events committed while they run. Every
// event ends up published and stored in the stream exactly once.
func TestThreeDispatchersPublishEveryEventOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	opts := fast(outbox.WithBatchSize(25)) // small batches make the dispatchers interleave
	for range 3 {
		_, js := brokertest.Connect(t, b.nats.URL(), b.logger)
		run(t, b.dispatcher(t, testkit.AnotherPool(t, b.pool), js, opts...))
	}

	const producers, perProducer = 10, 30
	ids := make(chan uuid.UUID, producers*perProducer)
	var wg sync.WaitGroup
	for range producers {
		wg.Go(func() {
			for range perProducer / 3 { // three events per transaction
				err := postgres.InTx(context.Background(), b.pool, func(tx pgx.Tx) error {
					for range 3 {
						id, err := outbox.Append(context.Background(), tx, b.event("order.created"))
						if err != nil {
							return err
						}
						ids <- id
					}
					return nil
				})
				if err != nil {
					t.Errorf("append: %v", err)
				}
			}
		})
	}
	wg.Wait()
	close(ids)
	var all []uuid.UUID
	for id := range ids {
		all = append(all, id)
	}
	if len(all) != producers*perProducer {
		t.Fatalf("appended %d events, want %d", len(all), producers*perProducer)
	}
	testkit.WaitFor(t, 30*time.Second, "all 300 events to be published", func() bool {
		return b.count(t, `SELECT count(*) FROM outbox_events WHERE published_at IS NOT NULL`) == len(all)
	})
	stored := b.streamIDs(t)
	if len(stored) != len(all) {
		t.Fatalf("stream holds %s, want %d", describe(stored), len(all))
	}
	for _, id := range all {
		if stored[id.String()] != 1 {
			t.Fatalf("event %s stored %d times, want 1 (%s)", id, stored[id.String()], describe(stored))
		}
	}
}

// While the broker is down, events wait in the outbox with their attempts
// counted and backing off; when it is back they flow, none lost.
func TestDispatcherWaitsOutABrokerOutage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	run(t, b.dispatcher(t, b.pool, b.nats.JS, fast()...))
	b.nats.Stop()

	var ids []uuid.UUID
	for range 50 {
		ids = append(ids, b.appendEvent(t, "order.created"))
	}
	testkit.WaitFor(t, 20*time.Second, "every event to have a failed attempt", func() bool {
		return b.count(t, `SELECT count(*) FROM outbox_events WHERE attempts >= 1 AND last_error IS NOT NULL AND next_attempt_at IS NOT NULL AND published_at IS NULL`) == len(ids)
	})

	b.nats.Restart(t)
	testkit.WaitFor(t, 30*time.Second, "every event to be published after the broker came back", func() bool {
		return b.count(t, `SELECT count(*) FROM outbox_events WHERE published_at IS NOT NULL`) == len(ids)
	})
	stored := b.streamIDs(t)
	if len(stored) != len(ids) {
		t.Fatalf("stream holds %s, want %d", describe(stored), len(ids))
	}
	for _, id := range ids {
		if stored[id.String()] != 1 {
			t.Fatalf("event %s stored %d times, want 1", id, stored[id.String()])
		}
	}
}

// Drill 6 at the dispatcher: it publishes a batch and dies before marking it
// published. When the lease runs out, the batch is published again; within
// the duplicate window JetStream stores it once. (Beyond the window the
// consumers' inbox decides; see the fulfillment drills.)
func TestDrill6DispatcherDiesAfterPublishBeforeMark(t *testing.T) {
	t.Parallel()
	b := setup(t)
	crashes := 1
	var mu sync.Mutex
	hooks := outbox.DispatcherHooks{AfterPublish: func([]uuid.UUID) error {
		mu.Lock()
		defer mu.Unlock()
		if crashes > 0 {
			crashes--
			return errors.New("crash after publish")
		}
		return nil
	}}
	d := b.dispatcher(t, b.pool, b.nats.JS, fast(outbox.WithHooks(hooks))...)
	id := b.appendEvent(t, "order.created")
	ctx := context.Background()

	if _, err := d.DispatchOnce(ctx); err == nil {
		t.Fatal("the crash hook did not stop the round")
	}
	if n := b.count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND published_at IS NULL AND locked_until IS NOT NULL`, id); n != 1 {
		t.Fatal("the crashed round left no leased, unpublished row")
	}
	if res, err := d.DispatchOnce(ctx); err != nil || res.Claimed != 0 {
		t.Fatalf("claimed %d rows under a live lease (err %v), want 0", res.Claimed, err)
	}
	b.clock.Advance(31 * time.Second) // past the default 30s lease
	res, err := d.DispatchOnce(ctx)
	if err != nil || res.Published != 1 {
		t.Fatalf("after the lease: %+v, %v; want the row published", res, err)
	}
	if n := b.count(t, `SELECT attempts FROM outbox_events WHERE id = $1`, id); n != 1 {
		t.Fatalf("attempts = %d, want 1 (the crashed attempt was never recorded)", n)
	}
	if stored := b.streamIDs(t); len(stored) != 1 || stored[id.String()] != 1 {
		t.Fatalf("stream = %v, want the event stored once", stored)
	}
}

// A claimed batch of at least WithAtomicBatches' events goes to JetStream
// as one atomic batch: stored all at once, and synced once on a server
// that syncs every write. Drill 6 with a
// batch: it was published and not marked, so after the lease it is
// published again, and the server refuses an atomic batch that holds
// events it has already; the batch then goes message by message, where
// each is acknowledged as the duplicate it is, and the stream still holds
// every event once.
func TestBatchGoesAtomicallyAndAgainMessageByMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	crashes := 1
	var mu sync.Mutex
	hooks := outbox.DispatcherHooks{AfterPublish: func([]uuid.UUID) error {
		mu.Lock()
		defer mu.Unlock()
		if crashes > 0 {
			crashes--
			return errors.New("crash after publish")
		}
		return nil
	}}
	// The default PubAck wait: fast's 500ms ran out on a busy Citus run, and
	// the round then failed before its hook.
	d := b.dispatcher(t, b.pool, b.nats.JS, fast(outbox.WithHooks(hooks), outbox.WithAtomicBatches(3), outbox.WithPublishTimeout(outbox.DefaultPublishTimeout))...)
	ids := []uuid.UUID{b.appendEvent(t, "order.created"), b.appendEvent(t, "order.created"), b.appendEvent(t, "order.created")}
	ctx := context.Background()
	if _, err := d.DispatchOnce(ctx); err == nil {
		t.Fatal("the crash hook did not stop the round")
	}
	batches := b.streamBatches(t)
	batch := batches[ids[0].String()]
	for _, id := range ids {
		if got, ok := batches[id.String()]; !ok || got == "" || got != batch {
			t.Fatalf("stream batches = %v, want the three events in one atomic batch", batches)
		}
	}
	b.clock.Advance(31 * time.Second) // past the default 30s lease
	res, err := d.DispatchOnce(ctx)
	if err != nil || res.Published != len(ids) {
		t.Fatalf("after the lease: %+v, %v; want the batch published again, message by message", res, err)
	}
	if stored := b.streamIDs(t); len(stored) != len(ids) {
		t.Fatalf("stream = %v, want each event stored once", stored)
	}
}

// A broker that stops answering mid-batch costs a round one publish
// timeout, the atomic attempt and the message-by-message one together:
// the round then still has its time to record the failed attempts (each
// row gets its attempt and its backoff), as the lease and the round's
// budget (publish timeout plus twice the database timeout) count on.
// Twice the database timeout is less than one publish timeout, so a round
// that spent two publish timeouts would run out before recording; each
// statement still has almost four seconds, which a busy machine running
// the test on Citus needs (400 ms, then 1.9 s, were not enough there).
func TestStalledBrokerCostsOnePublishTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	proxy := testkit.StartFaultProxy(t, testkit.Upstream(t, b.nats.URL()))
	_, js := brokertest.Connect(t, proxy.Through(t, b.nats.URL()), b.logger)
	d := b.dispatcher(t, b.pool, js, fast(outbox.WithPublishTimeout(8*time.Second), outbox.WithDatabaseTimeout(3900*time.Millisecond), outbox.WithAtomicBatches(2))...)
	for range 3 {
		b.appendEvent(t, "order.created")
	}
	proxy.Blackhole(t)
	res, err := d.DispatchOnce(context.Background())
	if err != nil || res.Claimed != 3 || res.Failed != 3 {
		t.Fatalf("%+v, %v; want the three rows failed and recorded within the round", res, err)
	}
	if n := b.count(t, `SELECT count(*) FROM outbox_events WHERE tenant_id = $1 AND attempts = 1 AND last_error IS NOT NULL AND next_attempt_at IS NOT NULL`, b.tenant.ID); n != 3 {
		t.Fatalf("%d rows have their failed attempt recorded, want 3", n)
	}
}

// A batch smaller than WithAtomicBatches' (default 32) goes message by
// message: an atomic batch costs more than it saves there.
func TestSmallBatchGoesMessageByMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d := b.dispatcher(t, b.pool, b.nats.JS, fast()...)
	ids := []uuid.UUID{b.appendEvent(t, "order.created"), b.appendEvent(t, "order.created"), b.appendEvent(t, "order.created")}
	if res, err := d.DispatchOnce(context.Background()); err != nil || res.Published != len(ids) {
		t.Fatalf("%+v, %v; want the batch published", res, err)
	}
	for id, batch := range b.streamBatches(t) {
		if batch != "" {
			t.Fatalf("event %s came in atomic batch %s, want each on its own", id, batch)
		}
	}
}

func TestStuckEventIsVisibleAndAnOperatorRetriesIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d := b.dispatcher(t, b.pool, b.nats.JS, fast(outbox.WithMaxAttempts(2), outbox.WithPublishTimeout(200*time.Millisecond))...)
	admin := outbox.NewAdmin(b.pool, b.nats.JS, b.logger)
	ctx := context.Background()
	b.nats.Stop()
	id := b.appendEvent(t, "order.created")

	for attempt := 1; attempt <= 2; attempt++ {
		res, err := d.DispatchOnce(ctx)
		if err != nil || res.Claimed != 1 || res.Failed != 1 {
			t.Fatalf("attempt %d: %+v, %v; want one failed row", attempt, res, err)
		}
		if want := attempt == 2; (res.Stuck == 1) != want {
			t.Fatalf("attempt %d: stuck = %d, want stuck %t", attempt, res.Stuck, want)
		}
		b.clock.Advance(time.Hour) // past any backoff
	}
	if res, err := d.DispatchOnce(ctx); err != nil || res.Claimed != 0 {
		t.Fatalf("a stuck row was claimed again: %+v, %v", res, err)
	}
	stuck, err := admin.Stuck(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(stuck) != 1 || stuck[0].ID != id || stuck[0].Status() != outbox.StatusStuck || stuck[0].Attempts != 2 || stuck[0].LastError == nil || stuck[0].NextAttemptAt != nil {
		t.Fatalf("stuck = %+v, want the event with 2 attempts, its error and no next attempt", stuck)
	}

	b.nats.Restart(t)
	ev, retried, err := admin.Retry(ctx, id)
	if err != nil || !retried || ev.Status() != outbox.StatusPending || ev.Attempts != 0 {
		t.Fatalf("Retry = %+v, %t, %v; want a pending event with fresh attempts", ev, retried, err)
	}
	testkit.WaitFor(t, 20*time.Second, "the retried event to be published", func() bool {
		if _, err := d.DispatchOnce(ctx); err != nil {
			t.Fatalf("dispatch: %v", err)
		}
		b.clock.Advance(time.Second) // past the backoff of a publish attempted while reconnecting
		return b.count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND published_at IS NOT NULL AND stuck_at IS NULL`, id) == 1
	})
	if _, retried, err := admin.Retry(ctx, id); err != nil || retried {
		t.Fatalf("Retry of a published event: retried %t, %v; want false, nil", retried, err)
	}
	if _, _, err := admin.Retry(ctx, uuid.New()); !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("Retry of an unknown event: %v, want ErrNotFound", err)
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		attempts int
		jitter   float64
		want     time.Duration
	}{
		{1, 0, 500 * time.Millisecond},
		{1, 0.999999999, time.Second - 1},
		{2, 0, time.Second},
		{4, 0, 4 * time.Second},
		{9, 0, 128 * time.Second},
		{10, 0, 150 * time.Second}, // capped at 5m
		{1000, 0, 150 * time.Second},
		{0, 0, 500 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := outbox.Backoff(tt.attempts, time.Second, 5*time.Minute, tt.jitter); got != tt.want {
			t.Fatalf("Backoff(%d, jitter %v) = %v, want %v", tt.attempts, tt.jitter, got, tt.want)
		}
	}
}

// The publish observer sees every attempt, failed ones included: while the
// broker is down each claimed row is a failed attempt, and once it is back
// each row is published exactly once; the observer's counts match the
// rounds' results.
func TestPublishObserverCountsFailedAndPublishedAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	seen := map[string]int{}
	d, err := outbox.NewDispatcher(b.pool, b.nats.JS, b.logger, b.clock.Now, fast(
		outbox.WithPublishTimeout(200*time.Millisecond),
		outbox.WithPublishObserver(func(result string, n int) {
			mu.Lock()
			defer mu.Unlock()
			seen[result] += n
		}))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	counts := func() (published, failed int) {
		mu.Lock()
		defer mu.Unlock()
		return seen[outbox.AttemptPublished], seen[outbox.AttemptFailed]
	}
	ctx := context.Background()

	b.nats.Stop()
	for range 3 {
		b.appendEvent(t, "order.created")
	}
	res, err := d.DispatchOnce(ctx)
	if err != nil || res.Claimed != 3 || res.Failed != 3 {
		t.Fatalf("with the broker down: %+v, %v; want 3 claimed, 3 failed", res, err)
	}
	if published, failed := counts(); published != 0 || failed != 3 {
		t.Fatalf("observer saw published %d, failed %d; want 0 and 3", published, failed)
	}

	b.nats.Restart(t)
	wantFailed := 3
	testkit.WaitFor(t, 20*time.Second, "the events to be published after the broker came back", func() bool {
		b.clock.Advance(time.Second) // past any backoff
		res, err := d.DispatchOnce(ctx)
		if err != nil {
			t.Fatalf("dispatch: %v", err)
		}
		wantFailed += res.Failed // attempts made while the client reconnects
		return b.count(t, `SELECT count(*) FROM outbox_events WHERE published_at IS NULL`) == 0
	})
	if published, failed := counts(); published != 3 || failed != wantFailed {
		t.Fatalf("observer saw published %d, failed %d; want 3 and %d", published, failed, wantFailed)
	}
}

// The dispatcher claims tenant by tenant (one shard per claim on Citus): one
// round publishes the due events of every tenant that has some.
func TestDispatchOnceVisitsEveryTenant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d := b.dispatcher(t, b.pool, b.nats.JS, fast()...)
	ctx := context.Background()
	var ids []uuid.UUID
	for range 3 {
		tenant := testkit.NewTenant(t, b.pool)
		for range 2 {
			ev := b.event("order.created")
			ev.TenantID = tenant.ID
			if err := postgres.InTx(ctx, b.pool, func(tx pgx.Tx) error {
				id, err := outbox.Append(ctx, tx, ev)
				ids = append(ids, id)
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	res, err := d.DispatchOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Claimed != 6 || res.Published != 6 {
		t.Fatalf("one round: %+v, want the 6 events of 3 tenants claimed and published", res)
	}
	if n := b.count(t, `SELECT count(*) FROM outbox_events WHERE id = ANY($1) AND published_at IS NOT NULL AND locked_by IS NULL`, ids); n != 6 {
		t.Fatalf("%d of 6 events marked published", n)
	}
	if got := len(b.streamIDs(t)); got != 6 {
		t.Fatalf("%d messages in the stream, want 6", got)
	}
}

// A backlog drains without looking for tenants again after every batch:
// OutboxDueTenants reads every due row's tenant, so a round that asked it
// again per batch would read a backlog of n rows n/batch times (quadratic;
// the burn-down of docs/log/2026-12-02-benchmarks.md fell to a third by it).
func TestABacklogDrainsWithoutLookingForTenantsAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const batch, batches = 5, 20
	backlog := func() {
		t.Helper()
		if err := postgres.InTx(ctx, b.pool, func(tx pgx.Tx) error {
			for range batch * batches {
				if _, err := outbox.Append(ctx, tx, b.event("order.created")); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	published := func() bool {
		return b.count(t, `SELECT count(*) FROM outbox_events WHERE published_at IS NULL`) == 0
	}
	backlog()
	counted, lookups := b.countingPool(t, "-- name: OutboxDueTenants ")
	// One loop, whose rounds look for tenants at its start (which finds
	// the backlog) and at the listener's first connection: two lookups. A
	// full batch wakes a loop for its tenant (for another loop to help),
	// which does not look again; the polls stay out of the count.
	run(t, b.dispatcher(t, counted, b.nats.JS, fast(outbox.WithBatchSize(batch), outbox.WithConcurrency(1), outbox.WithPollInterval(time.Hour))...))
	testkit.WaitFor(t, 30*time.Second, "the backlog published", published)
	if n := lookups.count(); n > 2 {
		t.Fatalf("the dispatcher looked for tenants %d times to drain %d batches; want at most 2", n, batches)
	}
	testkit.WaitFor(t, 30*time.Second, "the rounds of the dispatcher's start", func() bool { return lookups.count() == 2 })
	// A backlog committed and signalled once it runs: its drain, and the
	// rounds its full batches wake, look for no tenant at all.
	backlog()
	b.events.Committed(b.tenant.ID)
	testkit.WaitFor(t, 30*time.Second, "the signalled backlog published", published)
	// One more signalled event: the one loop publishes it in a round after
	// any that the drain's wake-ups started.
	b.appendEvent(t, "order.created")
	testkit.WaitFor(t, 30*time.Second, "the last event published", published)
	if n := lookups.count(); n != 2 {
		t.Fatalf("draining a signalled backlog of %d batches, the dispatcher looked for tenants %d more times; want none", batches, n-2)
	}
}

// A round woken by a Signal claims the tenant the commit named, without
// listing the tenants with due rows first: that list reads every due row's
// tenant (on Citus, every shard), and asked in each commit's round it was
// one statement in three.
func TestASignalledCommitIsClaimedWithoutListingTenants(t *testing.T) {
	t.Parallel()
	b := setup(t)
	counted, lookups := b.countingPool(t, "-- name: OutboxDueTenants ")
	// One loop, no poll: its rounds that look for tenants are its first
	// and the one its listener's first connection asks for, two in all.
	run(t, b.dispatcher(t, counted, b.nats.JS, fast(outbox.WithConcurrency(1), outbox.WithPollInterval(time.Hour))...))
	testkit.WaitFor(t, 30*time.Second, "the rounds of the dispatcher's start", func() bool { return lookups.count() == 2 })
	const commits = 10
	for i := range commits {
		b.appendEvent(t, "order.created") // signals its commit, naming the tenant
		testkit.WaitFor(t, 30*time.Second, "the event published", func() bool {
			return b.count(t, `SELECT count(*) FROM outbox_events WHERE published_at IS NULL`) == 0
		})
		if n := lookups.count(); n != 2 {
			t.Fatalf("after %d signalled commits the dispatcher had looked for tenants %d times; want only its 2 starting rounds", i+1, n)
		}
	}
	// A wake-up that names no tenant (an operator's notification) still
	// looks for them.
	b.events.CommittedAny()
	testkit.WaitFor(t, 30*time.Second, "a round that looks for tenants", func() bool { return lookups.count() == 3 })
}

// A round that fails part-way (here after a publish, as a crash between
// publish and mark would) has taken the tenants its commits named; those
// it did not reach are the next round's, not left for the poll.
func TestAFailedRoundLeavesNoNamedTenantBehind(t *testing.T) {
	t.Parallel()
	b := setup(t)
	counted, lookups := b.countingPool(t, "-- name: OutboxDueTenants ")
	var (
		mu     sync.Mutex
		failed []uuid.UUID // the batch whose round failed: leased until its lease runs out
	)
	hooks := outbox.WithHooks(outbox.DispatcherHooks{AfterPublish: func(ids []uuid.UUID) error {
		mu.Lock()
		defer mu.Unlock()
		if failed == nil {
			failed = ids
			return errors.New("the round fails after its first tenant's publish")
		}
		return nil
	}})
	// One loop, no poll, a linger long enough for both commits to share a
	// round.
	run(t, b.dispatcher(t, counted, b.nats.JS, fast(hooks, outbox.WithConcurrency(1), outbox.WithPollInterval(time.Hour), outbox.WithLinger(outbox.MaxLinger))...))
	testkit.WaitFor(t, 30*time.Second, "the rounds of the dispatcher's start", func() bool { return lookups.count() == 2 })
	other, another := testkit.NewTenant(t, b.pool), testkit.NewTenant(t, b.pool)
	first := b.appendEventFor(t, b.tenant.ID, "order.created")
	second := b.appendEventFor(t, other.ID, "order.created")
	testkit.WaitFor(t, 30*time.Second, "the round that fails", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return failed != nil
	})
	mu.Lock()
	reached := failed[0]
	mu.Unlock()
	stranded := second
	if reached == second {
		stranded = first
	}
	// The next commit, of a third tenant, wakes a round: it takes the
	// tenant the failed round did not reach too.
	third := b.appendEventFor(t, another.ID, "order.created")
	testkit.WaitFor(t, 30*time.Second, "the unreached tenant's event published", func() bool {
		return b.count(t, `SELECT count(*) FROM outbox_events WHERE id = ANY($1) AND published_at IS NOT NULL`, []uuid.UUID{stranded, third}) == 2
	})
}

// statementCounter is a pgx tracer that counts the statements whose SQL
// begins with name.
type statementCounter struct {
	name string
	mu   sync.Mutex
	n    int
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(data.SQL, c.name) {
		c.mu.Lock()
		c.n++
		c.mu.Unlock()
	}
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *statementCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// countingPool returns a pool on b's database whose connections, and the
// dispatcher's that copy its configuration, count the statements whose
// SQL begins with name. It is closed when the test ends.
func (b *testBundle) countingPool(t *testing.T, name string) (*pgxpool.Pool, *statementCounter) {
	t.Helper()
	cfg := b.pool.Config()
	c := &statementCounter{name: name}
	cfg.ConnConfig.Tracer = c
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, c
}

// Commits that wake the dispatcher within its linger share one batch: one
// claim, one publish, one mark for all of them instead of one each.
func TestCommitsWithinTheLingerShareABatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var (
		mu      sync.Mutex
		batches []int
	)
	observe := outbox.WithPublishObserver(func(result string, n int) {
		mu.Lock()
		defer mu.Unlock()
		batches = append(batches, n)
	})
	// The longest linger; the poll stays out of it, and so do failed publishes: a PubAck late
	// past fast's 500ms on a busy Citus run made a batch fail and come
	// again, counted twice.
	run(t, b.dispatcher(t, b.pool, b.nats.JS, fast(observe, outbox.WithLinger(outbox.MaxLinger), outbox.WithPollInterval(time.Hour),
		outbox.WithPublishTimeout(outbox.DefaultPublishTimeout))...))
	// The dispatcher's first rounds (its start, its listener's first
	// connection) are done once a first event is published.
	b.appendEvent(t, "order.created")
	testkit.WaitFor(t, 30*time.Second, "the first event published", func() bool {
		return b.count(t, `SELECT count(*) FROM outbox_events WHERE published_at IS NULL`) == 0
	})
	mu.Lock()
	batches = nil
	mu.Unlock()
	const commits = 50
	began := time.Now()
	for range commits {
		b.appendEvent(t, "order.created") // each signals its commit
	}
	took := time.Since(began)
	testkit.WaitFor(t, 30*time.Second, "the events published", func() bool {
		return b.count(t, `SELECT count(*) FROM outbox_events WHERE published_at IS NULL`) == 0
	})
	mu.Lock()
	defer mu.Unlock()
	// One batch, or two when the listener's first wake-up came between;
	// and one more per linger the commits themselves took (on a loaded
	// Citus run 50 commits took past two seconds).
	if want := 2 + int(took/outbox.MaxLinger); len(batches) > want {
		t.Fatalf("%d commits in %v, each waking the dispatcher, were published in %d batches %v; want them to share at most %d (linger %v)",
			commits, took.Round(time.Millisecond), len(batches), batches, want, outbox.MaxLinger)
	}
}

// outbox_events is vacuumed after a fixed number of changed rows, not a
// share of the table (migration 000012): the claim walks one dead entry
// of the pending index per event published since the last vacuum, so a
// threshold that grew with the 45-day history would make every claim cost
// more the more history there is (docs/OPERATIONS.md).
func TestOutboxTableIsVacuumedAfterAFixedNumberOfChanges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var opts []string
	if err := b.pool.QueryRow(context.Background(), `SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = 'outbox_events'::regclass`).Scan(&opts); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"autovacuum_vacuum_scale_factor=0", "autovacuum_vacuum_threshold=10000"} {
		if !slices.Contains(opts, want) {
			t.Errorf("outbox_events options %v lack %s", opts, want)
		}
	}
}
