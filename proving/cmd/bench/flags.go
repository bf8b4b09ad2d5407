// The bench's scenarios and flags.

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oncepay/oncepay/internal/retention"
)

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
	// budget is where the trace receiver of the latency budget listens
	// (budget.go); set, it replaces the scenarios.
	budget   string
	bareCPUs string // taskset's CPU list for the http scenario's server
	markdown bool
	strict   bool
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
	fs.StringVar(&c.budget, "budget", "", "listen on this address for the API's traces (OTLP over HTTP; make bench BENCH_BUDGET=1 points the API at it) and print the latency budget of a create at 1 client next to the sql floor's; runs sql, http and create at 1 client")
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
	switch {
	case c.budget != "" && c.databaseURL == "":
		return config{}, errors.New("--budget runs the sql floor: it needs --database-url or DATABASE_URL")
	case c.budget != "" && (c.sweepRecords > 0 || c.growRecords > 0 || c.keepPace > 0 || c.openLoop() || c.compare != ""):
		return config{}, errors.New("--budget does not combine with --sweep-records, --grow-records, --keep-pace, --overload, --soak, --attack or --compare")
	case c.budget != "":
		c.scenarios = []string{scenarioSQL, scenarioHTTP, scenarioCreate}
		c.clients = []int{1}
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
