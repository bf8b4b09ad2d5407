// Command conform runs the conformance kit (proving/conformance), the
// black-box suite of the idempotency contract of docs/CONTRACT.md, against
// a running service:
//
//	conform --base http://127.0.0.1:8080 [--keys key1,key2]
//
// (`make conform BASE=... KEYS=...`). --keys are the API keys of two
// different tenants; without them the target must be in demo mode, whose
// GET /demo names its demo tenants' keys. It prints one line per case and
// then "N passed, M failed, K not applicable", and exits 1 when a case
// failed, 2 when it could not run at all.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/oncepay/oncepay/proving/conformance"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// errFailed: the run ended with a failed case (exit 1).
var errFailed = errors.New("a case failed")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("conform", flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := fs.String("base", "", "the service's base URL, e.g. http://127.0.0.1:8080 (required)")
	keys := fs.String("keys", "", "the API keys of two different tenants, comma-separated (default: the demo tenants' keys, from GET /demo)")
	timeout := fs.Duration("timeout", 5*time.Minute, "the whole run's bound")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "conform: unexpected arguments %q (the flags are --base, --keys, --timeout)\n", fs.Args())
		return 2
	}
	if err := conform(ctx, *base, *keys, *timeout, stdout); err != nil {
		if errors.Is(err, errFailed) {
			return 1
		}
		fmt.Fprintf(stderr, "conform: %s\n", strings.TrimPrefix(err.Error(), "conformance: "))
		return 2
	}
	return 0
}

func conform(ctx context.Context, base, keys string, timeout time.Duration, stdout io.Writer) error {
	if base == "" {
		return errors.New("--base is required (make conform BASE=http://host:port)")
	}
	t := conformance.Target{BaseURL: base}
	if keys != "" {
		t.APIKeys = strings.Split(keys, ",")
		for i := range t.APIKeys {
			t.APIKeys[i] = strings.TrimSpace(t.APIKeys[i])
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	started := false
	t.OnResult = func(r conformance.Result) {
		if !started {
			fmt.Fprintf(stdout, "conform: the idempotency contract (docs/CONTRACT.md) against %s\n", base)
			started = true
		}
		fmt.Fprintln(stdout, r.Line())
	}
	rep, err := conformance.Run(ctx, t)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, rep.Totals())
	if rep.Failed() > 0 {
		return errFailed
	}
	return nil
}
