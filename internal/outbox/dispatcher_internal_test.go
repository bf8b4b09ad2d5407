package outbox

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/oncepay/oncepay/internal/testdb"
	"github.com/oncepay/oncepay/internal/testkit"
)

// The dispatcher's bookkeeping commits asynchronously on its own
// connections; the service's pool keeps synchronous commits.
func TestBookkeepingCommitsAsynchronouslyOnItsOwnConnections(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t)
	d, err := NewDispatcher(pool, nil, slog.New(slog.DiscardHandler), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	ctx := context.Background()
	var book, service string
	if err := d.book.QueryRow(ctx, "SHOW synchronous_commit").Scan(&book); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, "SHOW synchronous_commit").Scan(&service); err != nil {
		t.Fatal(err)
	}
	if book != "off" || service != "on" {
		t.Fatalf("synchronous_commit: dispatcher %q, service %q; want off, on", book, service)
	}
}

// Without options a dispatcher runs with the defaults the options name,
// and an option given a value that is not positive keeps its default
// (WithAtomicBatches' excepted: 0 is never).
func TestDispatcherDefaultsAndOptions(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t)
	defaults := dispatcherConfig{
		batchSize: 500, lease: 30 * time.Second, pollInterval: time.Second, publishTimeout: 10 * time.Second,
		maxAttempts: 10, concurrency: 2, backoffBase: time.Second, backoffMax: 5 * time.Minute,
		dbTimeout: 5 * time.Second, atomicMin: DefaultAtomicMin, linger: DefaultLinger,
	}
	set := dispatcherConfig{
		batchSize: 7, lease: time.Minute, pollInterval: 2 * time.Second, publishTimeout: 3 * time.Second,
		maxAttempts: 4, concurrency: 5, backoffBase: 6 * time.Second, backoffMax: 7 * time.Minute,
		dbTimeout: 8 * time.Second, atomicMin: 11, atomicSet: true,
		linger: 12 * time.Millisecond, lingerSet: true,
	}
	// WithAtomicBatches' 0 is a value (never atomic), not "the default".
	never := defaults
	never.atomicMin, never.atomicSet = 0, true
	// So is WithLinger's (claim at once); above MaxLinger it is MaxLinger.
	atOnce, longest := defaults, defaults
	atOnce.linger, atOnce.lingerSet = 0, true
	longest.linger, longest.lingerSet = MaxLinger, true
	for _, c := range []struct {
		name string
		opts []DispatcherOption
		want dispatcherConfig
	}{
		{"no options", nil, defaults},
		{"not positive", []DispatcherOption{
			WithBatchSize(0), WithLease(-1), WithPollInterval(0), WithPublishTimeout(0),
			WithMaxAttempts(-1), WithConcurrency(0), WithBackoff(0, -1),
			WithDatabaseTimeout(0),
		}, defaults},
		{"options", []DispatcherOption{
			WithBatchSize(7), WithLease(time.Minute), WithPollInterval(2 * time.Second), WithPublishTimeout(3 * time.Second),
			WithMaxAttempts(4), WithConcurrency(5), WithBackoff(6*time.Second, 7*time.Minute),
			WithDatabaseTimeout(8 * time.Second), WithAtomicBatches(11),
			WithLinger(12 * time.Millisecond),
		}, set},
		{"never atomic", []DispatcherOption{WithAtomicBatches(0)}, never},
		{"less than never", []DispatcherOption{WithAtomicBatches(-3)}, never},
		{"no linger", []DispatcherOption{WithLinger(0)}, atOnce},
		{"less than no linger", []DispatcherOption{WithLinger(-time.Second)}, atOnce},
		{"linger too long", []DispatcherOption{WithLinger(time.Hour)}, longest},
	} {
		d, err := NewDispatcher(pool, nil, slog.New(slog.DiscardHandler), time.Now, c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Close)
		if d.cfg != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, d.cfg, c.want)
		}
		if got, want := d.book.Config().MaxConns, int32(c.want.concurrency)+1; got != want {
			t.Errorf("%s: the dispatcher's own pool holds %d connections, want %d (one per loop, one more)", c.name, got, want)
		}
	}
}

// While one loop lingers, a wake-up that reaches another loop does not
// start a second linger and round: the lingering loop claims after that
// wake-up was sent, so it takes the rows of the commit it announced.
func TestOnlyOneLoopLingers(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t)
	d, err := NewDispatcher(pool, nil, slog.New(slog.DiscardHandler), time.Now, WithLinger(MaxLinger))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := make(chan bool, 1)
	go func() { first <- d.linger(ctx) }()
	testkit.WaitFor(t, 10*time.Second, "the first loop lingering", d.lingering.Load)
	if d.linger(ctx) {
		t.Fatal("a second loop lingered and would run a round while the first one lingers")
	}
	cancel() // ends the first linger early
	if !<-first {
		t.Fatal("the lingering loop would not run its round")
	}
	if d.lingering.Load() {
		t.Fatal("the linger is still marked after it ended: the next wake-up would be dropped")
	}
}

// A Signal hands a woken round the tenants named since the last one took
// them, each once, at most limit of them; the rest wake the next round.
// A round that lists the tenants (the poll's, or one a wake-up naming no
// tenant woke) leaves the named ones to a round of their own.
func TestSignalHandsOutTheNamedTenants(t *testing.T) {
	s := NewSignal()
	if tenants, all := s.take(false, 10); len(tenants) != 0 || all {
		t.Fatalf("a fresh signal handed out %v, all=%v", tenants, all)
	}
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	for _, tenant := range []uuid.UUID{a, b, a, c, b} {
		s.Committed(tenant)
	}
	<-s.c // the commits' wake-ups merged into one
	got, all := s.take(false, 2)
	if len(got) != 2 || all {
		t.Fatalf("take(2) = %v, all=%v; want two tenants", got, all)
	}
	select {
	case <-s.c:
	default:
		t.Fatal("a tenant was left over and no round was woken for it")
	}
	rest, _ := s.take(false, 2)
	if seen := append(got, rest...); len(seen) != 3 || !slices.Contains(seen, a) || !slices.Contains(seen, b) || !slices.Contains(seen, c) {
		t.Fatalf("handed out %v; want %v, %v and %v once each", seen, a, b, c)
	}
	select {
	case <-s.c:
		t.Fatal("a round was woken with nothing left to take")
	default:
	}

	s.CommittedAny()
	s.Committed(a)
	<-s.c
	if tenants, all := s.take(false, 10); !all || len(tenants) != 0 {
		t.Fatalf("after a wake-up naming no tenant take = %v, all=%v; want a list and no tenant", tenants, all)
	}
	select {
	case <-s.c:
	default:
		t.Fatal("a listing round left a named tenant and no round was woken for it")
	}
	if tenants, all := s.take(false, 10); all || !slices.Equal(tenants, []uuid.UUID{a}) {
		t.Fatalf("the next round took %v, all=%v; want the named tenant, no list", tenants, all)
	}
	s.Committed(b)
	<-s.c
	if tenants, all := s.take(true, 10); !all || len(tenants) != 0 {
		t.Fatalf("the poll's round took %v, all=%v; want a list and no tenant", tenants, all)
	}
	if tenants, _ := s.take(false, 10); !slices.Equal(tenants, []uuid.UUID{b}) {
		t.Fatalf("after the poll's round the next took %v; want %v", tenants, b)
	}
	s.CommittedAny()
	if _, all := s.take(true, 10); !all {
		t.Fatal("the poll's round did not list")
	}
	if _, all := s.take(false, 10); !all {
		t.Fatal("a poll's round took a wake-up that named no tenant; the round it woke must list too")
	}

	var none *Signal
	none.Committed(a) // a process without a dispatcher
	none.CommittedAny()
}
