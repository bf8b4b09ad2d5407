package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/logging"
	"github.com/oncepay/oncepay/internal/tenants"
)

// serve runs the API (api serve [--tuning FILE]). Every variable it cannot
// read, and what the service lacks to serve, is reported at once; app.New
// then refuses an unsafe combination of settings (app.Config.Check).
func serve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, helps["serve"]) }
	tuning := fs.String("tuning", "", "a JSON file of app.Tuning fields that override their defaults (docs/CONFIGURATION.md)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: serve takes no arguments but --tuning FILE (configuration is in the environment; see api serve --help)", errUsage)
	}
	cfg, err := configWithTuning(getenv, *tuning)
	if err = errors.Join(err, app.CheckServe(cfg)); err != nil {
		return err
	}
	// The log is buffered (internal/logging): a request's line costs no
	// write of its own; warnings and errors go out at once, and everything
	// held goes out when serve returns.
	logs := logging.NewBuffered(stderr, cfg.Tuning.LogFlushInterval)
	defer logs.Close()
	logger := slog.New(logging.FlushAbove(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: cfg.LogLevel}), logs, slog.LevelWarn))
	a, err := app.New(cfg, logger, time.Now)
	if err != nil {
		return err
	}
	defer a.Close()
	url := browserURL(a.Addr())
	logger.Info("listening", "url", url, "demo_mode", cfg.DemoMode, "version", version(), "startup_timeout", cfg.Tuning.StartupTimeout.String())
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

// configWithTuning reads the configuration from the environment and, when
// path is not empty, the tuning from that file; it reports what it cannot
// read of both at once.
func configWithTuning(getenv func(string) string, path string) (app.Config, error) {
	cfg, err := app.ConfigFromEnv(getenv)
	if path != "" {
		var terr error
		cfg.Tuning, terr = app.LoadTuning(path)
		err = errors.Join(err, terr)
	}
	return cfg, err
}
