package outbox_test

import (
	"context"
	"fmt"
	"log/slog"
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

// testBundle is one database with a tenant, one embedded JetStream and a
// clock the test can move forward.
type testBundle struct {
	pool   *pgxpool.Pool
	nats   *brokertest.Bundle
	logger *slog.Logger
	clock  *testkit.Clock
	tenant testkit.Tenant
	// events is what a service of the test's "process" would tell its
	// dispatchers after a commit (appendEvent does).
	events *outbox.Signal
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	b := &testBundle{pool: testkit.Pool(t), clock: testkit.NewClock(), events: outbox.NewSignal()}
	b.nats = brokertest.Start(t, broker.StreamsConfig{})
	b.logger = b.nats.Logger
	b.tenant = testkit.NewTenant(t, b.pool)
	return b
}

// fast makes a dispatcher react within milliseconds; opts come after, so
// they override it.
func fast(opts ...outbox.DispatcherOption) []outbox.DispatcherOption {
	return append([]outbox.DispatcherOption{
		outbox.WithPollInterval(50 * time.Millisecond),
		outbox.WithPublishTimeout(500 * time.Millisecond),
		outbox.WithBackoff(20*time.Millisecond, 200*time.Millisecond),
		outbox.WithMaxAttempts(1000),
	}, opts...)
}

// dispatcher returns a dispatcher woken by b.events, closed when the test
// ends.
func (b *testBundle) dispatcher(t *testing.T, pool *pgxpool.Pool, js jetstream.JetStream, opts ...outbox.DispatcherOption) *outbox.Dispatcher {
	t.Helper()
	d, err := outbox.NewDispatcher(pool, js, b.logger, b.clock.Now, append(opts, outbox.WithSignal(b.events))...)
	if err != nil {
		t.Fatalf("new dispatcher: %v", err)
	}
	t.Cleanup(d.Close)
	return d
}

// run runs d until the test ends.
func run(t *testing.T, d *outbox.Dispatcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dispatcher: %v", err)
		}
	})
}

// appendEvent commits one event of typ in its own transaction and then
// signals the commit, as the services do.
func (b *testBundle) appendEvent(t *testing.T, typ string) uuid.UUID {
	t.Helper()
	return b.appendEventFor(t, b.tenant.ID, typ)
}

// appendEventFor is appendEvent for another tenant of b's database.
func (b *testBundle) appendEventFor(t *testing.T, tenant uuid.UUID, typ string) uuid.UUID {
	t.Helper()
	ev := b.event(typ)
	ev.TenantID = tenant
	var id uuid.UUID
	err := postgres.InTx(context.Background(), b.pool, func(tx pgx.Tx) error {
		var err error
		id, err = outbox.Append(context.Background(), tx, ev)
		return err
	})
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	b.events.Committed(tenant)
	return id
}

func (b *testBundle) event(typ string) outbox.Event {
	return outbox.Event{
		TenantID: b.tenant.ID, Type: typ, AggregateType: "test", AggregateID: uuid.New(),
		IdempotencyKey: "key-" + uuid.NewString(), OccurredAt: b.clock.Now(), Payload: map[string]any{"n": 1},
	}
}

func (b *testBundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("count %q: %v", query, err)
	}
	return n
}

// streamIDs returns how often each Nats-Msg-Id is stored in the stream.
func (b *testBundle) streamIDs(t *testing.T) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := b.nats.JS.Stream(ctx, broker.StreamEvents)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	ids := make(map[string]int)
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get stream message %d: %v", seq, err)
		}
		ids[m.Header.Get(jetstream.MsgIDHeader)]++
	}
	return ids
}

// streamBatches returns, by event id, the atomic batch each stored message
// came in (its Nats-Batch-Id; "" when it came on its own).
func (b *testBundle) streamBatches(t *testing.T) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := b.nats.JS.Stream(ctx, broker.StreamEvents)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	batches := make(map[string]string)
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get stream message %d: %v", seq, err)
		}
		batches[m.Header.Get(jetstream.MsgIDHeader)] = m.Header.Get("Nats-Batch-Id")
	}
	return batches
}

func describe(ids map[string]int) string {
	dups := 0
	for _, n := range ids {
		if n > 1 {
			dups++
		}
	}
	return fmt.Sprintf("%d ids, %d stored more than once", len(ids), dups)
}
