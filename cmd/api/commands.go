package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/broker"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/tenants"
)

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
			fmt.Fprintf(stdout, "key %s (id %s) revoked at %s; a running API accepts it for at most its AuthCacheTTL (%s unless its tuning file says otherwise) more\n",
				k.Prefix, k.ID, k.RevokedAt.UTC().Format(time.RFC3339), cfg.Tuning.AuthCacheTTL)
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
	tuning := fs.String("tuning", "", "a JSON file of app.Tuning fields (SweepBatch, SweepDutyCycle) that override their defaults")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q (api sweep --help)", errUsage, fs.Arg(0))
	}
	cfg, err := configWithTuning(getenv, *tuning)
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
