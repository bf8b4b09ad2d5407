package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The grown-data comparison (--grow-records N): does a create or a replay
// cost more once the tables are large? It measures create and replay at
// each client count on the database as it is, then seeds, for the tenant,
// N finished idempotency records (live: none has expired), N/5 orders and
// N/5 published events (not measured; INSERT ... SELECT, server-side),
// vacuums and checkpoints, and measures the same again (create-grown,
// replay-grown). The targets: p50 and p99 of each at most 1.2x of the run
// before seeding. It prints the tables' and their indexes' sizes and dead
// rows before and after, and deletes what it seeded at the end (not
// measured), so that the bench's database does not stay grown.

// Scenario names of the grown-data comparison.
const (
	scenarioCreateGrown = "create-grown"
	scenarioReplayGrown = "replay-grown"
)

// writtenTables are the tables a create writes: every run vacuums them
// before it measures, and the grown comparison reports their sizes.
var writtenTables = []string{"api_idempotency", "orders", "order_items", "outbox_events"}

// growBench seeds the grown tables.
type growBench struct {
	pool     *pgxpool.Pool
	tenantID uuid.UUID
	records  int
	prefix   string // of every seeded key, to delete them afterwards
}

// seed inserts the records, orders and events, then vacuums and
// checkpoints, so that the measurement after it pays for neither.
func (g *growBench) seed(ctx context.Context, out io.Writer) error {
	t0 := time.Now()
	g.prefix = fmt.Sprintf("grown-%d-", time.Now().UnixNano())
	const chunk = 100_000
	// Times spread over the retention: records created in the last 40 days,
	// expiring 45 days after.
	now := time.Now().UTC()
	seeds := []struct {
		table string
		n     int
		sql   string
	}{
		{"api_idempotency", g.records, `INSERT INTO api_idempotency (tenant_id, operation, idempotency_key, request_hash, state, recovery_point,
			locked_until, request_id, status_code, response_headers, response_body, resource_type, resource_id,
			created_at, updated_at, expires_at)
			SELECT $1, 'orders.create', $2 || md5(g::text), sha256(g::text::bytea), 'completed', 'finished', NULL,
			md5(g::text), 201, '{"Content-Type": "application/json"}', convert_to(repeat('x', 320), 'UTF8'),
			'order', gen_random_uuid(), t, t, t + interval '45 days'
			FROM generate_series($4::int, $5::int) g, LATERAL (SELECT $3::timestamptz - (g % 3456000) * interval '1 second') AS c(t)`},
		{"orders", g.records / 5, `INSERT INTO orders (id, tenant_id, idempotency_key, request_hash, status, currency, amount_total, created_at, updated_at)
			SELECT gen_random_uuid(), $1, $2 || md5(g::text), sha256(g::text::bytea), 'paid', 'EUR', 1800, t, t
			FROM generate_series($4::int, $5::int) g, LATERAL (SELECT $3::timestamptz - (g % 3456000) * interval '1 second') AS c(t)`},
		{"outbox_events", g.records / 5, `INSERT INTO outbox_events (id, tenant_id, event_type, aggregate_type, aggregate_id, idempotency_key,
			payload, occurred_at, published_at)
			SELECT gen_random_uuid(), $1, 'order.created', 'order', gen_random_uuid(), $2 || md5(g::text),
			jsonb_build_object('pad', repeat('x', 200)), t, t
			FROM generate_series($4::int, $5::int) g, LATERAL (SELECT $3::timestamptz - (g % 600000) * interval '1 second') AS c(t)`},
	}
	for _, s := range seeds {
		for from := 0; from < s.n; from += chunk {
			to := min(from+chunk, s.n)
			if _, err := g.pool.Exec(ctx, s.sql, g.tenantID, g.prefix, now, from+1, to); err != nil {
				return fmt.Errorf("seed %s: %w", s.table, err)
			}
		}
	}
	if err := g.settle(ctx, out); err != nil {
		return err
	}
	fmt.Fprintf(out, "  seeded %d idempotency records, %d orders and %d published events in %s\n",
		g.records, g.records/5, g.records/5, time.Since(t0).Round(time.Second))
	return nil
}

// settle vacuums the grown tables and checkpoints.
func (g *growBench) settle(ctx context.Context, out io.Writer) error {
	_, err := vacuumWritten(ctx, g.pool, out)
	return err
}

// vacuumWritten vacuums writtenTables and checkpoints, and returns how
// many dead rows they held before.
func vacuumWritten(ctx context.Context, pool *pgxpool.Pool, out io.Writer) (int64, error) {
	conn, release, err := untimed(ctx, pool)
	if err != nil {
		return 0, err
	}
	defer release()
	var dead int64
	if err := conn.QueryRow(ctx, "SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_user_tables WHERE relname = ANY($1)", writtenTables).Scan(&dead); err != nil {
		return 0, fmt.Errorf("count dead rows: %w", err)
	}
	for _, t := range writtenTables {
		if _, err := conn.Exec(ctx, "VACUUM (ANALYZE) "+t); err != nil {
			return 0, fmt.Errorf("vacuum %s: %w", t, err)
		}
	}
	if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
		fmt.Fprintf(out, "  (no CHECKPOINT: %v)\n", err)
	}
	return dead, nil
}

// unseed deletes what seed inserted.
func (g *growBench) unseed(ctx context.Context, out io.Writer) error {
	if g.prefix == "" {
		return nil
	}
	t0 := time.Now()
	conn, release, err := untimed(ctx, g.pool)
	if err != nil {
		return err
	}
	defer release()
	for _, t := range []string{"api_idempotency", "orders", "outbox_events"} {
		if _, err := conn.Exec(ctx, "DELETE FROM "+t+" WHERE tenant_id = $1 AND starts_with(idempotency_key, $2)", g.tenantID, g.prefix); err != nil {
			return fmt.Errorf("delete the seeded rows of %s: %w", t, err)
		}
	}
	if err := g.settle(ctx, out); err != nil {
		return err
	}
	fmt.Fprintf(out, "  deleted the seeded rows in %s\n", time.Since(t0).Round(time.Second))
	return nil
}

// sizes prints the grown tables' sizes: heap, indexes, live and dead rows.
func (g *growBench) sizes(ctx context.Context, out io.Writer, when string) error {
	rows, err := g.pool.Query(ctx, `SELECT relname, pg_relation_size(relid), pg_indexes_size(relid), n_live_tup, n_dead_tup
		FROM pg_stat_user_tables WHERE relname = ANY($1) ORDER BY relname`, writtenTables)
	if err != nil {
		return fmt.Errorf("table sizes: %w", err)
	}
	defer rows.Close()
	fmt.Fprintf(out, "  tables %s:\n", when)
	for rows.Next() {
		var (
			name               string
			heap, index        int64
			liveRows, deadRows int64
		)
		if err := rows.Scan(&name, &heap, &index, &liveRows, &deadRows); err != nil {
			return err
		}
		fmt.Fprintf(out, "    %-16s heap %9s  indexes %9s  rows %11d live %9d dead\n", name, mib(heap), mib(index), liveRows, deadRows)
	}
	return rows.Err()
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// grownTargets judges the runs after seeding against the runs before.
func grownTargets(results []result, clientCounts []int) []target {
	var out []target
	for _, c := range clientCounts {
		for _, pair := range [][2]string{{scenarioCreate, scenarioCreateGrown}, {scenarioReplay, scenarioReplayGrown}} {
			base, okBase := findResult(results, pair[0], c)
			grown, okGrown := findResult(results, pair[1], c)
			for _, p := range []float64{50, 99} {
				b, g := percentile(base.latencies, p), percentile(grown.latencies, p)
				out = append(out, target{
					name: fmt.Sprintf("%s/%s p%.0f @%d", pair[1], pair[0], p, c), want: 1.2, unit: "x",
					got: ratio(float64(g), float64(b)), detail: fmt.Sprintf("%s vs %s", ms(g), ms(b)),
					skip: !okBase || !okGrown,
				})
			}
		}
	}
	return out
}

// untimed returns a connection of pool without the pool's statement timeout
// (the service's, 30 s), which millions of rows outlast, and the function
// that gives it back with the timeout restored.
func untimed(ctx context.Context, pool *pgxpool.Pool) (*pgxpool.Conn, func(), error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	if _, err := conn.Exec(ctx, "SET statement_timeout = 0"); err != nil {
		conn.Release()
		return nil, nil, err
	}
	return conn, func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "RESET statement_timeout")
		conn.Release()
	}, nil
}
