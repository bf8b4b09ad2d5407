// Command chaos runs the seeded chaos test of oncepay against the real stack
// and checks that nothing was charged twice (package proving/chaos does
// the work; docs/RELIABILITY.md explains it).
//
//	chaos [--intents 10000] [--seed 1] [--concurrency 32] [--outbox auto|on|off] [--race] [--db-faults=false] [--net-faults=false] [--cluster]
//
// By default it starts a private PostgreSQL cluster of its own (initdb in a
// temporary folder, a free 127.0.0.1 port), because it kills and stops that
// database on schedule (postgres_killed, postgres_outage); the cluster is
// removed afterwards unless the run failed or --keep-db is given. With
// --db-faults=false it runs on DATABASE_URL instead (a server where it may
// create databases), creates a fresh database there and drops it afterwards
// on the same terms, and takes no fault to the database server. The
// binaries, every process's log, the schedule (plan.json) and the recorded
// history (history.json) stay in the work folder. With --cluster it runs
// against the scaled-out topology instead: a Citus cluster of its own (a
// coordinator and two workers) and three nats-servers as a JetStream
// cluster, with the cluster's faults and without the whole-database and
// network faults. It exits non-zero when an
// invariant was violated or the run could not be carried out.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/proving/chaos"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
}

// errViolations marks a run that completed and found broken invariants.
var errViolations = errors.New("invariants violated")

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var (
		intents     = fs.Int("intents", 10000, "order+pay intents to drive")
		seed        = fs.Uint64("seed", 1, "seed of the schedule; the same seed replays the same intents and faults")
		concurrency = fs.Int("concurrency", 32, "concurrent clients")
		outbox      = fs.String("outbox", chaos.OutboxAuto, "outbox faults and invariants: auto (when the API has `api outbox` commands), on or off")
		race        = fs.Bool("race", false, "build the processes with the race detector (slower; a data race is a violation)")
		proxyRate   = fs.Float64("proxy-rate", 0.1, "share of calls whose first attempt the proxy drops or resets")
		crashEvery  = fs.Int("crash-every", 400, "intents per process crash (an API SIGKILLed); 0 turns crashes off")
		lease       = fs.Duration("lease", 6*time.Second, "IDEMPOTENCY_LEASE of the APIs (the service's default is 30s)")
		attempts    = fs.Int("client-attempts", 10, "HTTP attempts per call of the Go client (its default is 5)")
		workDir     = fs.String("work-dir", "", "folder for binaries, logs, plan.json and history.json (default .data/chaos/seed-N-TIME)")
		maxDuration = fs.Duration("max-duration", 40*time.Minute, "bound of the whole run")
		keepDB      = fs.Bool("keep-db", false, "keep the run's database (or its private cluster) also when the run passed")
		dbFaults    = fs.Bool("db-faults", true, "start a private PostgreSQL cluster and kill and stop it on schedule; false: run on DATABASE_URL, no database faults")
		netFaults   = fs.Bool("net-faults", true, "put a fault proxy (toxiproxy) between the APIs and PostgreSQL, NATS and the provider, and break those links on schedule: latency, connections cut, a peer that never answers, a narrow link")
		dbURL       = fs.String("database-url", getenv("DATABASE_URL"), "PostgreSQL server to create the run's database on, with --db-faults=false [DATABASE_URL]")
		jsonOut     = fs.String("json", "", "also write the report as JSON to this file")
		cluster     = fs.Bool("cluster", false, "run against the scaled-out topology: a Citus cluster of the run's own (coordinator and 2 workers) and 3 nats-servers as a JetStream cluster (R3 stream); "+
			"adds a worker's connections terminated and broker kills of one server (the stream's leader among them); no database or network faults")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cluster {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if set["db-faults"] && *dbFaults || set["net-faults"] && *netFaults {
			return errors.New("--cluster takes neither database (--db-faults) nor network (--net-faults) faults")
		}
		*dbFaults, *netFaults = false, false
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (see --help)", fs.Arg(0))
	}
	if !*dbFaults && !*cluster && *dbURL == "" {
		return errors.New("DATABASE_URL is required with --db-faults=false (by default the run starts a PostgreSQL of its own)")
	}
	if *lease <= chaos.WriteTimeout {
		return fmt.Errorf("--lease %s must be longer than the APIs' WRITE_TIMEOUT (%s)", *lease, chaos.WriteTimeout)
	}
	repo, err := moduleRoot()
	if err != nil {
		return err
	}
	if *workDir == "" {
		*workDir = filepath.Join(repo, ".data", "chaos", fmt.Sprintf("seed-%d-%s", *seed, time.Now().Format("20060102-150405")))
	}
	ctx, cancel := context.WithTimeout(ctx, *maxDuration)
	defer cancel()

	runURL, drop := "", func(context.Context) error { return nil }
	switch {
	case *cluster:
		if *dbURL != "" {
			fmt.Fprintln(stdout, "chaos: DATABASE_URL is not used: a cluster run starts a Citus cluster of its own")
		}
	case *dbFaults:
		if *dbURL != "" {
			fmt.Fprintln(stdout, "chaos: DATABASE_URL is not used: the database faults need a cluster the run owns (--db-faults=false runs on DATABASE_URL)")
		}
	default:
		if runURL, drop, err = createDatabase(ctx, *dbURL, fmt.Sprintf("chaos_%d_%d", *seed, time.Now().Unix())); err != nil {
			return err
		}
	}
	rep, err := chaos.Run(ctx, chaos.Config{
		Seed:           *seed,
		Intents:        *intents,
		Concurrency:    *concurrency,
		RepoDir:        repo,
		WorkDir:        *workDir,
		DatabaseURL:    runURL,
		DBFaults:       *dbFaults,
		NetFaults:      *netFaults,
		Cluster:        *cluster,
		KeepPostgres:   *keepDB,
		Race:           *race,
		Outbox:         *outbox,
		ProxyRate:      *proxyRate,
		CrashEvery:     crashes(*crashEvery),
		Lease:          *lease,
		ClientAttempts: *attempts,
		Logf:           func(format string, a ...any) { fmt.Fprintf(stdout, format+"\n", a...) },
	})
	if rep != nil {
		rep.Print(stdout)
		if *jsonOut != "" {
			if err := writeReport(*jsonOut, rep); err != nil {
				fmt.Fprintln(stdout, "chaos: write report:", err)
			}
		}
	}
	failed := err != nil || rep == nil || len(rep.Violations) > 0
	switch {
	case runURL == "":
		if rep != nil && rep.Cluster != nil && len(rep.Cluster.Dirs) > 0 {
			fmt.Fprintf(stdout, "Citus nodes kept for inspection in %s (start each, as its owner, with: pg_ctl -D DIR/data start)\n", strings.Join(rep.Cluster.Dirs, ", "))
		}
		if rep != nil && rep.PostgresDir != "" {
			fmt.Fprintf(stdout, "private PostgreSQL cluster kept for inspection in %s (start it, as its owner, with: pg_ctl -D %s/data start)\n", rep.PostgresDir, rep.PostgresDir)
		}
	case failed || *keepDB:
		fmt.Fprintf(stdout, "database kept for inspection: %s\n", redact(runURL))
	default:
		if derr := drop(context.WithoutCancel(ctx)); derr != nil {
			fmt.Fprintln(stdout, "chaos: drop the run's database:", derr)
		}
	}
	if err != nil {
		return err
	}
	if n := len(rep.Violations); n > 0 {
		return fmt.Errorf("%w: %d (seed %d)", errViolations, n, *seed)
	}
	// A long run has many chances to place every kind of fault: one never
	// injected means the run did not test what it claims.
	if f := rep.RunFailures(false); len(f) > 0 {
		return fmt.Errorf("%s (seed %d)", strings.Join(f, "; "), *seed)
	}
	return nil
}

// crashes maps the flag (0: off) to Config.CrashEvery (negative: off).
func crashes(every int) int {
	if every <= 0 {
		return -1
	}
	return every
}

// moduleRoot finds the oncepay module from the working folder upwards.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		raw, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(raw), "module github.com/oncepay/oncepay\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run from inside the oncepay module (no go.mod of github.com/oncepay/oncepay above the working folder)")
		}
		dir = parent
	}
}

// createDatabase creates database name on the server of serverURL and
// returns its URL and a function that drops it.
func createDatabase(ctx context.Context, serverURL, name string) (string, func(context.Context) error, error) {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", nil, fmt.Errorf("connect to %s: %w", redact(serverURL), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("create database %s: %w", name, err)
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", nil, err
	}
	u.Path = "/" + name
	drop := func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, serverURL)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		return err
	}
	return u.String(), drop, nil
}

// redact hides a password in a database URL.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

func writeReport(path string, rep *chaos.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := rep.WriteJSON(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
