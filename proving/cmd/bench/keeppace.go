package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/retention"
)

// The keep-pace comparison (--keep-pace R): does the retention sweeper, at
// the service's defaults, keep up with a sustained create rate? In steady
// state as many records expire as are created. It offers R creates per
// second, open loop, for --duration on its own (create-paced); then seeds
// R x --duration finished idempotency records that expire at R per second
// over the next --duration, and offers the same load again while the
// service's sweeper (retention.Sweeper.Run, SWEEP_INTERVAL's default of a
// minute, SweepBatch and SweepDutyCycle's) runs (create-keeping-pace).
// What it creates, it forgets at the same rate. Targets: when the load
// ends, at most what one sweep interval lets expire (plus a batch) is
// expired and not deleted (the sweeper is at most one round behind); after
// the sweeper's next round (run at once), the idempotency table is no
// larger than it began, plus one batch; create-keeping-pace p99 at most
// 1.25x create-paced's, the bound of the sweep comparison.

// Scenario names of the keep-pace comparison.
const (
	scenarioCreatePaced       = "create-paced"
	scenarioCreateKeepingPace = "create-keeping-pace"
)

// sweepInterval is the service's SWEEP_INTERVAL default, at which the
// comparison runs the sweeper.
const sweepInterval = time.Minute

// paceBench seeds the records that expire during the second run.
type paceBench struct {
	pool     *pgxpool.Pool
	tenantID uuid.UUID
	rate     float64
	duration time.Duration
}

// seed inserts rate x duration finished records expiring at rate per
// second from start on, then vacuums and checkpoints.
func (p *paceBench) seed(ctx context.Context, out io.Writer, start time.Time) (int, error) {
	n := int(p.rate * p.duration.Seconds())
	prefix := fmt.Sprintf("pace-%d-", time.Now().UnixNano())
	step := time.Duration(float64(time.Second) / p.rate)
	const chunk = 100_000
	for from := 0; from < n; from += chunk {
		to := min(from+chunk, n)
		if _, err := p.pool.Exec(ctx, `INSERT INTO api_idempotency (tenant_id, operation, idempotency_key, request_hash, state, recovery_point,
			locked_until, request_id, status_code, response_headers, response_body, resource_type, resource_id,
			created_at, updated_at, expires_at)
			SELECT $1, 'orders.create', $2 || md5(g::text), sha256(g::text::bytea), 'completed', 'finished', NULL,
			md5(g::text), 201, '{"Content-Type": "application/json"}', convert_to(repeat('x', 320), 'UTF8'),
			'order', gen_random_uuid(), $3::timestamptz - interval '7 days', $3::timestamptz - interval '7 days',
			$3::timestamptz + (g - 1) * $4::interval
			FROM generate_series($5::int, $6::int) g`, p.tenantID, prefix, start, step, from+1, to); err != nil {
			return 0, fmt.Errorf("seed expiring records: %w", err)
		}
	}
	if _, err := p.pool.Exec(ctx, "VACUUM (ANALYZE) api_idempotency"); err != nil {
		return 0, fmt.Errorf("vacuum: %w", err)
	}
	if _, err := p.pool.Exec(ctx, "CHECKPOINT"); err != nil {
		fmt.Fprintf(out, "  (no CHECKPOINT: %v)\n", err)
	}
	return n, nil
}

// table reads api_idempotency's row count, the expired finished rows among
// them, and its heap and index sizes.
func (p *paceBench) table(ctx context.Context) (rows, expired, heap, index int64, err error) {
	err = p.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state <> 'pending' AND expires_at <= now()),
		pg_relation_size('api_idempotency'), pg_indexes_size('api_idempotency') FROM api_idempotency`).Scan(&rows, &expired, &heap, &index)
	return rows, expired, heap, index, err
}

// run is the comparison: the two open-loop runs, the seeding between them,
// the table before and after. It returns the two runs as results (clients
// 0: open loop) and the targets.
func (p *paceBench) run(ctx context.Context, api *apiClient, base string, probe cpuProbe, out io.Writer) ([]result, []target, error) {
	asResult := func(name string, r openLoopResult, cpu cpuSample) result {
		res := result{scenario: name, clients: 0, requests: len(r.latencies(created)), elapsed: r.elapsed, latencies: r.latencies(created), cpu: cpu}
		res.errors = len(r.attempts) - res.requests
		return res
	}
	fmt.Fprintf(out, "keep-pace comparison: %.0f creates/s for %s, alone and while as many records expire per second\n", p.rate, p.duration)
	before := probe.sample()
	paced := runOpenLoop(ctx, api, base, openLoopConfig{name: scenarioCreatePaced, rate: p.rate, duration: p.duration, window: time.Second})
	pacedCPU := probe.sample().sub(before)
	if ctx.Err() != nil {
		return nil, nil, ctx.Err()
	}
	start := time.Now().Add(5 * time.Second).UTC()
	n, err := p.seed(ctx, out, start)
	if err != nil {
		return nil, nil, err
	}
	rows0, _, heap0, index0, err := p.table(ctx)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(out, "  seeded %d records expiring from %s at %.0f/s; api_idempotency: %d rows, heap %s, indexes %s\n",
		n, start.Format(time.TimeOnly), p.rate, rows0, mib(heap0), mib(index0))
	for time.Now().Before(start) {
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(time.Until(start)):
		}
	}
	sweepCtx, stopSweeping := context.WithCancel(ctx)
	swept := make(chan error, 1)
	go func() { swept <- serviceSweeper(p.pool).Run(sweepCtx, sweepInterval) }()
	before = probe.sample()
	keeping := runOpenLoop(ctx, api, base, openLoopConfig{name: scenarioCreateKeepingPace, rate: p.rate, duration: p.duration, window: time.Second})
	keepingCPU := probe.sample().sub(before)
	stopSweeping()
	if err := <-swept; err != nil {
		return nil, nil, fmt.Errorf("sweeper: %w", err)
	}
	if ctx.Err() != nil {
		return nil, nil, ctx.Err()
	}
	rows1, expired1, heap1, index1, err := p.table(ctx)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(out, "  at the end of the load: api_idempotency %d rows (%+d), %d of them expired and not yet deleted; heap %s, indexes %s\n",
		rows1, rows1-rows0, expired1, mib(heap1), mib(index1))
	// The sweeper's next round, run at once rather than up to 1.5 intervals
	// later: every seeded record has expired by now.
	if _, err := serviceSweeper(p.pool).SweepOnce(ctx); err != nil {
		return nil, nil, fmt.Errorf("the sweeper's next round: %w", err)
	}
	rows2, expired2, heap2, index2, err := p.table(ctx)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(out, "  after the sweeper's next round: api_idempotency %d rows (%+d), %d expired; heap %s, indexes %s\n",
		rows2, rows2-rows0, expired2, mib(heap2), mib(index2))
	base0, keep := asResult(scenarioCreatePaced, paced, pacedCPU), asResult(scenarioCreateKeepingPace, keeping, keepingCPU)
	ts := paceTargets(base0, keep, p.rate, expired1, rows0, rows2)
	return []result{base0, keep}, ts, nil
}

// paceTargets judges the keep-pace comparison: keep against base at rate,
// with expired rows left when the load ended, and the table's rows before
// (rows0) and after the sweeper's next round (rows2).
func paceTargets(base, keep result, rate float64, expired, rows0, rows2 int64) []target {
	slack := int64(rate*1.5*sweepInterval.Seconds()) + retention.DefaultBatchSize
	bp99, kp99 := percentile(base.latencies, 99), percentile(keep.latencies, 99)
	return []target{
		{name: "expired, not deleted, at the load's end (rows)", want: float64(slack),
			got: float64(expired), detail: fmt.Sprintf("allowed: what one sweep interval (up to 1.5 x %s) lets expire, plus a batch", sweepInterval)},
		{name: "api_idempotency growth after the next round (rows)", want: float64(retention.DefaultBatchSize),
			got: float64(rows2 - rows0), detail: fmt.Sprintf("%d to %d rows", rows0, rows2)},
		{name: "create-keeping-pace/create-paced p99", want: 1.25, unit: "x",
			got: ratio(float64(kp99), float64(bp99)), detail: fmt.Sprintf("%s vs %s", ms(kp99), ms(bp99))},
		{name: "create-keeping-pace failed requests", want: 0, got: float64(keep.errors)},
	}
}
