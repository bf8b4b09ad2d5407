package retention_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/retention"
	"github.com/oncepay/oncepay/internal/tenants"
	"github.com/oncepay/oncepay/internal/testdb"
	"github.com/oncepay/oncepay/internal/testkit"
	"github.com/oncepay/oncepay/internal/webhooks"
)

// covers are operations as the registry declares them (operation.Spec).
var covers = retention.Covers{
	"orders.create":   {retention.HorizonClientRetry},
	"payments.create": {retention.HorizonClientRetry, retention.HorizonSettlement},
	"refunds.create":  {retention.HorizonClientRetry, retention.HorizonSettlement},
}

func defaultPolicy() retention.Policy {
	p := retention.DefaultPolicy()
	p.Idempotency = idempotency.Policy{"orders.create": 7 * retention.Day, "payments.create": 45 * retention.Day, "refunds.create": 45 * retention.Day}
	return p
}

func TestCheck(t *testing.T) {
	t.Parallel()
	if err := retention.Check(defaultPolicy(), retention.DefaultHorizons(), covers); err != nil {
		t.Fatalf("the defaults do not pass their own check: %v", err)
	}
	short := defaultPolicy()
	short.Idempotency = idempotency.Policy{
		"orders.create":   retention.Day,
		"payments.create": 5 * time.Minute, // the SQS FIFO window
		"refunds.create":  45 * retention.Day,
	}
	short.ProcessedMessages = 7 * retention.Day
	err := retention.Check(short, retention.DefaultHorizons(), covers)
	if err == nil {
		t.Fatal("a 5-minute retention for payments passed the check")
	}
	for _, want := range []string{
		"retention of payments.create (5m) is shorter than the settlement horizon (45d)",
		"retention of processed_messages (7d) is shorter than the operator replay horizon (30d)",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "orders.create") || strings.Contains(err.Error(), "refunds.create") {
		t.Fatalf("error names retentions that are fine: %v", err)
	}

	// Covering the horizons is not enough for the inbox: it must outlive the
	// events an operator can still replay, plus the time a replay may wait
	// in the stream for its consumer. 35 days covers each bound alone and
	// still misses a 34-day-old event replayed and consumed 2 days later.
	replayable := defaultPolicy()
	replayable.ProcessedMessages = 35 * retention.Day
	replayable.PublishedEvents = 35 * retention.Day
	err = retention.Check(replayable, retention.DefaultHorizons(), covers)
	if want := "retention of processed_messages (35d) is shorter than the age of a replayable event (35d, the longer of published_events' retention and the operator replay horizon) plus the queue redelivery horizon it may then wait in the stream (7d)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v does not say %q", err, want)
	}
	replayable.ProcessedMessages = 42 * retention.Day
	if err := retention.Check(replayable, retention.DefaultHorizons(), covers); err != nil {
		t.Fatalf("35 days of replayable events plus 7 in the stream, kept 42 days: %v", err)
	}
	// The operator replay horizon counts when the outbox keeps its events
	// for less than it.
	replayable.PublishedEvents = 30 * retention.Day
	replayable.ProcessedMessages = 36 * retention.Day
	if err := retention.Check(replayable, retention.DefaultHorizons(), covers); err == nil || !strings.Contains(err.Error(), "(36d) is shorter than the age of a replayable event (30d") {
		t.Fatalf("36 days against a 30-day replay horizon plus 7 in the stream: %v", err)
	}
}

// tables are the owners' deletes, as the service wires them.
func tables() retention.Tables {
	idem := idempotency.NewStore(retention.DefaultPolicy().Idempotency, time.Now, idempotency.WithLease(time.Minute))
	return retention.Tables{
		Tenants:           tenants.IDs,
		Idempotency:       idem.DeleteExpired,
		PublishedEvents:   outbox.DeleteExpired,
		WebhookReceipts:   webhooks.DeleteExpired,
		ProcessedMessages: inbox.DeleteExpired,
		CountStuck:        idem.CountStuck,
	}
}

type bundle struct {
	pool    *pgxpool.Pool
	clock   *testkit.Clock
	sweeper *retention.Sweeper
	tenant  uuid.UUID
	t0      time.Time
}

func setup(t *testing.T) *bundle {
	t.Helper()
	pool := testdb.Pool(t)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	b := &bundle{pool: pool, clock: testkit.StoppedClock(t0), tenant: uuid.New(), t0: t0}
	b.sweeper = retention.NewSweeper(pool, tables(), retention.DefaultPolicy(), slog.New(slog.NewTextHandler(io.Discard, nil)), b.clock.Now,
		retention.WithBatchSize(100), retention.WithStuckAfter(time.Hour))
	b.exec(t, `INSERT INTO tenants (id, slug, name, created_at) VALUES ($1, 't', 'T', $2)`, b.tenant, t0)
	return b
}

func (b *bundle) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if _, err := b.pool.Exec(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func (b *bundle) count(t *testing.T, q string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// record inserts an idempotency record in state with the given expiry.
func (b *bundle) record(t *testing.T, key, state string, expires, lockedUntil time.Time) {
	t.Helper()
	b.exec(t, `INSERT INTO api_idempotency (tenant_id, operation, idempotency_key, request_hash, state, recovery_point,
		locked_until, request_id, status_code, response_headers, response_body, created_at, updated_at, expires_at)
		VALUES ($1, 'payments.create', $2, '\x00', $3, 'x', $4, '', 201, '{}', '{}', $5, $5, $6)`,
		b.tenant, key, state, lockedUntil, b.t0, expires)
}

// Every kind of record survives a sweep just before its expiry and is gone
// after a sweep just after it.
func TestSweepExpiryBoundary(t *testing.T) {
	t.Parallel()
	p := retention.DefaultPolicy()
	for _, k := range []struct {
		kind   string
		expiry time.Duration // after t0, when the record was finished
		insert string        // $1 tenant, $2 t0, $3 expiry
	}{
		{"api_idempotency", defaultPolicy().Idempotency["payments.create"], `INSERT INTO api_idempotency (tenant_id, operation, idempotency_key, request_hash, state, recovery_point,
			locked_until, request_id, status_code, response_headers, response_body, created_at, updated_at, expires_at)
			VALUES ($1, 'payments.create', 'k', '\x00', 'completed', 'finished', NULL, '', 201, '{}', '{}', $2, $2, $3)`},
		{"outbox_events", p.PublishedEvents, `INSERT INTO outbox_events (id, tenant_id, event_type, aggregate_type, aggregate_id, idempotency_key, payload, occurred_at, published_at)
			SELECT g, $1, 'x', 'x', g, '', '{}', $2, $2 FROM gen_random_uuid() g WHERE $3::timestamptz IS NOT NULL`},
		{"webhook_receipts", p.WebhookReceipts, `INSERT INTO webhook_receipts (delivery_id, event_type, payload, received_at, processed_at)
			SELECT 'd', 'x', '{}', $2, $2 WHERE $1::uuid IS NOT NULL AND $3::timestamptz IS NOT NULL`},
		{"processed_messages", p.ProcessedMessages, `INSERT INTO processed_messages (tenant_id, message_id, subscriber, processed_at)
			SELECT $1, 'm', 'fulfillment', $2 WHERE $3::timestamptz IS NOT NULL`},
	} {
		t.Run(k.kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			exp := b.t0.Add(k.expiry)
			b.exec(t, k.insert, b.tenant, b.t0, exp)
			left := func() int { return b.count(t, `SELECT count(*) FROM `+k.kind) }
			b.clock.Advance(exp.Add(-time.Microsecond).Sub(b.clock.Now()))
			if _, err := b.sweeper.SweepOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			if left() != 1 {
				t.Fatal("deleted before its expiry")
			}
			b.clock.Advance(exp.Add(time.Microsecond).Sub(b.clock.Now()))
			rep, err := b.sweeper.SweepOnce(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if left() != 0 || rep.Deleted[k.kind] != 1 {
				t.Fatalf("not deleted after its expiry (report %+v)", rep)
			}
		})
	}
}

// Unsettled operations survive, and are reported as stuck once their lease
// has been over for a while.
func TestSweepKeepsUnsettled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := b.t0.Add(-100 * retention.Day)
	b.record(t, "pending", "pending", old, old)
	b.record(t, "done", "completed", old, old)
	b.exec(t, `INSERT INTO outbox_events (id, tenant_id, event_type, aggregate_type, aggregate_id, idempotency_key, payload, occurred_at, published_at)
		VALUES ($1, $2, 'x', 'x', $1, '', '{}', $3, NULL), ($4, $2, 'x', 'x', $4, '', '{}', $3, $3)`, uuid.New(), b.tenant, old, uuid.New())
	b.exec(t, `INSERT INTO webhook_receipts (delivery_id, event_type, payload, received_at, processed_at)
		VALUES ('unprocessed', 'x', '{}', $1, NULL), ('processed', 'x', '{}', $1, $1)`, old)
	rep, err := b.sweeper.SweepOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := b.count(t, `SELECT count(*) FROM api_idempotency WHERE idempotency_key = 'pending'`); got != 1 {
		t.Fatal("a pending (unsettled) record was deleted")
	}
	if b.count(t, `SELECT count(*) FROM api_idempotency`) != 1 {
		t.Fatal("the finished expired record survived")
	}
	if b.count(t, `SELECT count(*) FROM outbox_events WHERE published_at IS NULL`) != 1 || b.count(t, `SELECT count(*) FROM outbox_events`) != 1 {
		t.Fatal("outbox: want the unpublished row kept and the old published one deleted")
	}
	if b.count(t, `SELECT count(*) FROM webhook_receipts`) != 1 || b.count(t, `SELECT count(*) FROM webhook_receipts WHERE processed_at IS NULL`) != 1 {
		t.Fatal("receipts: want the unprocessed one kept and the old processed one deleted")
	}
	if rep.Stuck != 1 {
		t.Fatalf("stuck = %d, want 1", rep.Stuck)
	}
}

// Two sweepers at once delete every expired record exactly once, without
// errors or waiting on each other.
func TestTwoSweepersAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `INSERT INTO api_idempotency (tenant_id, operation, idempotency_key, request_hash, state, recovery_point,
		locked_until, request_id, status_code, response_headers, response_body, created_at, updated_at, expires_at)
		SELECT $1, 'orders.create', 'k' || g, '\x00', 'completed', 'finished', NULL, '', 201, '{}', '{}', $2, $2, $2
		FROM generate_series(1, 2000) g`, b.tenant, b.t0)
	b.clock.Advance(b.t0.Add(time.Second).Sub(b.clock.Now()))
	var wg sync.WaitGroup
	reports := make([]retention.Report, 2)
	for i := range reports {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := b.sweeper.SweepOnce(context.Background())
			if err != nil {
				t.Errorf("sweeper %d: %v", i, err)
			}
			reports[i] = rep
		}()
	}
	wg.Wait()
	if left := b.count(t, `SELECT count(*) FROM api_idempotency`); left != 0 {
		t.Fatalf("%d records left", left)
	}
	if total := reports[0].Deleted["api_idempotency"] + reports[1].Deleted["api_idempotency"]; total != 2000 {
		t.Fatalf("sweepers report %d deletions, want 2000", total)
	}
}

// A sweeper without options deletes DefaultBatchSize (250) rows per
// statement and reports records stuck DefaultStuckAfter (15 minutes) after
// their lease, as docs/CONFIGURATION.md and docs/OPERATIONS.md say; options
// change both, and a value that is not positive keeps the default.
func TestSweeperDefaultsAndOptions(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name       string
		opts       []retention.SweeperOption
		batch      int
		stuckAfter time.Duration
	}{
		{"defaults", nil, 250, 15 * time.Minute},
		{"not positive", []retention.SweeperOption{retention.WithBatchSize(0), retention.WithStuckAfter(-time.Minute)}, 250, 15 * time.Minute},
		{"options", []retention.SweeperOption{retention.WithBatchSize(7), retention.WithStuckAfter(time.Hour)}, 7, time.Hour},
	} {
		var limits []int
		var stuckCutoff time.Time
		del := func(_ context.Context, _ pgx.Tx, _ time.Time, limit int) (int64, error) {
			limits = append(limits, limit)
			return 0, nil
		}
		tdel := func(ctx context.Context, tx pgx.Tx, _ uuid.UUID, cutoff time.Time, limit int) (int64, error) {
			return del(ctx, tx, cutoff, limit)
		}
		s := retention.NewSweeper(pool, retention.Tables{
			Tenants:     func(context.Context, *pgxpool.Pool) ([]uuid.UUID, error) { return []uuid.UUID{uuid.New()}, nil },
			Idempotency: tdel, PublishedEvents: tdel, WebhookReceipts: del, ProcessedMessages: tdel,
			CountStuck: func(_ context.Context, _ idempotency.DB, cutoff time.Time) (int64, error) {
				stuckCutoff = cutoff
				return 0, nil
			},
		}, retention.DefaultPolicy(), slog.New(slog.DiscardHandler), func() time.Time { return now }, c.opts...)
		if _, err := s.SweepOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		if len(limits) != 4 || slices.ContainsFunc(limits, func(l int) bool { return l != c.batch }) {
			t.Errorf("%s: delete limits %v, want 4 times %d", c.name, limits, c.batch)
		}
		if want := now.Add(-c.stuckAfter); !stuckCutoff.Equal(want) {
			t.Errorf("%s: stuck cutoff %v, want %v (%v before now)", c.name, stuckCutoff, want, c.stuckAfter)
		}
	}
}
