// Command outboxbench measures the outbox pipeline in one process, with the
// embedded NATS JetStream server included, on a scratch database it creates
// (and drops) on the PostgreSQL server DATABASE_URL names.
//
// Two phases:
//
//	burn-down  --events outbox rows (default 100,000) are committed up front;
//	           then --dispatchers dispatchers publish them to JetStream,
//	           waiting for every PubAck and marking them published. Reported:
//	           events/s from the dispatchers' start until the last row is
//	           marked, and the process's peak RSS (VmHWM) at that point.
//	latency    paid orders with their payment.succeeded event are committed
//	           at a steady --rate (default 200/s) for --duration (default 30s)
//	           while a dispatcher and the fulfillment consumer run. Reported:
//	           commit-to-consumed latency, from the producer's COMMIT returning
//	           to the fulfillment transaction (inbox row, stock, order status,
//	           receipt) committing, p50/p90/p99/max.
//
// It exits non-zero when an event is lost or a target is missed
// (--min-rate, --max-p99, --max-rss-mib). `make bench-outbox` starts a
// durable PostgreSQL and runs it; see docs/BENCHMARKS.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncepay/oncepay/internal/broker"
	"github.com/oncepay/oncepay/internal/fulfillment"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/postgres"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "outboxbench:", err)
		os.Exit(1)
	}
}

type config struct {
	databaseURL string
	events      int
	dispatchers int
	batch       int
	rate        int
	workers     int
	warmup      time.Duration
	duration    time.Duration
	syncAlways  bool
	minRate     float64
	maxP99      time.Duration
	maxRSSMiB   float64
	keepDB      bool
	logLevel    slog.Level
}

func parse(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	c := config{databaseURL: getenv("DATABASE_URL")}
	fs := flag.NewFlagSet("outboxbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.events, "events", 100_000, "outbox rows to burn down")
	fs.IntVar(&c.dispatchers, "dispatchers", 1, "dispatchers publishing the burn-down concurrently (each with its own claim loop)")
	fs.IntVar(&c.batch, "batch", 500, "rows per claim")
	fs.IntVar(&c.rate, "rate", 200, "events per second in the latency phase")
	fs.IntVar(&c.workers, "workers", 0, "fulfillment workers (0: the consumer's default)")
	fs.DurationVar(&c.duration, "duration", 30*time.Second, "length of the latency phase (0 skips it)")
	fs.DurationVar(&c.warmup, "warmup", 5*time.Second, "load at --rate before the latency phase is measured")
	fs.BoolVar(&c.syncAlways, "sync-always", true, "fsync every JetStream message before its PubAck, as api serve's embedded server, the compose nats service and the documented NATS_URL setup do (--sync-always=false measures the outbox without the disk)")
	fs.Float64Var(&c.minRate, "min-rate", 11000, "fail below this burn-down rate (events/s); 0 disables")
	fs.DurationVar(&c.maxP99, "max-p99", 100*time.Millisecond, "fail above this p99 commit-to-consumed latency; 0 disables")
	fs.Float64Var(&c.maxRSSMiB, "max-rss-mib", 250, "fail above this peak RSS (MiB); 0 disables")
	fs.BoolVar(&c.keepDB, "keep-db", false, "keep the scratch database")
	level := fs.String("log-level", "warn", "log level of the service parts")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.databaseURL == "" {
		return c, errors.New("DATABASE_URL is required (`make bench-outbox` starts a private PostgreSQL and sets it)")
	}
	if c.events < 1 || c.dispatchers < 1 || c.batch < 1 || c.rate < 1 {
		return c, errors.New("--events, --dispatchers, --batch and --rate must be positive")
	}
	if err := c.logLevel.UnmarshalText([]byte(*level)); err != nil {
		return c, fmt.Errorf("--log-level: %w", err)
	}
	return c, nil
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parse(args, getenv, stderr)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))

	dbURL, drop, err := scratchDatabase(ctx, cfg.databaseURL, cfg.keepDB)
	if err != nil {
		return err
	}
	defer drop()
	if err := postgres.Migrate(ctx, dbURL, nil); err != nil {
		return err
	}
	pool, err := postgres.Open(ctx, dbURL, postgres.PoolConfig{MaxConns: 20})
	if err != nil {
		return err
	}
	defer pool.Close()

	natsDir, err := os.MkdirTemp("", "outboxbench-nats-")
	if err != nil {
		return fmt.Errorf("nats store dir: %w", err)
	}
	defer os.RemoveAll(natsDir)
	srv, err := broker.StartEmbedded(natsDir, logger, broker.WithSyncAlways(cfg.syncAlways))
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	nc, js, err := broker.Connect(srv.ClientURL(), "outboxbench", logger)
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := broker.EnsureStreams(ctx, js, broker.StreamsConfig{}); err != nil {
		return err
	}

	tenantID, err := seed(ctx, pool)
	if err != nil {
		return err
	}
	info, err := machine(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "outboxbench: %s\n", info)
	fmt.Fprintf(stdout, "  JetStream: embedded, file storage in %s, sync_always=%t\n\n", os.TempDir(), cfg.syncAlways)

	probe := newCPUProbe(ctx, pool)
	var failures []string
	// The latency phase runs first, on a fresh database: after the
	// burn-down, autovacuum and a checkpoint would run through it.
	if cfg.duration > 0 {
		p99, err := latency(ctx, cfg, pool, js, tenantID, probe, logger, stdout)
		if err != nil {
			return err
		}
		if cfg.maxP99 > 0 && p99 > cfg.maxP99 {
			failures = append(failures, fmt.Sprintf("p99 commit-to-consumed %v is above %v", p99, cfg.maxP99))
		}
	}
	rate, rss, err := burnDown(ctx, cfg, pool, js, tenantID, probe, logger, stdout)
	if err != nil {
		return err
	}
	if cfg.minRate > 0 && rate < cfg.minRate {
		failures = append(failures, fmt.Sprintf("burn-down %.0f events/s is below %.0f", rate, cfg.minRate))
	}
	if cfg.maxRSSMiB > 0 && rss > cfg.maxRSSMiB {
		failures = append(failures, fmt.Sprintf("peak RSS %.1f MiB is above %.0f MiB", rss, cfg.maxRSSMiB))
	}
	if len(failures) > 0 {
		return fmt.Errorf("targets missed: %s", strings.Join(failures, "; "))
	}
	fmt.Fprintln(stdout, "\nall targets met")
	return nil
}

// burnDown commits cfg.events rows, then lets the dispatchers publish them
// and reports events/s, peak RSS and CPU per event.
func burnDown(ctx context.Context, cfg config, pool *pgxpool.Pool, js jetstream.JetStream, tenantID uuid.UUID, probe cpuProbe, logger *slog.Logger, stdout io.Writer) (rate, rssMiB float64, err error) {
	fmt.Fprintf(stdout, "burn-down: committing %d outbox rows...\n", cfg.events)
	// A payload of the size of a payment.succeeded event (~300 bytes).
	_, err = pool.Exec(ctx, `
		INSERT INTO outbox_events (id, tenant_id, event_type, aggregate_type, aggregate_id, idempotency_key, payload, occurred_at)
		SELECT gen_random_uuid(), $1, 'bench.burndown', 'payment', gen_random_uuid(), 'bench-' || g,
		       jsonb_build_object('id', gen_random_uuid(), 'order_id', gen_random_uuid(), 'status', 'succeeded',
		                          'amount', 5800, 'currency', 'EUR', 'payment_method', 'pm_card_ok',
		                          'provider_charge_id', 'ch_' || md5(g::text), 'amount_refunded', 0,
		                          'created_at', now()),
		       now()
		FROM generate_series(1, $2::int) g`, tenantID, cfg.events)
	if err != nil {
		return 0, 0, fmt.Errorf("seed outbox: %w", err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE outbox_events`); err != nil {
		return 0, 0, fmt.Errorf("vacuum outbox: %w", err)
	}
	before, err := streamMessages(ctx, js)
	if err != nil {
		return 0, 0, err
	}
	runtime.GC()
	if err := resetPeakRSS(); err != nil {
		return 0, 0, err
	}

	dctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	cpu0 := probe.sample()
	start := time.Now()
	for range cfg.dispatchers {
		d, err := outbox.NewDispatcher(pool, js, logger, time.Now, outbox.WithBatchSize(cfg.batch))
		if err != nil {
			stop()
			wg.Wait()
			return 0, 0, err
		}
		defer d.Close()
		wg.Go(func() { _ = d.Run(dctx) })
	}
	// Done when no row is left unpublished. The probe walks the pending
	// index (published_at IS NULL AND stuck_at IS NULL) to its first live
	// entry: cheap, where counting the published rows every tick would
	// read the whole table and cost PostgreSQL more CPU than the
	// dispatcher it measures. (A row that became stuck ends the wait
	// too; the stream's count below then fails the run.)
	tick := time.NewTicker(20 * time.Millisecond)
	for pending := true; pending; {
		select {
		case <-ctx.Done():
			stop()
			wg.Wait()
			return 0, 0, ctx.Err()
		case <-tick.C:
		}
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM outbox_events WHERE published_at IS NULL AND stuck_at IS NULL AND event_type = 'bench.burndown')`).Scan(&pending); err != nil {
			stop()
			wg.Wait()
			return 0, 0, fmt.Errorf("look for unpublished rows: %w", err)
		}
	}
	elapsed := time.Since(start)
	cpu := probe.sample().sub(cpu0)
	tick.Stop()
	stop()
	wg.Wait()
	rss, err := peakRSSMiB()
	if err != nil {
		return 0, 0, err
	}
	stored, err := streamMessages(ctx, js)
	if err != nil {
		return 0, 0, err
	}
	if stored-before != uint64(cfg.events) {
		return 0, 0, fmt.Errorf("the burn-down stored %d messages in the stream, want %d", stored-before, cfg.events)
	}
	fmt.Fprintf(stdout, "burn-down: machine during the phase: %s\n", contention())
	rate = float64(cfg.events) / elapsed.Seconds()
	fmt.Fprintf(stdout, "burn-down: %d events in %v with %d dispatcher(s), batch %d: %.0f events/s (PubAck awaited, marked published)\n",
		cfg.events, elapsed.Round(time.Millisecond), cfg.dispatchers, cfg.batch, rate)
	fmt.Fprintf(stdout, "burn-down: the stream stored %d new messages; peak RSS during the burn-down (VmHWM, process incl. embedded NATS) %.1f MiB\n", stored-before, rss)
	fmt.Fprintf(stdout, "burn-down: %s\n", probe.perEvent(cpu, cfg.events))
	return rate, rss, nil
}

// latency commits paid orders at cfg.rate for cfg.duration with a
// dispatcher and the fulfillment consumer running, and reports
// commit-to-consumed percentiles.
func latency(ctx context.Context, cfg config, pool *pgxpool.Pool, js jetstream.JetStream, tenantID uuid.UUID, probe cpuProbe, logger *slog.Logger, stdout io.Writer) (time.Duration, error) {
	var (
		mu         sync.Mutex
		committed  = make(map[string]time.Time)
		consumed   = make(map[string]time.Time)
		duplicates int
	)
	observe := func(id string, o fulfillment.Outcome) {
		at := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if o == fulfillment.Duplicate {
			duplicates++
			return
		}
		if _, seen := consumed[id]; !seen {
			consumed[id] = at
		}
	}
	cons := fulfillment.New(pool, js, orderService(pool, logger), logger, time.Now,
		fulfillment.WithWorkers(cfg.workers), fulfillment.WithCommitObserver(observe))
	if _, err := cons.Declare(ctx); err != nil {
		return 0, err
	}
	events := outbox.NewSignal() // as in api serve: the committer wakes its dispatcher
	d, err := outbox.NewDispatcher(pool, js, logger, time.Now, outbox.WithSignal(events))
	if err != nil {
		return 0, err
	}
	defer d.Close() // runs last: after the workers stopped
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	wg.Go(func() { _ = cons.Run(wctx) })
	wg.Go(func() { _ = d.Run(wctx) })

	total := int(cfg.duration.Seconds() * float64(cfg.rate))
	warm := int(cfg.warmup.Seconds() * float64(cfg.rate))
	interval := time.Second / time.Duration(cfg.rate)
	fmt.Fprintf(stdout, "latency: %d paid orders at %d/s for %v, after %v of warm-up...\n", total, cfg.rate, cfg.duration, cfg.warmup)
	// Each order is committed on its own goroutine at its scheduled time, so
	// a slow commit does not lower the arrival rate (an open-loop load, as
	// independent clients would produce). The warm-up's orders (connections
	// opened, statements prepared, caches filled) are not measured.
	var (
		producers sync.WaitGroup
		prodErr   error
		slots     = make(chan struct{}, 64)
		cpu0      cpuSample
		start     time.Time
	)
	begin := time.Now()
	for i := range warm + total {
		if i == warm {
			cpu0, start = probe.sample(), time.Now()
		}
		if wait := time.Until(begin.Add(time.Duration(i) * interval)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				producers.Wait()
				return 0, ctx.Err()
			case <-t.C:
			}
		}
		slots <- struct{}{}
		producers.Go(func() {
			defer func() { <-slots }()
			id, err := commitPaidOrder(ctx, pool, tenantID, i)
			at := time.Now()
			if err == nil {
				events.Committed(tenantID)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				prodErr = errors.Join(prodErr, err)
				return
			}
			if i >= warm {
				committed[id.String()] = at
			}
		})
	}
	producers.Wait()
	if prodErr != nil {
		return 0, prodErr
	}
	produced := time.Since(start)
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := 0
		for id := range committed {
			if _, ok := consumed[id]; ok {
				n++
			}
		}
		mu.Unlock()
		if n >= total {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("only %d of %d events consumed 30s after the last commit", n, total)
		}
		time.Sleep(10 * time.Millisecond) // polling the consumer's progress
	}
	cpu := probe.sample().sub(cpu0)
	published, err := publishedAt(ctx, pool)
	if err != nil {
		return 0, err
	}
	mu.Lock()
	lat := make([]time.Duration, 0, total)
	toPublished := make([]time.Duration, 0, total)
	for id, c := range committed {
		// A consumer may finish before the producer has noted the commit
		// time (it is taken after COMMIT returns): that is a latency of 0.
		lat = append(lat, max(0, consumed[id].Sub(c)))
		if p, ok := published[id]; ok {
			toPublished = append(toPublished, max(0, p.Sub(c)))
		}
	}
	dups := duplicates
	mu.Unlock()
	fmt.Fprintf(stdout, "latency: produced %d in %v (%.0f/s); consumed %d, %d duplicate deliveries\n",
		total, produced.Round(time.Millisecond), float64(total)/produced.Seconds(), len(lat), dups)
	fmt.Fprintf(stdout, "latency: machine during the phase: %s\n", contention())
	p99 := percentiles(stdout, "commit-to-consumed", lat)
	percentiles(stdout, "commit-to-marked-published (the dispatcher's part, for reference)", toPublished)
	fmt.Fprintf(stdout, "latency: %s (producer, dispatcher and consumer together)\n\n", probe.perEvent(cpu, total))
	return p99, nil
}

// percentiles prints p50/p90/p99/max of d and returns p99.
func percentiles(w io.Writer, what string, d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	p := func(q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
	fmt.Fprintf(w, "latency: %s p50 %v  p90 %v  p99 %v  max %v\n", what, round(p(0.50)), round(p(0.90)), round(p(0.99)), round(d[len(d)-1]))
	return p(0.99)
}

// publishedAt returns when each payment.succeeded event was marked published.
func publishedAt(ctx context.Context, pool *pgxpool.Pool) (map[string]time.Time, error) {
	rows, err := pool.Query(ctx, `SELECT id::text, published_at FROM outbox_events WHERE event_type = $1 AND published_at IS NOT NULL`, fulfillment.EventPaymentSucceeded)
	if err != nil {
		return nil, fmt.Errorf("load published_at: %w", err)
	}
	out := make(map[string]time.Time)
	for rows.Next() {
		var (
			id string
			at time.Time
		)
		if err := rows.Scan(&id, &at); err != nil {
			return nil, err
		}
		out[id] = at
	}
	return out, rows.Err()
}

func round(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
