package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/retention"
	"github.com/oncepay/oncepay/internal/tenants"
	"github.com/oncepay/oncepay/internal/webhooks"
)

// The sweep comparison (--sweep-records N): does forgetting a month of
// records stall the customers of today? Each round seeds N expired records
// (not measured), then measures the create scenario for --duration, then
// while the service's own retention.Sweeper deletes all N (create-sweeping,
// which lasts exactly as long as the sweep), then for --duration again; the
// two create runs bracket the sweep so that drift on a shared machine hits
// both alike. The targets: create-sweeping's p99 at most 1.25x and its
// throughput at least 0.9x of create's.

// Scenario names of the sweep comparison.
const (
	scenarioCreateSweeping = "create-sweeping"
)

// sweepMix is how the seeded expired records are spread over the kinds the
// sweeper deletes, in parts of ten: half idempotency records (the table the
// create scenario writes to), the rest the other kinds.
var sweepMix = []struct {
	kind  string
	tenth int
}{
	{"api_idempotency", 5},
	{"processed_messages", 2},
	{"outbox_events", 2},
	{"webhook_receipts", 1},
}

// sweepBench seeds expired records and sweeps them.
type sweepBench struct {
	pool     *pgxpool.Pool
	tenantID uuid.UUID
	records  int
	batch    int
	duty     float64
	seeded   int // rounds seeded so far, to keep keys apart
}

// seed inserts s.records expired records (past every retention of the
// default policy), in chunks, then vacuums and checkpoints so that neither
// the sweep nor the load pays for the seeding.
func (s *sweepBench) seed(ctx context.Context, out io.Writer) error {
	s.seeded++
	t0 := time.Now()
	// Expired records an interrupted run left behind would make the
	// measured sweep longer than the records it was given: clear them first,
	// at full speed, unmeasured.
	if n, err := s.sweep(ctx, retention.WithDutyCycle(1)); err != nil {
		return fmt.Errorf("clear expired records left by an earlier run: %w", err)
	} else if n > 0 {
		fmt.Fprintf(out, "  cleared %d expired records left by an earlier run\n", n)
	}
	old := time.Now().Add(-60 * retention.Day) // older than every retention
	const chunk = 50_000
	for _, m := range sweepMix {
		n := s.records * m.tenth / 10
		for from := 0; from < n; from += chunk {
			to := min(from+chunk, n)
			var q string
			switch m.kind {
			case "api_idempotency":
				q = `INSERT INTO api_idempotency (tenant_id, operation, idempotency_key, request_hash, state, recovery_point,
					locked_until, request_id, status_code, response_headers, response_body, resource_type, resource_id,
					created_at, updated_at, expires_at)
					SELECT $1, 'orders.create', $2 || g, sha256(g::text::bytea), 'completed', 'finished', NULL,
					md5(g::text), 201, '{"Content-Type": "application/json"}', convert_to(repeat('x', 320), 'UTF8'),
					'order', gen_random_uuid(), $3::timestamptz, $3::timestamptz, $3::timestamptz + g * interval '1 microsecond'
					FROM generate_series($4::int, $5::int) g`
			case "processed_messages":
				q = `INSERT INTO processed_messages (tenant_id, message_id, subscriber, processed_at)
					SELECT $1, $2 || g, 'fulfillment', $3::timestamptz + g * interval '1 microsecond'
					FROM generate_series($4::int, $5::int) g`
			case "outbox_events":
				q = `INSERT INTO outbox_events (id, tenant_id, event_type, aggregate_type, aggregate_id, idempotency_key,
					payload, occurred_at, published_at)
					SELECT gen_random_uuid(), $1, 'order.created', 'order', gen_random_uuid(), $2 || g,
					jsonb_build_object('pad', repeat('x', 200)), $3::timestamptz, $3::timestamptz + g * interval '1 microsecond'
					FROM generate_series($4::int, $5::int) g`
			case "webhook_receipts":
				q = `INSERT INTO webhook_receipts (delivery_id, event_type, payload, received_at, processed_at)
					SELECT $2 || g, 'charge.succeeded', jsonb_build_object('pad', repeat('x', 300)),
					$3::timestamptz + g * interval '1 microsecond', $3::timestamptz FROM generate_series($4::int, $5::int) g WHERE $1::uuid IS NOT NULL`
			}
			prefix := fmt.Sprintf("sweep-%d-%d-", time.Now().UnixNano(), s.seeded)
			if _, err := s.pool.Exec(ctx, q, s.tenantID, prefix, old, from+1, to); err != nil {
				return fmt.Errorf("seed %s: %w", m.kind, err)
			}
		}
	}
	// Expired records are old: vacuumed, their pages written out long ago.
	for _, m := range sweepMix {
		if _, err := s.pool.Exec(ctx, "VACUUM (ANALYZE) "+m.kind); err != nil {
			return fmt.Errorf("vacuum %s: %w", m.kind, err)
		}
	}
	if _, err := s.pool.Exec(ctx, "CHECKPOINT"); err != nil {
		fmt.Fprintf(out, "  (no CHECKPOINT after seeding: %v)\n", err)
	}
	fmt.Fprintf(out, "  seeded %d expired records in %s\n", s.records, time.Since(t0).Round(time.Millisecond))
	return nil
}

// sweep deletes every expired record with the service's sweeper (paced
// like the service's unless opts say otherwise) and returns how many it
// deleted.
func (s *sweepBench) sweep(ctx context.Context, opts ...retention.SweeperOption) (int64, error) {
	opts = append([]retention.SweeperOption{retention.WithBatchSize(s.batch), retention.WithStuckAfter(time.Hour), retention.WithDutyCycle(s.duty)}, opts...)
	rep, err := serviceSweeper(s.pool, opts...).SweepOnce(ctx)
	var n int64
	for _, d := range rep.Deleted {
		n += d
	}
	return n, err
}

// measureSweeping runs the create load from clients goroutines for exactly
// as long as one sweep of the seeded records takes (after the usual
// warm-up). The sweep must delete every seeded record.
func (s *sweepBench) measureSweeping(ctx context.Context, clients int, l load, do op, errs *errorLog, probe cpuProbe, out io.Writer) (result, error) {
	res := result{scenario: scenarioCreateSweeping, clients: clients}
	if l.warmup > 0 {
		w := runPhase(ctx, res.scenario, clients, time.Now().Add(l.warmup), nil, do, errs)
		res.errors += w.errors
	}
	loadCtx, stop := context.WithCancel(ctx)
	defer stop()
	type swept struct {
		n   int64
		err error
		d   time.Duration
	}
	done := make(chan swept, 1)
	before := probe.sample()
	go func() {
		t0 := time.Now()
		n, err := s.sweep(ctx)
		done <- swept{n, err, time.Since(t0)}
		stop()
	}()
	m := runPhase(loadCtx, res.scenario, clients, time.Now().Add(24*time.Hour), nil, do, errs)
	sw := <-done
	res.cpu = probe.sample().sub(before)
	if sw.err != nil {
		return res, fmt.Errorf("sweep: %w", sw.err)
	}
	if sw.n < int64(s.records) {
		return res, fmt.Errorf("sweep deleted %d records, want the %d seeded", sw.n, s.records)
	}
	fmt.Fprintf(out, "  swept %d records in %s (%.0f/s) under load\n", sw.n, sw.d.Round(time.Millisecond), float64(sw.n)/sw.d.Seconds())
	res.requests = m.requests
	res.errors += m.errors
	res.elapsed = m.elapsed
	res.latencies = m.latencies
	return res, nil
}

// sweepTargets judges create-sweeping against create at each client count.
func sweepTargets(results []result, clientCounts []int) []target {
	var out []target
	for _, c := range clientCounts {
		base, okBase := findResult(results, scenarioCreate, c)
		sw, okSweep := findResult(results, scenarioCreateSweeping, c)
		bp99, sp99 := percentile(base.latencies, 99), percentile(sw.latencies, 99)
		out = append(out,
			target{
				name: fmt.Sprintf("create-sweeping/create p99 @%d", c), want: 1.25, unit: "x",
				got:    ratio(float64(sp99), float64(bp99)),
				detail: fmt.Sprintf("%s vs %s", ms(sp99), ms(bp99)),
				skip:   !okBase || !okSweep,
			},
			target{
				name: fmt.Sprintf("create-sweeping/create throughput @%d", c), want: 0.9, atLeast: true, unit: "x",
				got:    ratio(sw.throughput(), base.throughput()),
				detail: fmt.Sprintf("%.1f vs %.1f req/s", sw.throughput(), base.throughput()),
				skip:   !okBase || !okSweep,
			})
	}
	return out
}

// serviceSweeper is the service's retention sweeper on pool, with its
// default policy and tables, and opts.
func serviceSweeper(pool *pgxpool.Pool, opts ...retention.SweeperOption) *retention.Sweeper {
	policy := retention.DefaultPolicy()
	idem := idempotency.NewStore(policy.Idempotency, time.Now, idempotency.WithLease(time.Minute))
	return retention.NewSweeper(pool, retention.Tables{
		Tenants:           tenants.IDs,
		Idempotency:       idem.DeleteExpired,
		PublishedEvents:   outbox.DeleteExpired,
		WebhookReceipts:   webhooks.DeleteExpired,
		ProcessedMessages: inbox.DeleteExpired,
		CountStuck:        idem.CountStuck,
	}, policy, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now, opts...)
}
