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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/retention"
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

// Scenario names.
const (
	scenarioSQL       = "sql"
	scenarioSQLNaive  = "sql-naive"
	scenarioHTTP      = "http"
	scenarioCreate    = "create"
	scenarioSQLReplay = "sql-replay"
	scenarioReplay    = "replay"
)

// apiScenarios are the scenarios that go through the API: the ones
// --compare runs against the other API too.
var apiScenarios = []string{scenarioCreate, scenarioReplay, scenarioPay, scenarioPayOnly}

// scenarioOrder is the order of the scenarios within a round.
func scenarioOrder() []string {
	return []string{scenarioSQL, scenarioSQLNaive, scenarioHTTP, scenarioCreate, scenarioSQLReplay, scenarioReplay, scenarioPay, scenarioPayOnly}
}

// config is the parsed command line.
type config struct {
	api         string
	apiPID      int
	pgPID       int
	apiKey      string
	databaseURL string
	// floorDatabase is the database the sql floors write to, created on
	// the API's server for the run (floor.go); "" writes them to the
	// API's own database.
	floorDatabase string
	load          load
	rounds        int
	clients       []int
	scenarios     []string
	replayKeys    int
	wait          time.Duration
	cpuProfile    string
	bareCPUs      string // taskset's CPU list for the http scenario's server
	markdown      bool
	strict        bool
	// sweepRecords > 0 runs the sweep comparison instead of the scenarios.
	sweepRecords int
	sweepBatch   int
	sweepDuty    float64
	// growRecords > 0 runs the grown-data comparison instead (grown.go).
	growRecords int
	// keepPace > 0 runs the keep-pace comparison instead (keeppace.go).
	keepPace float64
	// overload > 0 offers that multiple of the measured create throughput,
	// open loop, for overloadFor; soak > 0 offers soakFraction of it for
	// soak; attack > 0 offers soakFraction of it for attack alone and as
	// long again beside slow clients using attackKey's tenant. Any of them
	// replaces the scenarios (overload.go, attack.go).
	overload     float64
	overloadFor  time.Duration
	soak         time.Duration
	soakFraction float64
	attack       time.Duration
	attackKey    string
	// attackHeaderless is how many connections without complete headers
	// the attack opens; past the API's connection limit when negative (the
	// limit plus its absolute value).
	attackHeaderless int
	verifyKeys       int
	// pspURL and pspKey reach the simulator's admin API, which the
	// payment scenarios set pspLatencies with.
	pspURL, pspKey string
	pspLatencies   []time.Duration
	payOrders      int
	// compare is the other API of --compare ("" for none).
	compare      string
	comparePID   int
	compareLabel string
}

// parseFlags reads the command line; defaults come from getenv where the
// environment has a say.
func parseFlags(args []string, getenv func(string) string, out io.Writer) (config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(out)
	var c config
	var clients, scenarios string
	fs.StringVar(&c.api, "api", "http://127.0.0.1:18181", "base URL of the running API")
	fs.IntVar(&c.apiPID, "api-pid", 0, "pid of the API process, to report its peak RSS (VmHWM) and CPU time; 0 skips them")
	fs.IntVar(&c.pgPID, "pg-pid", 0, "pid of the PostgreSQL postmaster, to report the server's CPU time; 0 skips it")
	fs.StringVar(&c.apiKey, "api-key", "sk_test_acme", "API key of the tenant to create orders for (the SQL scenario uses the same tenant)")
	fs.StringVar(&c.databaseURL, "database-url", getenv("DATABASE_URL"), "PostgreSQL URL of the API's database, for the SQL-equivalent scenario")
	fs.StringVar(&c.floorDatabase, "floor-database", defaultFloorDatabase, "database the sql and sql-naive floors write to, created (dropped first if it exists) on the API's server with the service's schema and the tenant's catalog, and dropped at the end, so that their rows and events stay out of the API's outbox and broker; \"\" writes them to the API's database")
	fs.DurationVar(&c.load.duration, "duration", 10*time.Second, "measured time per scenario and round")
	fs.IntVar(&c.load.requests, "requests", 0, "measured requests per scenario and round, instead of --duration")
	fs.DurationVar(&c.load.warmup, "warmup", time.Second, "unmeasured warm-up before each scenario")
	fs.IntVar(&c.rounds, "rounds", 1, "how many times to run the whole interleaved sequence; results are merged")
	fs.StringVar(&clients, "clients", "1,16", "comma-separated concurrent client counts")
	fs.StringVar(&scenarios, "scenarios", "sql,sql-naive,http,create,replay", "comma-separated scenarios to run (sql, sql-naive, http, create, sql-replay, replay, pay, pay-only)")
	var latencies string
	fs.StringVar(&c.pspURL, "psp-url", getenv("PSP_URL"), "the payment simulator's URL, whose latency the pay scenarios set")
	fs.StringVar(&c.pspKey, "psp-api-key", getenv("PSP_API_KEY"), "the payment simulator's API key")
	fs.StringVar(&latencies, "psp-latency", "0s,150ms", "comma-separated simulator latencies the pay scenarios run at (a charge's delay at the provider)")
	fs.IntVar(&c.payOrders, "pay-orders", 2000, "orders created before the first pay-only phase; later ones get as many as the rate measured before needs")
	fs.StringVar(&c.compare, "compare", "", "base URL of another API on the same database: every API scenario runs against it too, right after this one")
	fs.IntVar(&c.comparePID, "compare-pid", 0, "pid of the --compare API, for its CPU time and peak RSS")
	fs.StringVar(&c.compareLabel, "compare-label", "before", "the name the --compare API's results are reported under (scenario@label)")
	fs.StringVar(&c.bareCPUs, "bare-cpus", "", "CPUs to pin the http scenario's bare server to, as taskset takes them (make bench passes BENCH_SERVICE_CPUS: where the API runs)")
	fs.IntVar(&c.replayKeys, "replay-keys", 1000, "orders created before measuring, whose keys the replay scenario repeats")
	fs.DurationVar(&c.wait, "wait", 0, "first wait up to this long for the API's /readyz (0: do not wait)")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of this benchmark process (client side) to the file")
	fs.BoolVar(&c.markdown, "markdown", false, "also print the results as a Markdown table")
	fs.BoolVar(&c.strict, "strict", false, "exit non-zero when a target is missed, not only on failed requests")
	fs.IntVar(&c.sweepRecords, "sweep-records", 0, "instead of the scenarios: seed this many expired records per round and compare create while the sweeper deletes them all with create alone (e.g. 1000000)")
	fs.IntVar(&c.sweepBatch, "sweep-batch", retention.DefaultBatchSize, "rows per delete statement of the sweep comparison (the service's SweepBatch)")
	fs.Float64Var(&c.sweepDuty, "sweep-duty", retention.DefaultDutyCycle, "share of the time the sweep comparison's sweeper spends deleting (the service's SweepDutyCycle; 1: no pauses)")
	fs.IntVar(&c.growRecords, "grow-records", 0, "instead of the scenarios: measure create and replay, seed this many finished idempotency records and a fifth as many orders and published events, measure again, and compare (e.g. 10000000)")
	fs.Float64Var(&c.keepPace, "keep-pace", 0, "instead of the scenarios: offer this many creates per second for --duration, alone and then while as many records expire per second and the service's sweeper runs, and compare (e.g. 200)")
	fs.Float64Var(&c.overload, "overload", 0, "instead of the scenarios: measure create throughput closed loop at the largest --clients, then offer this multiple of it open loop for --overload-duration (e.g. 5)")
	fs.DurationVar(&c.overloadFor, "overload-duration", time.Minute, "how long --overload offers its load")
	fs.DurationVar(&c.soak, "soak", 0, "instead of the scenarios (after --overload if given): offer --soak-fraction of the measured create throughput open loop for this long (e.g. 30m)")
	fs.Float64Var(&c.soakFraction, "soak-fraction", 0.5, "share of the measured create throughput a --soak offers")
	fs.DurationVar(&c.attack, "attack", 0, "instead of the scenarios (after --overload, before --soak): offer --soak-fraction of the measured create throughput open loop for this long, then as long again beside slow clients: slow bodies, and connections without complete headers (--attack-headerless; loopback only)")
	fs.StringVar(&c.attackKey, "attack-key", "sk_test_globex", "API key of the tenant the --attack's slow bodies to /v1 use (another tenant than --api-key's)")
	fs.IntVar(&c.attackHeaderless, "attack-headerless", 400, "connections without complete headers the --attack opens (the probe's 400); negative: that many more than the API's connection limit (e.g. -400), the connection flood past the limit")
	fs.IntVar(&c.verifyKeys, "verify-keys", 1000, "after --overload, repeat up to this many created and this many shed keys to check exactly once")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	var err error
	if c.clients, err = parseCounts(clients); err != nil {
		return config{}, fmt.Errorf("--clients: %w", err)
	}
	for s := range strings.SplitSeq(scenarios, ",") {
		s = strings.TrimSpace(s)
		switch s {
		case scenarioSQL, scenarioSQLNaive, scenarioHTTP, scenarioCreate, scenarioSQLReplay, scenarioReplay, scenarioPay, scenarioPayOnly:
			if !slices.Contains(c.scenarios, s) {
				c.scenarios = append(c.scenarios, s)
			}
		default:
			return config{}, fmt.Errorf("--scenarios: unknown scenario %q", s)
		}
	}
	// Run in a fixed order whatever the flag's order.
	slices.SortFunc(c.scenarios, func(a, b string) int {
		return slices.Index(scenarioOrder(), a) - slices.Index(scenarioOrder(), b)
	})
	for f := range strings.SplitSeq(latencies, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d < 0 {
			return config{}, fmt.Errorf("--psp-latency: %q is not a duration of 0 or more", f)
		}
		if !slices.Contains(c.pspLatencies, d) {
			c.pspLatencies = append(c.pspLatencies, d)
		}
	}
	switch {
	case c.needs(scenarioPay, scenarioPayOnly) && (c.pspURL == "" || c.pspKey == ""):
		return config{}, errors.New("the pay scenarios need the simulator: --psp-url and --psp-api-key, or PSP_URL and PSP_API_KEY")
	case c.payOrders < 1:
		return config{}, errors.New("--pay-orders must be at least 1")
	case c.compare != "" && c.compareLabel == "":
		return config{}, errors.New("--compare-label must not be empty")
	}
	switch {
	case c.load.requests < 0, c.load.requests == 0 && c.load.duration <= 0:
		return config{}, errors.New("want a positive --duration or --requests")
	case c.rounds < 1:
		return config{}, errors.New("--rounds must be at least 1")
	case c.replayKeys < 1 && c.needs(scenarioReplay, scenarioSQLReplay):
		return config{}, errors.New("--replay-keys must be at least 1")
	case c.databaseURL == "" && c.needs(scenarioSQL, scenarioSQLNaive, scenarioSQLReplay):
		return config{}, errors.New("the sql scenarios need --database-url or DATABASE_URL")
	case c.sweepRecords < 0, c.sweepRecords > 0 && c.sweepRecords < 10:
		return config{}, errors.New("--sweep-records must be 0 or at least 10")
	case c.sweepRecords > 0 && c.databaseURL == "":
		return config{}, errors.New("--sweep-records needs --database-url or DATABASE_URL")
	case c.sweepRecords > 0 && c.load.requests > 0:
		return config{}, errors.New("--sweep-records measures for as long as the sweep takes: drop --requests")
	case c.sweepBatch < 1:
		return config{}, errors.New("--sweep-batch must be at least 1")
	case c.sweepDuty <= 0 || c.sweepDuty > 1:
		return config{}, errors.New("--sweep-duty must be in (0, 1]")
	}
	switch {
	case c.overload < 0, c.overload > 0 && c.overload < 1:
		return config{}, errors.New("--overload must be 0 or a multiple of at least 1")
	case c.soak < 0:
		return config{}, errors.New("--soak must not be negative")
	case c.attack < 0:
		return config{}, errors.New("--attack must not be negative")
	case c.soakFraction <= 0 || c.soakFraction > 1:
		return config{}, errors.New("--soak-fraction must be in (0, 1]")
	case c.openLoop() && c.sweepRecords > 0:
		return config{}, errors.New("--overload, --soak and --attack do not combine with --sweep-records")
	case c.growRecords < 0, c.growRecords > 0 && c.growRecords < 10:
		return config{}, errors.New("--grow-records must be 0 or at least 10")
	case c.growRecords > 0 && c.databaseURL == "":
		return config{}, errors.New("--grow-records needs --database-url or DATABASE_URL")
	case c.keepPace < 0:
		return config{}, errors.New("--keep-pace must not be negative")
	case c.keepPace > 0 && (c.databaseURL == "" || c.load.requests > 0):
		return config{}, errors.New("--keep-pace needs --database-url or DATABASE_URL, and measures for --duration (not --requests)")
	case c.keepPace > 0 && (c.sweepRecords > 0 || c.growRecords > 0 || c.openLoop()):
		return config{}, errors.New("--keep-pace does not combine with --sweep-records, --grow-records, --overload, --soak or --attack")
	case c.growRecords > 0 && (c.sweepRecords > 0 || c.openLoop()):
		return config{}, errors.New("--grow-records does not combine with --sweep-records, --overload, --soak or --attack")
	case c.openLoop() && c.load.requests > 0:
		return config{}, errors.New("--overload, --soak and --attack measure capacity for --duration: drop --requests")
	}
	if c.sweepRecords > 0 {
		c.scenarios = []string{scenarioCreate, scenarioCreateSweeping}
	}
	if c.openLoop() {
		c.scenarios = []string{scenarioCreate}
	}
	if c.growRecords > 0 {
		c.scenarios = []string{scenarioCreate, scenarioReplay}
	}
	if c.keepPace > 0 {
		c.scenarios = nil
	}
	return c, nil
}

// openLoop reports whether the open-loop phases replace the scenarios.
func (c config) openLoop() bool { return c.overload > 0 || c.soak > 0 || c.attack > 0 }

// needs reports whether any of scenarios is to run.
func (c config) needs(scenarios ...string) bool {
	return slices.ContainsFunc(scenarios, func(s string) bool { return slices.Contains(c.scenarios, s) })
}

// parseCounts parses a comma-separated list of positive integers.
func parseCounts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// run is the whole program: it parses args, prepares, runs every scenario
// and prints the report to stdout.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	cfg, err := parseFlags(args, getenv, stdout)
	if err != nil {
		return err
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
		pool, err := postgres.Open(ctx, cfg.databaseURL, postgres.PoolConfig{MaxConns: int32(max(20, maxClients))})
		if err != nil {
			return err
		}
		defer pool.Close()
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
			floor, err := openFloor(ctx, pool, cfg.databaseURL, cfg.floorDatabase, direct.tenantID, int32(max(20, maxClients)))
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

// rss is the peak resident set size of the API process.
type rss struct {
	kib   int64
	known bool
	// why says why it is not known.
	why string
	// atReady is the peak before the first scenario, once the API
	// answered ready (with --wait): its start, the embedded broker's
	// recovery of the stream included.
	atReady *rss
}

// peakRSS reads VmHWM, the peak resident set size, of process pid.
func peakRSS(pid int) rss {
	if pid <= 0 {
		return rss{why: "no --api-pid"}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return rss{why: err.Error()}
	}
	kib, err := statusKiB(string(b), "VmHWM")
	if err != nil {
		return rss{why: err.Error()}
	}
	return rss{kib: kib, known: true}
}

// statusKiB returns the value of a "Name:   123 kB" line of /proc/PID/status.
func statusKiB(status, field string) (int64, error) {
	for line := range strings.SplitSeq(status, "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok || name != field {
			continue
		}
		num, unit, _ := strings.Cut(strings.TrimSpace(value), " ")
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || unit != "kB" {
			return 0, fmt.Errorf("%s: cannot parse %q", field, value)
		}
		return n, nil
	}
	return 0, fmt.Errorf("%s not found", field)
}

// findResult returns the result of scenario sc at clients.
func findResult(results []result, sc string, clients int) (result, bool) {
	i := slices.IndexFunc(results, func(r result) bool { return r.scenario == sc && r.clients == clients })
	if i < 0 {
		return result{}, false
	}
	return results[i], true
}

// targets judges the results against the service's goals, per client count:
// create reaches 0.9x the SQL-equivalent throughput (the same statements
// with the same batching) at 1 client and 0.8x with more (the detail says
// what the floor plus a bare HTTP exchange would reach), and 1.0x the
// naive sequence (a round trip per statement) at 1 client; replay reaches
// 3x create throughput; replay's p99 is at most create's p50; at 16
// clients the API spends at most 400 µs of CPU per create and 120 µs per
// replay; and the API's peak RSS stays within 100 MiB.
func targets(results []result, clientCounts []int, mem rss) []target {
	find := func(sc string, clients int) (result, bool) { return findResult(results, sc, clients) }
	var out []target
	for _, c := range clientCounts {
		sql, okSQL := find(scenarioSQL, c)
		create, okCreate := find(scenarioCreate, c)
		want := 0.8
		if c == 1 {
			want = 0.9
		}
		detail := fmt.Sprintf("%.1f vs %.1f req/s", create.throughput(), sql.throughput())
		if bare, ok := find(scenarioHTTP, c); ok && okSQL {
			detail += fmt.Sprintf("; ceiling of any HTTP service here: %.2fx (sql plus a bare exchange, %.1f req/s)",
				ceiling(sql.throughput(), bare.throughput()), bare.throughput())
		}
		out = append(out, target{
			name: fmt.Sprintf("create/sql throughput @%d", c), want: want, atLeast: true, unit: "x",
			got:    ratio(create.throughput(), sql.throughput()),
			detail: detail,
			skip:   !okSQL || !okCreate,
		})
	}
	if naive, ok := find(scenarioSQLNaive, 1); ok {
		create, okCreate := find(scenarioCreate, 1)
		out = append(out, target{
			name: "create/sql-naive throughput @1", want: 1, atLeast: true, unit: "x",
			got:    ratio(create.throughput(), naive.throughput()),
			detail: fmt.Sprintf("%.1f vs %.1f req/s", create.throughput(), naive.throughput()),
			skip:   !okCreate,
		})
	}
	for _, t := range []struct {
		sc   string
		want float64
	}{{scenarioCreate, 400}, {scenarioReplay, 120}} {
		r, ok := find(t.sc, 16)
		per := float64(-1)
		if ok && r.cpu.api >= 0 && r.requests > 0 {
			per = float64(r.cpu.api) / float64(time.Microsecond) / float64(r.requests)
		}
		out = append(out, target{
			name: fmt.Sprintf("API CPU per %s @16", t.sc), want: t.want, unit: " µs",
			got: per, detail: cpuPerRequest(r.cpu.api, r.requests), skip: !ok || per < 0,
		})
	}
	for _, c := range clientCounts {
		create, okCreate := find(scenarioCreate, c)
		replay, okReplay := find(scenarioReplay, c)
		out = append(out, target{
			name: fmt.Sprintf("replay/create throughput @%d", c), want: 3, atLeast: true, unit: "x",
			got:    ratio(replay.throughput(), create.throughput()),
			detail: fmt.Sprintf("%.1f vs %.1f req/s", replay.throughput(), create.throughput()),
			skip:   !okCreate || !okReplay,
		})
	}
	for _, c := range clientCounts {
		create, okCreate := find(scenarioCreate, c)
		replay, okReplay := find(scenarioReplay, c)
		rp99, cp50 := percentile(replay.latencies, 99), percentile(create.latencies, 50)
		out = append(out, target{
			name: fmt.Sprintf("replay p99 / create p50 @%d", c), want: 1, unit: "x",
			got:    ratio(float64(rp99), float64(cp50)),
			detail: fmt.Sprintf("%s vs %s", ms(rp99), ms(cp50)),
			skip:   !okCreate || !okReplay,
		})
	}
	detail := mem.why
	if mem.known {
		detail = fmt.Sprintf("%d kB", mem.kib)
		if r := mem.atReady; r != nil && r.known {
			detail += fmt.Sprintf("; %d kB before the load", r.kib)
		}
	}
	out = append(out, target{
		name: "API peak RSS (VmHWM)", got: float64(mem.kib) / 1024, want: 100, unit: " MiB",
		detail: detail, skip: !mem.known,
	})
	return out
}
