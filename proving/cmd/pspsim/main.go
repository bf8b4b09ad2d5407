// Command pspsim runs the oncepay payment-service-provider simulator: a
// Stripe-like HTTP API with its own idempotency keys, fault injection and
// signed webhooks, used by the demo and by end-to-end tests. See package
// proving/pspsim for the behaviour; this command only wires configuration,
// logging and graceful shutdown.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/oncepay/oncepay/proving/pspsim"
)

// shutdownTimeout bounds graceful shutdown; requests still running after it
// (for example ones hung by the timeout_next fault) are cut off.
const shutdownTimeout = 10 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args, os.Getenv, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "pspsim: %v\n", err)
		os.Exit(1)
	}
}

// options is the parsed command line.
type options struct {
	addr     string
	logLevel slog.Level
	cfg      pspsim.Config
	// checkHealth asks the simulator on addr for /healthz instead of
	// serving (--check-health).
	checkHealth bool
}

// run is main without process globals, so tests can drive it: it serves
// until ctx is cancelled, then shuts down gracefully. --help prints usage to
// stdout and returns nil.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	opts, err := parseOptions(args, getenv, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if opts.checkHealth {
		return checkHealth(ctx, opts.addr)
	}

	logger := slog.New(slog.NewJSONHandler(stdout, &slog.HandlerOptions{Level: opts.logLevel}))
	sim, err := pspsim.New(opts.cfg, logger, time.Now)
	if err != nil {
		return fmt.Errorf("configure simulator: %w", err)
	}
	ln, err := net.Listen("tcp", opts.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", opts.addr, err)
	}
	srv := &http.Server{
		Handler:           sim.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		// ReadTimeout also ends requests hung by the timeout_next fault
		// whose client never gives up. No WriteTimeout: injected latency
		// must be able to exceed any fixed bound.
		ReadTimeout:    time.Minute,
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 1 << 20,
		ErrorLog:       slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}

	workCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- sim.Run(workCtx) }()
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(ln) }()

	logger.Info("pspsim listening",
		"addr", ln.Addr().String(),
		"webhook_url", opts.cfg.WebhookURL,
		"key_retention", opts.cfg.KeyRetention.String(),
		"api_key_required", opts.cfg.APIKey != "",
		"seed", opts.cfg.Seed,
		"faults", opts.cfg.Faults)

	var serveErr error
	select {
	case <-ctx.Done():
		logger.Info("shutting down", "reason", context.Cause(ctx).Error())
	case serveErr = <-serveDone:
		serveErr = fmt.Errorf("serve http: %w", serveErr)
	}

	shutdownCtx, cancelShutdown := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancelShutdown()
	var shutdownErr error
	if err := srv.Shutdown(shutdownCtx); err != nil {
		shutdownErr = errors.Join(fmt.Errorf("shut down http server: %w", err), srv.Close())
	}
	if serveErr == nil {
		if err := <-serveDone; err != nil && !errors.Is(err, http.ErrServerClosed) {
			serveErr = fmt.Errorf("serve http: %w", err)
		}
	}
	cancel()
	runErr := <-runDone
	if runErr != nil {
		runErr = fmt.Errorf("run webhook delivery: %w", runErr)
	}
	logger.Info("pspsim stopped", "webhooks", sim.Deliveries())
	return errors.Join(serveErr, shutdownErr, runErr)
}

// checkHealth asks the simulator listening on addr for GET /healthz; a
// wildcard host (0.0.0.0 in a container) is asked on the loopback.
func checkHealth(ctx context.Context, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("check health: %w", err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	url := "http://" + net.JoinHostPort(host, port) + "/healthz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("check health: %w", err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("check health: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("check health: GET %s answered %s", url, res.Status)
	}
	return nil
}

// usageHeader introduces --help output.
const usageHeader = `pspsim - payment service provider simulator for oncepay

A Stripe-like PSP over HTTP/JSON with its own idempotency keys (forgotten
after the key retention), fault injection and Standard Webhooks signed
webhooks. Every flag falls back to the environment variable in brackets.

Endpoints:
  POST /v1/charges        create a charge (Idempotency-Key header required)
  GET  /v1/charges/{id}   fetch a charge
  GET  /v1/charges?reference=X   charges whose metadata.reference is X
  POST /v1/refunds        refund a charge (Idempotency-Key header required)
  GET  /v1/refunds/{id}   fetch a refund
  GET  /v1/ledger         every charge and refund ever created
  GET|PUT /admin/faults   read or replace fault settings
  GET|PUT /admin/faults?scope=S   one-shot faults only charges and refunds
                          with metadata tenant_id S meet
  POST /admin/reset       clear fault settings (data is kept)
  GET  /admin/deliveries  webhook delivery counters
  GET  /healthz           liveness

Test payment methods: pm_card_ok, pm_card_declined, pm_card_insufficient_funds.

Usage:
  pspsim [flags]

Flags:
`

// parseOptions reads flags with environment fallbacks. It returns
// flag.ErrHelp after printing usage to stdout when asked for help.
func parseOptions(args []string, getenv func(string) string, stdout io.Writer) (options, error) {
	name := "pspsim"
	if len(args) > 0 {
		name, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	ef := envFlags{fs: fs, getenv: getenv}

	var (
		opts     options
		secrets  string
		latency  time.Duration
		logLevel string
		faults   = &opts.cfg.Faults
		cfg      = &opts.cfg
		maxTries int
	)
	ef.str(&opts.addr, "addr", "PSP_ADDR", "127.0.0.1:8090", "listen address (host:port; port 0 picks a free port)")
	ef.secret(&cfg.APIKey, "api-key", "PSP_API_KEY", "if set, /v1/* and /admin/* require \"Authorization: Bearer <key>\" (prefer the env var: flags show up in ps)")
	ef.duration(&cfg.KeyRetention, "key-retention", "PSP_KEY_RETENTION", pspsim.DefaultKeyRetention, "how long an Idempotency-Key is remembered; afterwards the same key charges again")
	ef.str(&cfg.WebhookURL, "webhook-url", "PSP_WEBHOOK_URL", "", "merchant webhook endpoint; empty disables webhooks")
	ef.secret(&secrets, "webhook-secret", "PSP_WEBHOOK_SECRET", "comma-separated whsec_<base64> signing secrets, current first (several = rotation)")
	ef.duration(&cfg.WebhookBackoffBase, "webhook-backoff", "PSP_WEBHOOK_BACKOFF", pspsim.DefaultWebhookBackoffBase, "first webhook retry delay, doubled per retry up to 1m")
	ef.int(&maxTries, "webhook-max-attempts", "PSP_WEBHOOK_MAX_ATTEMPTS", pspsim.DefaultWebhookMaxAttempts, "attempts per webhook delivery before giving up")
	ef.int(&faults.WebhookDuplicates, "webhook-duplicates", "PSP_WEBHOOK_DUPLICATES", 0, "deliver every webhook this many extra times")
	ef.bool(&faults.WebhookReorder, "webhook-reorder", "PSP_WEBHOOK_REORDER", false, "deliver webhooks queued close together in reverse order")
	ef.uint64(&cfg.Seed, "seed", "PSP_SEED", 0, "seed for random faults, so chaos runs replay")
	ef.duration(&latency, "latency", "PSP_LATENCY", 0, "delay before answering every POST (e.g. 200ms)")
	ef.float(&faults.FailRate, "fail-rate", "PSP_FAIL_RATE", 0, "probability [0,1] of a 503 before charging")
	ef.float(&faults.DropRate, "drop-rate", "PSP_DROP_RATE", 0, "probability [0,1] of charging, then dropping the connection unanswered")
	ef.float(&faults.DeclineRate, "decline-rate", "PSP_DECLINE_RATE", 0, "probability [0,1] that a pm_card_ok charge is declined anyway")
	ef.str(&logLevel, "log-level", "PSP_LOG_LEVEL", "info", "log level: debug, info, warn or error")
	fs.BoolVar(&opts.checkHealth, "check-health", false, "do not serve: exit 0 if the simulator listening on --addr answers GET /healthz with 200 (a container healthcheck; the image has no shell)")

	if err := errors.Join(ef.errs...); err != nil {
		return options{}, fmt.Errorf("read environment: %w", err)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fmt.Fprint(stdout, usageHeader)
			fs.PrintDefaults()
			return options{}, flag.ErrHelp
		}
		return options{}, fmt.Errorf("parse flags: %w (see --help)", err)
	}
	ef.applySecrets()
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("parse flags: unexpected argument %q (see --help)", fs.Arg(0))
	}
	if latency < 0 {
		return options{}, fmt.Errorf("parse flags: latency %v is negative", latency)
	}
	faults.LatencyMS = int(latency.Milliseconds())
	cfg.WebhookMaxAttempts = maxTries
	for s := range strings.SplitSeq(secrets, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.WebhookSecrets = append(cfg.WebhookSecrets, s)
		}
	}
	if err := opts.logLevel.UnmarshalText([]byte(logLevel)); err != nil {
		return options{}, fmt.Errorf("parse log level: %w", err)
	}
	return opts, nil
}

// envFlags defines flags whose defaults come from environment variables,
// collecting malformed variables instead of ignoring them.
type envFlags struct {
	fs     *flag.FlagSet
	getenv func(string) string
	errs   []error
	// secrets maps flag names to the env values applied after parsing when
	// the flag was not given, so --help never prints a secret as a default.
	secrets map[string]secretFallback
}

// secretFallback is a pending environment value for a secret flag.
type secretFallback struct {
	p     *string
	value string
}

// lookup returns the environment value for env, if set and non-empty.
func (e *envFlags) lookup(env string) (string, bool) {
	v := e.getenv(env)
	return v, v != ""
}

func (e *envFlags) bad(env, v string, err error) {
	e.errs = append(e.errs, fmt.Errorf("%s=%q: %w", env, v, err))
}

func (e *envFlags) str(p *string, name, env, def, usage string) {
	if v, ok := e.lookup(env); ok {
		def = v
	}
	e.fs.StringVar(p, name, def, usage+" ["+env+"]")
}

// secret is str for credentials: the environment value is applied after
// parsing instead of becoming the printed default.
func (e *envFlags) secret(p *string, name, env, usage string) {
	if v, ok := e.lookup(env); ok {
		if e.secrets == nil {
			e.secrets = make(map[string]secretFallback)
		}
		e.secrets[name] = secretFallback{p: p, value: v}
	}
	e.fs.StringVar(p, name, "", usage+" ["+env+"]")
}

// applySecrets fills secret flags that were not given from the environment.
func (e *envFlags) applySecrets() {
	given := map[string]bool{}
	e.fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for name, fb := range e.secrets {
		if !given[name] {
			*fb.p = fb.value
		}
	}
}

func (e *envFlags) duration(p *time.Duration, name, env string, def time.Duration, usage string) {
	if v, ok := e.lookup(env); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			e.bad(env, v, err)
		} else {
			def = d
		}
	}
	e.fs.DurationVar(p, name, def, usage+" ["+env+"]")
}

func (e *envFlags) float(p *float64, name, env string, def float64, usage string) {
	if v, ok := e.lookup(env); ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			e.bad(env, v, err)
		} else {
			def = f
		}
	}
	e.fs.Float64Var(p, name, def, usage+" ["+env+"]")
}

func (e *envFlags) int(p *int, name, env string, def int, usage string) {
	if v, ok := e.lookup(env); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			e.bad(env, v, err)
		} else {
			def = n
		}
	}
	e.fs.IntVar(p, name, def, usage+" ["+env+"]")
}

func (e *envFlags) uint64(p *uint64, name, env string, def uint64, usage string) {
	if v, ok := e.lookup(env); ok {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			e.bad(env, v, err)
		} else {
			def = n
		}
	}
	e.fs.Uint64Var(p, name, def, usage+" ["+env+"]")
}

func (e *envFlags) bool(p *bool, name, env string, def bool, usage string) {
	if v, ok := e.lookup(env); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			e.bad(env, v, err)
		} else {
			def = b
		}
	}
	e.fs.BoolVar(p, name, def, usage+" ["+env+"]")
}
