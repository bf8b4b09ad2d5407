// Command api is the oncepay service: the HTTP API and its operator commands.
//
//	api serve                              run the API (the default)
//	api migrate up|down [N]|version        manage the schema
//	api tenants create --slug S --name N   create a tenant, print its key once
//	api sweep [--once]                     delete expired records
//	api outbox stuck|retry ID|replay ID    operate the outbox
//	api version                            print the build version
//
// Configuration comes from environment variables; see the README.
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
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/broker"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/tenants"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "api:", err)
		os.Exit(1)
	}
}

const usage = `Usage: api <command> [arguments]

Commands:
  serve                               run the HTTP API (default)
  migrate up                          apply all pending migrations
  migrate down [N]                    revert the last N migrations (default 1)
  migrate version                     print the applied schema version
  tenants create --slug S [--name N]  create a tenant and print its API key once
  sweep [--once]                      delete expired records (loop every SWEEP_INTERVAL, or once)
  outbox stuck [--limit N]            list stuck events (all tenants)
  outbox retry <event-id>             make a stuck or backing-off event due now
  outbox replay <event-id>            publish an event again with its original id (consumers ignore it)
  version                             print the build version

Configuration is read from environment variables (DATABASE_URL, HTTP_ADDR,
DEMO_MODE, ...); the README lists them all.
`

// errUsage marks a command line that could not be understood.
var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(ctx, getenv, stdout, stderr)
	case "migrate":
		return migrate(args, getenv, stdout)
	case "tenants":
		return tenantsCmd(ctx, args, getenv, stdout, stderr)
	case "sweep":
		return sweep(ctx, args, getenv, stdout, stderr)
	case "outbox":
		return outboxCmd(ctx, args, getenv, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, version())
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("%w: unknown command %q", errUsage, cmd)
}

func newLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}

func serve(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := app.ConfigFromEnv(getenv)
	if err != nil {
		return err
	}
	logger := newLogger(stderr, cfg.LogLevel)
	a, err := app.New(ctx, cfg, logger, time.Now)
	if err != nil {
		return err
	}
	defer a.Close()
	url := "http://" + a.Addr().String()
	logger.Info("listening", "url", url, "demo_mode", cfg.DemoMode, "version", version())
	fmt.Fprintf(stdout, "oncepay is ready at %s\n", url)
	if cfg.DemoMode {
		for _, t := range tenants.DemoTenants() {
			fmt.Fprintf(stdout, "  demo tenant %-7s  Authorization: Bearer %s\n", t.Slug, t.APIKey)
		}
		fmt.Fprintf(stdout, "  try: curl -s %s/v1/products -H 'Authorization: Bearer sk_test_acme'\n", url)
	}
	return a.Serve(ctx)
}

func migrate(args []string, getenv func(string) string, stdout io.Writer) error {
	url := getenv("DATABASE_URL")
	if url == "" {
		return errors.New("DATABASE_URL is required")
	}
	if len(args) == 0 {
		return fmt.Errorf("%w: migrate up|down [N]|version", errUsage)
	}
	m, err := postgres.NewMigrator(url)
	if err != nil {
		return err
	}
	defer m.Close()
	switch args[0] {
	case "up":
		if err := m.Up(); err != nil {
			return err
		}
	case "down":
		n := 1
		if len(args) > 1 {
			if n, err = strconv.Atoi(args[1]); err != nil || n < 1 {
				return fmt.Errorf("%w: migrate down N wants a positive number", errUsage)
			}
		}
		if err := m.Down(n); err != nil {
			return err
		}
	case "version":
	default:
		return fmt.Errorf("%w: migrate up|down [N]|version", errUsage)
	}
	v, dirty, err := m.Version()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "schema version %d (dirty: %t)\n", v, dirty)
	return nil
}

func tenantsCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "create" {
		return fmt.Errorf("%w: tenants create --slug S [--name N]", errUsage)
	}
	fs := flag.NewFlagSet("tenants create", flag.ContinueOnError)
	fs.SetOutput(stderr)
	slug := fs.String("slug", "", "tenant identifier (lowercase letters, digits, dashes)")
	name := fs.String("name", "", "display name (defaults to the slug)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if !validSlug(*slug) {
		return fmt.Errorf("%w: --slug must be 2-40 lowercase letters, digits or dashes", errUsage)
	}
	if *name == "" {
		*name = *slug
	}
	cfg, err := app.ConfigFromEnv(getenv)
	if err != nil {
		return err
	}
	cfg.HTTPAddr = "127.0.0.1:0" // the command serves nothing
	cfg.OutboxDispatcher, cfg.FulfillmentConsumer = false, false
	a, err := app.New(ctx, cfg, newLogger(stderr, cfg.LogLevel), time.Now)
	if err != nil {
		return err
	}
	defer a.Close()
	t, key, err := a.Tenants.Create(ctx, *slug, *name)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "tenant %s created (id %s)\nAPI key (shown once, store it now): %s\n", t.Slug, t.ID, key)
	return nil
}

func sweep(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
	fs.SetOutput(stderr)
	once := fs.Bool("once", false, "sweep once and exit (default: every SWEEP_INTERVAL until stopped)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := app.ConfigFromEnv(getenv)
	if err != nil {
		return err
	}
	cfg.HTTPAddr = "127.0.0.1:0" // the sweeper serves nothing
	cfg.OutboxDispatcher, cfg.FulfillmentConsumer = false, false
	logger := newLogger(stderr, cfg.LogLevel)
	a, err := app.New(ctx, cfg, logger, time.Now)
	if err != nil {
		return err
	}
	defer a.Close()
	if !*once {
		return a.Sweeper().Run(ctx, cfg.SweepInterval)
	}
	rep, err := a.Sweeper().SweepOnce(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "deleted: api_idempotency %d, outbox_events %d, webhook_receipts %d; stuck unsettled operations: %d\n",
		rep.Deleted["api_idempotency"], rep.Deleted["outbox_events"], rep.Deleted["webhook_receipts"], rep.Stuck)
	return nil
}

// outboxCmd operates the outbox: list stuck events, make one due again, or
// replay one to the broker with its original id (the operator's replay
// button; the consumers' inboxes make it harmless).
func outboxCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	const use = "outbox stuck [--limit N] | outbox retry <event-id> | outbox replay <event-id>"
	if len(args) == 0 {
		return fmt.Errorf("%w: %s", errUsage, use)
	}
	cfg, err := app.ConfigFromEnv(getenv)
	if err != nil {
		return err
	}
	logger := newLogger(stderr, cfg.LogLevel)
	pool, err := postgres.Open(ctx, cfg.DatabaseURL, postgres.PoolConfig{MaxConns: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	switch args[0] {
	case "stuck":
		fs := flag.NewFlagSet("outbox stuck", flag.ContinueOnError)
		fs.SetOutput(stderr)
		limit := fs.Int("limit", 50, "most events to list")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		stuck, err := outbox.NewAdmin(pool, nil, logger).Stuck(ctx, *limit)
		if err != nil {
			return err
		}
		for _, ev := range stuck {
			fmt.Fprintf(stdout, "%s %s attempts=%d last_error=%q\n", ev.ID, ev.Type, ev.Attempts, deref(ev.LastError))
		}
		fmt.Fprintf(stdout, "%d stuck\n", len(stuck))
		return nil
	case "retry", "replay":
		if len(args) != 2 {
			return fmt.Errorf("%w: %s", errUsage, use)
		}
		id, err := uuid.Parse(args[1])
		if err != nil {
			return fmt.Errorf("%w: %q is not an event id", errUsage, args[1])
		}
		if args[0] == "retry" {
			_, retried, err := outbox.NewAdmin(pool, nil, logger).Retry(ctx, id)
			if errors.Is(err, postgres.ErrNotFound) {
				return fmt.Errorf("no event %s", id)
			}
			if err != nil {
				return err
			}
			if !retried {
				fmt.Fprintf(stdout, "event %s is already published; use outbox replay to send it again\n", id)
				return nil
			}
			fmt.Fprintf(stdout, "event %s is due again\n", id)
			return nil
		}
		url := cfg.NATSURL
		if url == "" { // the running API's embedded server
			if url, err = broker.EmbeddedURL(cfg.NATSStoreDir); err != nil {
				return err
			}
		}
		nc, js, err := broker.Connect(url, "oncepay-cli", logger)
		if err != nil {
			return err
		}
		defer nc.Close()
		res, err := outbox.NewAdmin(pool, js, logger).Replay(ctx, id)
		if errors.Is(err, postgres.ErrNotFound) {
			return fmt.Errorf("no event %s", id)
		}
		if err != nil {
			return err
		}
		if res.Duplicate {
			fmt.Fprintf(stdout, "event %s replayed; JetStream dropped it inside its duplicate window\n", id)
		} else {
			fmt.Fprintf(stdout, "event %s replayed as stream message %d; consumers ignore it\n", id, res.Sequence)
		}
		return nil
	}
	return fmt.Errorf("%w: %s", errUsage, use)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func validSlug(s string) bool {
	if len(s) < 2 || len(s) > 40 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return bi.Main.Version + " " + s.Value
			}
		}
		return bi.Main.Version
	}
	return "unknown"
}
