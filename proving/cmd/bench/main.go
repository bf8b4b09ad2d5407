// Command bench measures POST /v1/orders of a running API against the floor
// it cannot beat: the same SQL, run directly on the same database.
//
// Five scenarios run at each client count (default 1 and 16), interleaved
// so that drift on a shared machine hits them alike:
//
//	sql        the statements of one order creation, batched as the service
//	           sends them (the lookup, then two pipelined batches with
//	           COMMIT in the second: three round trips), fresh key each
//	           time, through pgx
//	sql-naive  the same statements a round trip each (eleven round trips)
//	http       the create's HTTP exchange alone: the same client and
//	           request against a server, in a process of its own, that only
//	           answers with a fixed order (bare.go)
//	create     POST /v1/orders with a fresh Idempotency-Key each time
//	replay     POST /v1/orders repeating keys that were created beforehand
//
// The payment scenarios (pay.go) run when asked for with --scenarios, at
// each simulator latency of --psp-latency: pay (create, then pay, each under
// a fresh key) and pay-only (pay alone, on orders created beforehand).
//
// With --compare, every scenario that goes through the API runs a second
// time against another API on the same database right after the first
// (the order alternates from round to round), reported under its name with
// @ and --compare-label: `make bench-compare REF=...` runs the API of
// another commit there, so that a change is measured side by side with what
// it changes, in one run.
//
// sql-replay, the SQL-equivalent of a replay (the unlocked lookup of a
// finished record), is not run unless asked for with --scenarios.
//
// It prints throughput and latency percentiles, the ratios the service is
// held to and, given the API's pid, its peak resident memory. Next to each
// create/sql ratio it gives the ceiling of any HTTP service on the machine:
// the floor plus the bare exchange. Any failed
// request (non-2xx, or a replay that was not one) makes it exit non-zero.
// `make bench` starts a durable PostgreSQL and the API and runs it; see
// docs/BENCHMARKS.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/postgres"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == bareCommand {
		if err := serveBare(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// run is the whole program: it parses args, prepares, runs every scenario
// and prints the report to stdout.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	cfg, err := parseFlags(args, getenv, stdout)
	if err != nil {
		return err
	}
	// The latency budget's receiver listens before the API is up: its
	// exporter sends to it from the start.
	var br *budgetRun
	var dbTracer pgx.QueryTracer
	if cfg.budget != "" {
		recv, err := startReceiver(cfg.budget)
		if err != nil {
			return err
		}
		defer recv.close()
		br = &budgetRun{recv: recv, floor: newFloorTracer(), apiURL: cfg.api, warmup: cfg.load.warmup}
		dbTracer = br.floor.pgx
	}
	if cfg.wait > 0 {
		if err := waitReady(ctx, cfg.api, cfg.apiPID, cfg.wait); err != nil {
			return err
		}
	}
	// The peak before any load: what the API's start took, the embedded
	// broker's recovery of its stream included.
	atReady := peakRSS(cfg.apiPID)
	maxClients := slices.Max(cfg.clients)
	idle := 2 * maxClients
	if cfg.openLoop() || cfg.keepPace > 0 {
		idle = 1024 // open loop: as many connections as requests at once
	}
	api, err := newAPIClient(cfg.api, cfg.apiKey, idle)
	if err != nil {
		return err
	}
	defer api.close()

	fmt.Fprintf(stdout, "oncepay bench %s\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(stdout, "client: %s %s/%s, %d CPUs, GOMAXPROCS %d\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0))
	fmt.Fprintf(stdout, "api: %s (pid %d), tenant key %s; postgres pid %d\n", cfg.api, cfg.apiPID, cfg.apiKey, cfg.pgPID)
	fmt.Fprintf(stdout, "load: %s per scenario after %s warm-up, %d round(s), clients %v\n", describeLoad(cfg.load), cfg.load.warmup, cfg.rounds, cfg.clients)

	ops := make(map[string]op, 4)
	var direct *sqlCreate
	if cfg.databaseURL != "" {
		// The service's own pool settings (size 20, lock and statement
		// timeouts), so the SQL runs under the same conditions.
		pool, err := postgres.Open(ctx, cfg.databaseURL, postgres.PoolConfig{MaxConns: int32(max(20, maxClients)), Tracer: dbTracer})
		if err != nil {
			return err
		}
		defer pool.Close()
		if br != nil {
			if err := walTiming(ctx, pool, true); err != nil {
				fmt.Fprintf(stdout, "budget: no WAL timing (%v)\n", err)
			} else {
				defer func() { _ = walTiming(context.WithoutCancel(ctx), pool, false) }()
			}
			br.pool = pool
		}
		info, err := serverInfo(ctx, pool)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "database: %s\n", info)
		// Every run starts from a vacuumed database. make bench starts
		// PostgreSQL for the run and stops it afterwards, so autovacuum,
		// which looks at a database once a minute, rarely gets to the
		// dead rows earlier runs left: without this, the dispatcher's
		// claim of each create's event walked the pending index over every
		// event published since the day's first run, and each run was
		// slower than the one before it (docs/BENCHMARKS.md).
		t0 := time.Now()
		dead, err := vacuumWritten(ctx, pool, stdout)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "vacuumed %s: %d dead rows in %s\n", strings.Join(writtenTables, ", "), dead, time.Since(t0).Round(time.Millisecond))
		if direct, err = newSQLCreate(ctx, pool, cfg.apiKey); err != nil {
			return err
		}
		if cfg.floorDatabase != "" && cfg.needs(scenarioSQL, scenarioSQLNaive) {
			t0 := time.Now()
			floor, err := openFloor(ctx, pool, cfg.databaseURL, cfg.floorDatabase, direct.tenantID, postgres.PoolConfig{MaxConns: int32(max(20, maxClients)), Tracer: dbTracer})
			if err != nil {
				return err
			}
			defer func() {
				floor.Close()
				if err := dropDatabase(context.WithoutCancel(ctx), pool, cfg.floorDatabase); err != nil {
					fmt.Fprintf(stdout, "could not drop the floor database %s: %v\n", cfg.floorDatabase, err)
				}
			}()
			direct.floor = floor
			fmt.Fprintf(stdout, "floors write to database %s (created in %s): their events stay out of the API's outbox\n", cfg.floorDatabase, time.Since(t0).Round(time.Millisecond))
		}
		ops[scenarioSQL] = direct.op()
		if br != nil {
			ops[scenarioSQL] = br.floor.wrap(ops[scenarioSQL])
		}
		ops[scenarioSQLNaive] = direct.naiveOp()
	}
	ops[scenarioCreate] = api.createOp()
	ops[scenarioCreateSweeping] = ops[scenarioCreate]
	var bare *bareServer
	if cfg.needs(scenarioHTTP) {
		if bare, err = startBare(ctx, cfg.bareCPUs); err != nil {
			return err
		}
		defer bare.stop()
		bareAPI, err := newAPIClient(bare.url, cfg.apiKey, idle)
		if err != nil {
			return err
		}
		defer bareAPI.close()
		ops[scenarioHTTP] = bareAPI.createOp()
		fmt.Fprintf(stdout, "bare HTTP server: %s (pid %d), for the http scenario; its CPU is reported as the api's\n", bare.url, bare.pid)
	}
	var replayKeys []string
	if cfg.needs(scenarioReplay, scenarioSQLReplay) {
		t0 := time.Now()
		keys, err := api.prepareReplayKeys(ctx, cfg.replayKeys, maxClients)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "prepared %d replay keys in %s\n", len(keys), time.Since(t0).Round(time.Millisecond))
		ops[scenarioReplay] = api.replayOp(keys)
		replayKeys = keys
		if direct != nil {
			ops[scenarioSQLReplay] = direct.lookupOp(keys)
		}
	}

	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			return fmt.Errorf("create CPU profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("start CPU profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}

	probe := cpuProbe{apiPID: cfg.apiPID, pgPID: cfg.pgPID}
	// The http scenario's server is the bare one: its CPU is what the
	// api column shows for it.
	probeOf := func(sc string) cpuProbe {
		if sc == scenarioHTTP && bare != nil {
			return cpuProbe{apiPID: bare.pid, pgPID: cfg.pgPID}
		}
		return probe
	}
	if cfg.openLoop() {
		return runOpenLoops(ctx, cfg, api, probe, stdout)
	}
	var errs errorLog
	var results []result
	var sweep *sweepBench
	if cfg.sweepRecords > 0 {
		sweep = &sweepBench{pool: direct.pool, tenantID: direct.tenantID, records: cfg.sweepRecords, batch: cfg.sweepBatch, duty: cfg.sweepDuty}
		fmt.Fprintf(stdout, "sweep comparison: %d expired records per round, batches of %d, duty cycle %.3g\n", cfg.sweepRecords, cfg.sweepBatch, cfg.sweepDuty)
	}
	for round := 1; round <= cfg.rounds && sweep != nil; round++ {
		// create-sweeping lasts as long as its sweep; create is measured
		// for --duration right before and right after it, so that drift on
		// a shared machine hits both alike.
		i := 0
		for _, clients := range cfg.clients {
			if err := sweep.seed(ctx, stdout); err != nil {
				return err
			}
			var pair [2]result
			for j, sc := range []string{scenarioCreate, scenarioCreateSweeping, scenarioCreate} {
				var r result
				if sc == scenarioCreateSweeping {
					if r, err = sweep.measureSweeping(ctx, clients, cfg.load, ops[sc], &errs, probe, stdout); err != nil {
						return err
					}
				} else {
					r = measure(ctx, sc, clients, cfg.load, ops[sc], &errs, probe)
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
				fmt.Fprintf(stdout, "  round %d %-15s @%-3d %7d requests %4d errors %9.1f req/s  p50 %s  p99 %s  (%s)\n", round, sc, clients,
					r.requests, r.errors, r.throughput(), ms(percentile(r.latencies, 50)), ms(percentile(r.latencies, 99)), r.elapsed.Round(time.Millisecond))
				k := slices.Index(cfg.scenarios, sc)
				if j == 0 || sc == scenarioCreateSweeping {
					pair[k] = r
				} else {
					pair[k].merge(r)
				}
			}
			for _, r := range pair {
				if round == 1 {
					results = append(results, r)
				} else {
					results[i].merge(r)
				}
				i++
			}
		}
	}
	// The other API of --compare, and the simulator of the pay scenarios.
	var (
		other    *apiClient
		otherOps = map[string]op{}
		// extra are the results of a measurement besides the one it
		// returns (the pay scenarios at their further latencies).
		extra []result
	)
	if cfg.compare != "" {
		if cfg.wait > 0 {
			if err := waitReady(ctx, cfg.compare, cfg.comparePID, cfg.wait); err != nil {
				return err
			}
		}
		if other, err = newAPIClient(cfg.compare, cfg.apiKey, idle); err != nil {
			return err
		}
		defer other.close()
		otherOps[scenarioCreate] = other.createOp()
		if replayKeys != nil {
			otherOps[scenarioReplay] = other.replayOp(replayKeys)
		}
		fmt.Fprintf(stdout, "compare: %s (pid %d), reported as scenario@%s\n", cfg.compare, cfg.comparePID, cfg.compareLabel)
	}
	var psp *pspAdmin
	if cfg.needs(scenarioPay, scenarioPayOnly) {
		psp = &pspAdmin{url: cfg.pspURL, key: cfg.pspKey, hc: &http.Client{Timeout: 10 * time.Second}}
		was, err := psp.faults(ctx)
		if err != nil {
			return err
		}
		defer func() {
			if err := psp.setFaults(context.WithoutCancel(ctx), was); err != nil {
				fmt.Fprintf(stdout, "could not restore the simulator's faults: %v\n", err)
			}
		}()
		fmt.Fprintf(stdout, "simulator: %s, latencies %v for the pay scenarios\n", cfg.pspURL, cfg.pspLatencies)
	}
	// payRate is the rate each pay-only measurement made, by its name and
	// client count: the next one of the same kind is given as many orders
	// as that rate needs.
	payRate := map[string]float64{}
	// measureAPI measures scenario sc of the API c under name and then
	// suffix (@label for the other API's), its CPU taken by probe.
	measureAPI := func(c *apiClient, sc, name, suffix string, clients int, probe cpuProbe) (result, error) {
		if sc != scenarioPay && sc != scenarioPayOnly {
			do := ops[sc]
			if c == other {
				do = otherOps[sc]
			}
			return measure(ctx, name+suffix, clients, cfg.load, do, &errs, probe), nil
		}
		var rs []result
		for _, lat := range cfg.pspLatencies {
			if err := psp.setLatency(ctx, lat); err != nil {
				return result{}, err
			}
			n := payName(name, lat) + suffix
			do := c.payOp()
			key := fmt.Sprintf("%s@%d", n, clients)
			if sc == scenarioPayOnly {
				rate := payRate[key]
				if rate == 0 { // a pay alone is faster than a create and a pay
					rate = 2 * payRate[fmt.Sprintf("%s@%d", payName(scenarioPay, lat)+suffix, clients)]
				}
				prepared, err := c.prepareOrders(ctx, payOnlyOrders(cfg.load, rate, cfg.payOrders), max(clients, 8))
				if err != nil {
					return result{}, err
				}
				do = c.payOnlyOp(prepared)
			}
			r := measure(ctx, n, clients, cfg.load, do, &errs, probe)
			payRate[key] = r.throughput()
			rs = append(rs, r)
		}
		// Several latencies are several results: the first is returned, the
		// others are merged in by name by the caller through extra.
		extra = append(extra, rs[1:]...)
		return rs[0], nil
	}
	// rounds measures each of scenarios at each client count, round after
	// round, under the name it is reported with (as[i]; the scenario's own
	// when nil); with --compare each API scenario is measured against the
	// other API too, first in even rounds and second in odd ones.
	rounds := func(scenarios, as []string) error {
		for round := 1; round <= cfg.rounds; round++ {
			for _, clients := range cfg.clients {
				for k, sc := range scenarios {
					name := sc
					if as != nil {
						name = as[k]
					}
					type run struct {
						c      *apiClient
						suffix string
						probe  cpuProbe
					}
					runs := []run{{api, "", probeOf(sc)}}
					if other != nil && slices.Contains(apiScenarios, sc) {
						b := run{other, "@" + cfg.compareLabel, cpuProbe{apiPID: cfg.comparePID, pgPID: cfg.pgPID}}
						if round%2 == 0 {
							runs = []run{b, runs[0]}
						} else {
							runs = append(runs, b)
						}
					}
					for _, ru := range runs {
						extra = extra[:0]
						var r result
						var err error
						if br != nil {
							br.begin(ctx, sc)
						}
						if slices.Contains(apiScenarios, sc) {
							r, err = measureAPI(ru.c, sc, name, ru.suffix, clients, ru.probe)
						} else {
							r = measure(ctx, name, clients, cfg.load, ops[sc], &errs, ru.probe)
						}
						if err != nil {
							return err
						}
						if ctx.Err() != nil {
							return ctx.Err()
						}
						if br != nil {
							br.end(ctx, sc)
						}
						for _, r := range append([]result{r}, extra...) {
							fmt.Fprintf(stdout, "  round %d %-12s @%-3d %7d requests %4d errors %9.1f req/s  p50 %s  p99 %s%s\n", round, r.scenario, clients,
								r.requests, r.errors, r.throughput(), ms(percentile(r.latencies, 50)), ms(percentile(r.latencies, 99)), direct.backlogNote(ctx))
							results = mergeResult(results, r)
						}
					}
				}
			}
		}
		return nil
	}
	var (
		grow   *growBench
		paceTs []target
	)
	switch {
	case sweep != nil:
	case cfg.keepPace > 0:
		pace := &paceBench{pool: direct.pool, tenantID: direct.tenantID, rate: cfg.keepPace, duration: cfg.load.duration}
		var rs []result
		if rs, paceTs, err = pace.run(ctx, api, cfg.api, probe, stdout); err != nil {
			return err
		}
		results = append(results, rs...)
	case cfg.growRecords > 0:
		grow = &growBench{pool: direct.pool, tenantID: direct.tenantID, records: cfg.growRecords}
		fmt.Fprintf(stdout, "grown-data comparison: %d finished idempotency records, %d orders, %d published events\n", cfg.growRecords, cfg.growRecords/5, cfg.growRecords/5)
		if err := grow.sizes(ctx, stdout, "before"); err != nil {
			return err
		}
		if err := rounds(cfg.scenarios, nil); err != nil {
			return err
		}
		err := grow.seed(ctx, stdout)
		defer func() {
			if err := grow.unseed(context.WithoutCancel(ctx), stdout); err != nil {
				fmt.Fprintf(stdout, "  %v (the seeded keys start with %q)\n", err, grow.prefix)
			}
		}()
		if err != nil {
			return err
		}
		if err := grow.sizes(ctx, stdout, "seeded"); err != nil {
			return err
		}
		if err := rounds(cfg.scenarios, []string{scenarioCreateGrown, scenarioReplayGrown}); err != nil {
			return err
		}
		if err := grow.sizes(ctx, stdout, "after the grown runs"); err != nil {
			return err
		}
	default:
		if err := rounds(cfg.scenarios, nil); err != nil {
			return err
		}
	}

	rss := peakRSS(cfg.apiPID)
	rss.atReady = &atReady
	fmt.Fprintln(stdout)
	if err := printResults(stdout, results); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	if other != nil {
		if err := printComparison(stdout, results, cfg.compareLabel); err != nil {
			return err
		}
		fmt.Fprintln(stdout)
	}
	ts := targets(results, cfg.clients, rss)
	switch {
	case sweep != nil:
		ts = sweepTargets(results, cfg.clients)
	case grow != nil:
		ts = grownTargets(results, cfg.clients)
	case paceTs != nil:
		ts = paceTs
	}
	if err := printTargets(stdout, ts); err != nil {
		return err
	}
	if br != nil {
		br.print(stdout, results)
	}
	if cfg.markdown {
		fmt.Fprintln(stdout)
		fmt.Fprint(stdout, markdownResults(results))
	}

	if errs.count > 0 {
		fmt.Fprintf(stdout, "\n%d failed requests, for example:\n", errs.count)
		for _, s := range errs.samples {
			fmt.Fprintln(stdout, "  "+s)
		}
		return fmt.Errorf("%d requests failed", errs.count)
	}
	if cfg.strict {
		var missed []string
		for _, t := range ts {
			if t.verdict() == "MISS" {
				missed = append(missed, t.name)
			}
		}
		if len(missed) > 0 {
			return fmt.Errorf("targets missed: %s", strings.Join(missed, "; "))
		}
	}
	return nil
}

// describeLoad says how long each scenario is measured.
func describeLoad(l load) string {
	if l.requests > 0 {
		return fmt.Sprintf("%d requests", l.requests)
	}
	return l.duration.String()
}

// serverInfo describes the database server and the settings that decide
// what a commit costs.
func serverInfo(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var parts []string
	for _, name := range []string{"server_version", "fsync", "synchronous_commit", "full_page_writes", "wal_sync_method", "shared_buffers"} {
		var v string
		if err := pool.QueryRow(ctx, "SHOW "+name).Scan(&v); err != nil {
			return "", fmt.Errorf("show %s: %w", name, err)
		}
		parts = append(parts, name+"="+v)
	}
	return "PostgreSQL " + strings.Join(parts, " "), nil
}
