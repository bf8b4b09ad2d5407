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
// <command>") explains one. Configuration comes from environment variables,
// and tuning from a file (api serve --tuning FILE); docs/CONFIGURATION.md
// lists both.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"syscall"
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
  serve [--tuning FILE]               run the HTTP API and its workers (default)
  migrate up                          apply all pending migrations
  migrate down [N]                    revert the last N migrations (default 1)
  migrate version                     print the applied schema version
  tenants create --slug S [--name N]  create a tenant and print its API key once
  keys create --tenant S              give a tenant one more API key, printed once
  keys list --tenant S                list a tenant's API keys (prefix, created, revoked; never the key)
  keys revoke <prefix-or-id>...       make API keys stop working (within AuthCacheTTL, 30s)
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
all with their defaults, and the tuning fields a file can change.
Documentation: README.md and docs/.
`

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
		return serve(ctx, args, getenv, stdout, stderr)
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
