// Command api is the oncepay service: the HTTP API and its operator commands.
//
//	api serve                              run the API (the default)
//	api migrate up|down [N]|version        manage the schema
//	api tenants create --slug S --name N   create a tenant, print its key once
//	api keys create|list|rotate --tenant S create, list or rotate a tenant's API keys
//	api keys revoke KEY-PREFIX-OR-ID...    revoke API keys
//	api sweep [--once]                     delete expired records
//	api outbox stuck|retry ID|replay ID    operate the outbox
//	api attention list|show ID|resolve ID  operate the needs-attention queue
//	api idempotency show ...               show one idempotency record
//	api version                            print the build version
//
// "api --help" lists the commands, "api <command> --help" (or "api help
// <command>") explains one. Configuration comes from environment variables;
// docs/CONFIGURATION.md lists them all.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/broker"
	"github.com/oncepay/oncepay/internal/logging"
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

oncepay: an orders and payments API in which retries, double clicks and
redeliveries never cause a second order, charge or refund.

Commands:
  serve                               run the HTTP API and its workers (default)
  migrate up                          apply all pending migrations
  migrate down [N]                    revert the last N migrations (default 1)
  migrate version                     print the applied schema version
  tenants create --slug S [--name N]  create a tenant and print its API key once
  keys create --tenant S              give a tenant one more API key, printed once
  keys list --tenant S                list a tenant's API keys (prefix, created, revoked; never the key)
  keys revoke <prefix-or-id>...       make API keys stop working (within AUTH_CACHE_TTL)
  keys rotate --tenant S [--overlap D]
                                      a new key, printed once; the old ones stop after D (default 24h)
  sweep [--once]                      delete expired records (every SWEEP_INTERVAL, or once)
  outbox stuck [--limit N]            list the events the dispatcher gave up on (all tenants)
  outbox retry <event-id>             make a stuck or backing-off event due now
  outbox replay <event-id>            publish an event again with its original id (consumers ignore it)
  attention list [--resolved]         list what needs a person: held attempts, webhooks about other money
  attention show <id>                 show one attention item
  attention resolve <id> --retry|--close --note TEXT
                                      resolve an item: try its held attempt again, or record it settled
  idempotency show --tenant SLUG --operation OP --key KEY [--body]
                                      show one idempotency record and its attention status
  version                             print the build version
  help [command]                      show this text, or a command's

Run "api <command> --help" for what a command does, its flags and the
environment variables it reads. Configuration comes from environment variables
(DATABASE_URL, HTTP_ADDR, DEMO_MODE, ...); docs/CONFIGURATION.md lists them
all with their defaults. Documentation: README.md and docs/.
`

// helps are the commands' own help texts, printed by "api <command> --help"
// and "api help <command>".
var helps = map[string]string{
	"serve": `Usage: api serve

Run the HTTP API until SIGINT or SIGTERM, with its background workers: the
outbox dispatcher (publishes events to NATS JetStream), the fulfillment
consumer, the webhook worker, the payment recoverer and the retention sweeper.
Without NATS_URL it runs a NATS server inside the process (files under
NATS_STORE_DIR) that accepts only clients with a token made for this
process. The payment provider is PSP_URL; "make run" starts the payment
simulator as its own process and sets it.

It listens at once: /healthz answers 200 and every other path 503 while it
waits for the database and the broker, retrying each with backoff (every retry
is logged) for at most STARTUP_TIMEOUT; past it, it exits naming what never
answered. Once both answer it applies pending migrations (unless
AUTO_MIGRATE=false), builds everything, serves the API and prints "oncepay is
ready at <url>" on stdout (and, in demo mode, the demo tenants' API keys);
logs are JSON lines on stderr. On a signal
it stops accepting requests, gives in-flight ones SHUTDOWN_TIMEOUT to finish,
then stops the workers. Work cut off is either committed or resumed by a
client's retry or the recoverer.

Environment (default in brackets; docs/CONFIGURATION.md lists every variable):
  DATABASE_URL          PostgreSQL URL (required)
  HTTP_ADDR             listen address [127.0.0.1:8080]
  DEMO_MODE             seed tenants acme/globex (keys sk_test_acme, sk_test_globex),
                        a catalog, and the demo UI's chaos endpoints [false]
  AUTO_MIGRATE          apply migrations at start [true]
  STARTUP_TIMEOUT       how long to wait for the database and NATS at start [2m]
  LOG_LEVEL             debug, info, warn or error [info]
  NATS_URL              NATS server with JetStream, credentials in the URL
                        (nats://user:password@host:4222), or a cluster's servers
                        comma-separated; set it whenever more than one API
                        process runs [empty: embedded]
  NATS_STREAM_REPLICAS  the event stream's replicas, 3 on a 3-server cluster;
                        never lowered at start [1]
  PSP_URL               the payment provider (required)
  PSP_API_KEY           the provider's bearer token [empty: none sent]
  PSP_WEBHOOK_SECRETS   whsec_ secrets that verify the provider's webhooks; required
                        outside demo mode [the public demo secret, demo mode only]
  OUTBOX_DISPATCHER, FULFILLMENT_CONSUMER
                        run these workers in this process [true]
  SWEEP_INTERVAL        in-process sweeper, 0 disables [1m]
  ADMIN_TOKEN           bearer token of /admin/outbox/... and /admin/attention [empty: not routed]
  RECOVERER_MAX_ATTEMPTS, RECOVERER_BACKOFF, RECOVERER_BACKOFF_MAX
                        recoveries of an attempt without an outcome before it is held
                        for an operator, and the wait between them [10, 30s doubling to 15m]
  OTEL_EXPORTER_OTLP_ENDPOINT
                        export traces with OTLP over HTTP; the other standard
                        OTEL_* variables apply [empty: no tracing]

Endpoints: /v1/... (the API, described by GET /openapi.yaml), /webhooks/psp,
/healthz, /readyz, /metrics (Prometheus), and the demo UI at /.
`,
	"migrate": `Usage: api migrate up | down [N] | version

Manage the schema of DATABASE_URL (db/migrations, embedded in the binary) and
print the schema version afterwards.

  up         apply every pending migration
  down [N]   revert the last N migrations (default 1); their tables and data are dropped
  version    print the applied version, and whether a failed migration left it dirty

api serve applies pending migrations itself unless AUTO_MIGRATE=false.

Environment: DATABASE_URL (required).
`,
	"tenants": `Usage: api tenants create --slug SLUG [--name NAME]

Create a tenant and print its API key. The key is shown once: only its
SHA-256 is stored, so store it now. Clients send it as
"Authorization: Bearer <key>"; every resource belongs to exactly one tenant.

Flags:
  --slug SLUG   the tenant's identifier: 2-40 lowercase letters, digits or dashes (required)
  --name NAME   its display name (default: the slug)

Environment: DATABASE_URL (required); migrations are applied first unless
AUTO_MIGRATE=false.

Example:
  DATABASE_URL=$(scripts/postgres.sh dev) api tenants create --slug initech --name "Initech"
`,
	"keys": `Usage: api keys create --tenant SLUG
       api keys list --tenant SLUG
       api keys revoke KEY-PREFIX-OR-ID...
       api keys rotate --tenant SLUG [--overlap D]

Manage tenants' API keys. A key is shown once, when it is made: only its
SHA-256 and its first 12 characters (the prefix, e.g. sk_live_ab12) are
stored. A tenant may have several keys at once.

  create   give the tenant one more key and print it; its other keys keep working
  list     print each key's id, prefix, when it was created and when it
           stops or stopped working ("-": it has no end); never the key
  revoke   make the keys named stop working now: each by its id, its prefix
           as list shows it (refused when two keys share it: use the id), or
           the key itself. Revoking a revoked key changes nothing
  rotate   give the tenant a new key, print it, and make every key it had
           stop working after the overlap (at once with --overlap 0): the
           time its clients need to switch. A key that already stops
           sooner keeps its end

A running API may accept a revoked key from its authentication cache for at
most AUTH_CACHE_TTL [30s] more, and never a rotated key past its overlap
once AUTH_CACHE_TTL has passed since the rotation.

Flags:
  --tenant SLUG   the tenant (create, list, rotate; required)
  --overlap D     how long the old keys keep working after a rotation: a
                  duration such as 30m, 24h or 7d [24h]

Environment: DATABASE_URL (required); migrations are applied first unless
AUTO_MIGRATE=false.

Example:
  api keys rotate --tenant initech --overlap 1h
  api keys revoke sk_test_acme sk_test_globex   (a demo database served for real)
`,
	"sweep": `Usage: api sweep [--once]

Delete expired records in small batches that never stall live traffic:
finished idempotency records past their Idempotency-Expires, and published
outbox events, webhook receipts and processed messages past their retention
(RETENTION_*). Pending (unsettled) operations are never deleted; those more
than 15 minutes past their lease are reported as stuck. Any number of
sweepers may run at once. api serve runs one itself every SWEEP_INTERVAL.

Flags:
  --once   sweep once, print what was deleted, and exit
           (default: sweep every SWEEP_INTERVAL until SIGINT or SIGTERM)

Environment: DATABASE_URL (required), SWEEP_INTERVAL [1m], SWEEP_BATCH [250],
SWEEP_DUTY_CYCLE [0.0625],
RETENTION_* and HORIZON_* (see docs/CONFIGURATION.md). It refuses to start with a
retention shorter than a horizon it must cover.
`,
	"outbox": `Usage: api outbox stuck [--limit N] | retry <event-id> | replay <event-id>

Operate the transactional outbox, across all tenants. With ADMIN_TOKEN set,
the running API offers the same under /admin/outbox/.

  stuck [--limit N]   list the events the dispatcher gave up on after
                      OUTBOX_MAX_ATTEMPTS failed publishes (at most N, default 50)
  retry <event-id>    make a stuck or backing-off event due now, with fresh
                      attempts; the dispatcher publishes it on its next round.
                      A published event is left alone (see replay)
  replay <event-id>   publish an event again, now, with its original id as
                      Nats-Msg-Id, whatever its state. Inside the stream's
                      duplicate window (NATS_DUPLICATE_WINDOW) JetStream drops
                      it; after it, consumers receive it and their inbox
                      ignores it. Use it when a consumer missed an event

Environment: DATABASE_URL (required). replay also reads NATS_URL, or, when it
is empty, finds the running API's embedded NATS server and its token through
NATS_STORE_DIR [.data/nats] (run it as the user that runs api serve: only that
user may read the token).
`,
	"attention": `Usage: api attention list [--resolved] [--limit N] | show <id> |
       resolve <id> --retry|--close --note TEXT

Operate the needs-attention queue, across all tenants: what no retry can
settle and a person has to look at. An item is raised, in the same
transaction as what caused it, for
  - a payment or refund attempt whose provider record is about other money
    (reason mismatch): the attempt is held, and its client's retry answers
    409 awaiting_operator without running anything;
  - an attempt still without an outcome after RECOVERER_MAX_ATTEMPTS
    recoveries (reason recovery_exhausted): held the same way;
  - a provider webhook about other money (reason mismatch): never applied,
    set aside with its receipt marked processed.
The metric oncepay_attention_open_items counts the open ones by reason. With
ADMIN_TOKEN set, the running API shows the same under GET /admin/attention.

  list [--resolved] [--limit N]   the open items, oldest first (or the resolved
                                  ones, newest first); at most N, default 50
  show <id>                       one item: what was found, its attempt or webhook,
                                  the payment or refund, its resolution
  resolve <id> --retry --note T   release the item's held attempt for another try
                                  with a fresh bound of recoveries: its client's retry
                                  or the recoverer resumes it from its recovery point
                                  (for an outage that is over, or a provider record
                                  corrected at the provider)
  resolve <id> --close --note T   record that it was settled outside the service (the
                                  odd charge refunded at the provider by hand, say). A
                                  held attempt stays held: its client keeps getting
                                  409 awaiting_operator

Environment: DATABASE_URL (required).
`,
	"idempotency": `Usage: api idempotency show --tenant SLUG --operation OP --key KEY [--body]

Show the idempotency record of one request: its state (pending, completed,
failed), recovery point, lease, the recoverer's count and backoff, request
fingerprint, the resource it made, its stored response's status and expiry,
and its attention items (a held attempt has an open one). The stored response
body is printed only with --body: it may hold a customer's data.

Flags:
  --tenant SLUG     the tenant's slug (required)
  --operation OP    orders.create, payments.create or refunds.create (required)
  --key KEY         the Idempotency-Key the client sent (required)
  --body            print the stored response body too

Environment: DATABASE_URL (required).
`,
	"version": `Usage: api version

Print the module version and the VCS revision the binary was built from.
`,
}

// wantsHelp reports whether a command's arguments ask for its help.
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// errUsage marks a command line that could not be understood.
var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	if h, ok := helps[cmd]; ok && wantsHelp(args) {
		fmt.Fprint(stdout, h)
		return nil
	}
	switch cmd {
	case "serve":
		if len(args) > 0 {
			return fmt.Errorf("%w: serve takes no arguments (configuration is in the environment; see api serve --help)", errUsage)
		}
		return serve(ctx, getenv, stdout, stderr)
	case "migrate":
		return migrate(args, getenv, stdout)
	case "tenants":
		return tenantsCmd(ctx, args, getenv, stdout, stderr)
	case "keys":
		return keysCmd(ctx, args, getenv, stdout, stderr)
	case "sweep":
		return sweep(ctx, args, getenv, stdout, stderr)
	case "outbox":
		return outboxCmd(ctx, args, getenv, stdout, stderr)
	case "attention":
		return attentionCmd(ctx, args, getenv, stdout, stderr)
	case "idempotency":
		return idempotencyCmd(ctx, args, getenv, stdout, stderr)
	case "version":
		if len(args) > 0 {
			return fmt.Errorf("%w: version takes no arguments", errUsage)
		}
		fmt.Fprintln(stdout, version())
		return nil
	case "help", "-h", "-help", "--help":
		if len(args) == 0 {
			fmt.Fprint(stdout, usage)
			return nil
		}
		if h, ok := helps[args[0]]; ok {
			fmt.Fprint(stdout, h)
			return nil
		}
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("%w: no command %q", errUsage, args[0])
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("%w: unknown command %q", errUsage, cmd)
}

func newLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}

func serve(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := app.ConfigFromEnv(getenv)
	if err = errors.Join(err, app.CheckServe(cfg)); err != nil {
		return err
	}
	// The log is buffered (internal/logging): a request's line costs no
	// write of its own; warnings and errors go out at once, and everything
	// held goes out when serve returns.
	logs := logging.NewBuffered(stderr, cfg.LogFlushInterval)
	defer logs.Close()
	logger := slog.New(logging.FlushAbove(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: cfg.LogLevel}), logs, slog.LevelWarn))
	a, err := app.New(cfg, logger, time.Now)
	if err != nil {
		return err
	}
	defer a.Close()
	url := browserURL(a.Addr())
	logger.Info("listening", "url", url, "demo_mode", cfg.DemoMode, "version", version(), "startup_timeout", cfg.StartupTimeout.String())
	if err := a.Start(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped by a signal while it waited
		}
		return err
	}
	logger.Info("ready", "url", url)
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
		return fmt.Errorf("%w: migrate up|down [N]|version (api migrate --help)", errUsage)
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
		return fmt.Errorf("%w: migrate up|down [N]|version (api migrate --help)", errUsage)
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
		return fmt.Errorf("%w: tenants create --slug S [--name N] (api tenants --help)", errUsage)
	}
	fs := flag.NewFlagSet("tenants create", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, helps["tenants"]) }
	slug := fs.String("slug", "", "tenant identifier (lowercase letters, digits, dashes)")
	name := fs.String("name", "", "display name (defaults to the slug)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q (api tenants --help)", errUsage, fs.Arg(0))
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
	pool, err := app.OpenDatabase(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	t, key, err := app.NewTenants(pool, cfg, time.Now).Create(ctx, *slug, *name)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "tenant %s created (id %s)\nAPI key (shown once, store it now): %s\n", t.Slug, t.ID, key)
	return nil
}

// defaultOverlap is how long api keys rotate keeps the old keys working
// unless --overlap says otherwise: a day, for clients whose configuration
// is changed by a person or a deploy.
const defaultOverlap = 24 * time.Hour

// keysCmd manages API keys: create, list, revoke, rotate. It builds only
// the pool and the tenants service.
func keysCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	const use = "keys create|list --tenant S | keys revoke <prefix-or-id>... | keys rotate --tenant S [--overlap D] (api keys --help)"
	if len(args) == 0 {
		return fmt.Errorf("%w: %s", errUsage, use)
	}
	sub := args[0]
	fs := flag.NewFlagSet("keys "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, helps["keys"]) }
	var slug *string
	overlap := defaultOverlap
	switch sub {
	case "create", "list", "rotate":
		slug = fs.String("tenant", "", "the tenant's slug")
		if sub == "rotate" {
			fs.Func("overlap", "how long the old keys keep working (e.g. 30m, 24h, 7d; default 24h)", func(v string) (err error) {
				overlap, err = parseOverlap(v)
				return err
			})
		}
	case "revoke":
	default:
		return fmt.Errorf("%w: %s", errUsage, use)
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if slug != nil && (*slug == "" || fs.NArg() > 0) {
		return fmt.Errorf("%w: %s", errUsage, use)
	}
	if sub == "revoke" && fs.NArg() == 0 {
		return fmt.Errorf("%w: name the keys to revoke: %s", errUsage, use)
	}
	cfg, err := app.ConfigFromEnv(getenv)
	if err != nil {
		return err
	}
	pool, err := app.OpenDatabase(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	svc := app.NewTenants(pool, cfg, time.Now)
	switch sub {
	case "create":
		k, raw, err := svc.CreateKey(ctx, *slug)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "key %s (id %s) created for tenant %s\nAPI key (shown once, store it now): %s\n", k.Prefix, k.ID, *slug, raw)
	case "list":
		keys, err := svc.Keys(ctx, *slug)
		if err != nil {
			return err
		}
		now := time.Now()
		fmt.Fprintf(stdout, "%-36s  %-12s  %-20s  %s\n", "ID", "PREFIX", "CREATED", "REVOKED")
		for _, k := range keys {
			fmt.Fprintf(stdout, "%-36s  %-12s  %-20s  %s\n", k.ID, k.Prefix, k.CreatedAt.UTC().Format(time.RFC3339), revokedColumn(k, now))
		}
	case "revoke":
		var errs []error
		for _, ref := range fs.Args() {
			k, err := svc.RevokeKey(ctx, ref)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			fmt.Fprintf(stdout, "key %s (id %s) revoked at %s; a running API accepts it for at most AUTH_CACHE_TTL (%s) more\n",
				k.Prefix, k.ID, k.RevokedAt.UTC().Format(time.RFC3339), cfg.AuthCacheTTL)
		}
		return errors.Join(errs...)
	case "rotate":
		k, raw, old, err := svc.RotateKey(ctx, *slug, overlap)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "key %s (id %s) created for tenant %s\nAPI key (shown once, store it now): %s\n", k.Prefix, k.ID, *slug, raw)
		for _, o := range old {
			fmt.Fprintf(stdout, "old key %s (id %s) works until %s\n", o.Prefix, o.ID, o.RevokedAt.UTC().Format(time.RFC3339))
		}
	}
	return nil
}

// revokedColumn is what api keys list says of when k stops working.
func revokedColumn(k tenants.Key, now time.Time) string {
	switch {
	case k.RevokedAt == nil:
		return "-"
	case k.WorksAt(now):
		return k.RevokedAt.UTC().Format(time.RFC3339) + " (overlap: works until then)"
	}
	return k.RevokedAt.UTC().Format(time.RFC3339)
}

// parseOverlap reads --overlap: a Go duration, or whole days as "7d".
func parseOverlap(v string) (time.Duration, error) {
	var d time.Duration
	var err error
	if n, ok := strings.CutSuffix(v, "d"); ok {
		var days int
		days, err = strconv.Atoi(n)
		d = time.Duration(days) * 24 * time.Hour
	} else {
		d, err = time.ParseDuration(v)
	}
	if err != nil || d < 0 {
		return 0, fmt.Errorf("want a duration such as 0, 30m, 24h or 7d, not %q", v)
	}
	return d, nil
}

func sweep(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, helps["sweep"]) }
	once := fs.Bool("once", false, "sweep once and exit (default: every SWEEP_INTERVAL until stopped)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q (api sweep --help)", errUsage, fs.Arg(0))
	}
	cfg, err := app.ConfigFromEnv(getenv)
	if err != nil {
		return err
	}
	if !*once && cfg.SweepInterval <= 0 {
		return fmt.Errorf("%w: SWEEP_INTERVAL is %v; sweep with --once, or set an interval", errUsage, cfg.SweepInterval)
	}
	logger := newLogger(stderr, cfg.LogLevel)
	pool, err := app.OpenDatabase(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	sweeper, err := app.NewSweeper(pool, cfg, logger, time.Now)
	if err != nil {
		return err
	}
	if !*once {
		return sweeper.Run(ctx, cfg.SweepInterval)
	}
	rep, err := sweeper.SweepOnce(ctx)
	if err != nil {
		return err
	}
	tables := slices.Sorted(maps.Keys(rep.Deleted))
	deleted := make([]string, len(tables))
	for i, table := range tables {
		deleted[i] = fmt.Sprintf("%s %d", table, rep.Deleted[table])
	}
	fmt.Fprintf(stdout, "deleted: %s; stuck unsettled operations: %d\n", strings.Join(deleted, ", "), rep.Stuck)
	return nil
}

// outboxCmd operates the outbox: list stuck events, make one due again, or
// replay one to the broker with its original id (the operator's replay
// button; the consumers' inboxes make it harmless).
func outboxCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	const use = "outbox stuck [--limit N] | outbox retry <event-id> | outbox replay <event-id> (api outbox --help)"
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
		fs.Usage = func() { fmt.Fprint(stderr, helps["outbox"]) }
		limit := fs.Int("limit", 50, "most events to list")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *limit < 1 || fs.NArg() > 0 {
			return fmt.Errorf("%w: %s", errUsage, use)
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
			if errors.Is(err, outbox.ErrNotFound) {
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
		if errors.Is(err, outbox.ErrNotFound) {
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

// browserURL is the URL a person opens to reach the API listening on addr:
// a wildcard address (HTTP_ADDR=0.0.0.0:8080 in a container, or :8080)
// becomes 127.0.0.1, which reaches it from the same machine and, through a
// port published as in docker-compose.yml, from the container's host.
func browserURL(addr net.Addr) string {
	if tcp, ok := addr.(*net.TCPAddr); ok && (tcp.IP == nil || tcp.IP.IsUnspecified()) {
		return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(tcp.Port))
	}
	return "http://" + addr.String()
}

// buildVersion is the version given at build time
// (-ldflags "-X main.buildVersion=..."; the Dockerfile sets it from its
// VERSION argument or the checkout's git revision). It is set by the
// linker, never at run time.
var buildVersion string

// version is buildVersion, or else the module version and the VCS revision
// the go command stamped into the binary.
func version() string {
	if buildVersion != "" {
		return buildVersion
	}
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
