package main

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/attention"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/postgres"
)

// attentionCmd operates the needs-attention queue: what no retry settles and
// a person has to look at (held attempts, webhooks about other money).
func attentionCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	const use = "attention list [--resolved] [--limit N] | attention show <id> | attention resolve <id> --retry|--close --note TEXT (api attention --help)"
	if len(args) == 0 {
		return fmt.Errorf("%w: %s", errUsage, use)
	}
	fs := flag.NewFlagSet("attention "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, helps["attention"]) }
	var (
		resolved, retry, closeIt bool
		limit                    int
		note                     string
	)
	var id uuid.UUID
	switch args[0] {
	case "list":
		fs.BoolVar(&resolved, "resolved", false, "list resolved items, newest first, instead of the open ones")
		fs.IntVar(&limit, "limit", 50, "most items to list")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if limit < 1 || fs.NArg() > 0 {
			return fmt.Errorf("%w: %s", errUsage, use)
		}
	case "show", "resolve":
		if len(args) < 2 {
			return fmt.Errorf("%w: %s", errUsage, use)
		}
		var err error
		if id, err = uuid.Parse(args[1]); err != nil {
			return fmt.Errorf("%w: %q is not an attention item id", errUsage, args[1])
		}
		fs.BoolVar(&retry, "retry", false, "release the held attempt for another try")
		fs.BoolVar(&closeIt, "close", false, "record that it was settled outside the service")
		fs.StringVar(&note, "note", "", "what was done (required)")
		if err := fs.Parse(args[2:]); err != nil {
			return err
		}
		if fs.NArg() > 0 || (args[0] == "show" && (retry || closeIt || note != "")) {
			return fmt.Errorf("%w: %s", errUsage, use)
		}
		if args[0] == "resolve" && (retry == closeIt || strings.TrimSpace(note) == "") {
			return fmt.Errorf("%w: resolve takes exactly one of --retry and --close, and a --note that says what was done", errUsage)
		}
	default:
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
	admin := app.NewAttentionAdmin(pool, app.NewIdempotencyStore(cfg, time.Now), time.Now, logger)
	switch args[0] {
	case "list":
		status := attention.StatusOpen
		if resolved {
			status = attention.StatusResolved
		}
		items, err := admin.List(ctx, status, limit)
		if err != nil {
			return err
		}
		for _, it := range items {
			fmt.Fprintf(stdout, "%s %s %s tenant=%s %s raised=%s\n", it.ID, it.Status(), it.Reason, it.TenantID, subject(it), it.RaisedAt.Format(time.RFC3339))
		}
		fmt.Fprintf(stdout, "%d %s\n", len(items), status)
		return nil
	case "show":
		it, err := admin.Get(ctx, id)
		if errors.Is(err, attention.ErrNotFound) {
			return fmt.Errorf("no attention item %s", id)
		}
		if err != nil {
			return err
		}
		printItem(stdout, it)
		return nil
	}
	res := attention.ResolutionClosed
	if retry {
		res = attention.ResolutionRetried
	}
	it, err := admin.Resolve(ctx, id, res, strings.TrimSpace(note))
	switch {
	case errors.Is(err, attention.ErrNotFound):
		return fmt.Errorf("no attention item %s", id)
	case errors.Is(err, attention.ErrResolved):
		return fmt.Errorf("attention item %s is resolved already (api attention show %s)", id, id)
	case errors.Is(err, attention.ErrNotRetryable):
		return fmt.Errorf("%w; resolve it with --close once it is settled", err)
	case err != nil:
		return err
	}
	if res == attention.ResolutionRetried {
		fmt.Fprintf(stdout, "attention item %s resolved: %s %q released for another try (its client's retry or the recoverer resumes it)\n",
			it.ID, it.Attempt.Operation, it.Attempt.Key)
		return nil
	}
	fmt.Fprintf(stdout, "attention item %s resolved: closed\n", it.ID)
	return nil
}

// subject names what an item is about, in one token per fact.
func subject(it attention.Item) string {
	var b strings.Builder
	if it.Attempt != nil {
		fmt.Fprintf(&b, "operation=%s key=%q", it.Attempt.Operation, it.Attempt.Key)
	} else {
		fmt.Fprintf(&b, "webhook=%s", it.DeliveryID)
	}
	if it.Resource != nil {
		fmt.Fprintf(&b, " %s=%s", it.Resource.Type, it.Resource.ID)
	}
	return b.String()
}

func printItem(w io.Writer, it attention.Item) {
	fmt.Fprintf(w, "id:          %s\nstatus:      %s\nreason:      %s\ntenant:      %s\n", it.ID, it.Status(), it.Reason, it.TenantID)
	if it.Attempt != nil {
		fmt.Fprintf(w, "operation:   %s\nkey:         %q\n", it.Attempt.Operation, it.Attempt.Key)
	} else {
		fmt.Fprintf(w, "webhook:     %s\n", it.DeliveryID)
	}
	if it.Resource != nil {
		fmt.Fprintf(w, "%-12s %s\n", it.Resource.Type+":", it.Resource.ID)
	}
	fmt.Fprintf(w, "raised:      %s\ndetail:      %s\n", it.RaisedAt.Format(time.RFC3339Nano), it.Detail)
	if r := it.Resolved; r != nil {
		fmt.Fprintf(w, "resolved:    %s (%s)\nnote:        %s\n", r.At.Format(time.RFC3339Nano), r.Resolution, r.Note)
	}
}

// idempotencyCmd shows one idempotency record, for an operator.
func idempotencyCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	const use = "idempotency show --tenant SLUG --operation OP --key KEY [--body] (api idempotency --help)"
	if len(args) == 0 || args[0] != "show" {
		return fmt.Errorf("%w: %s", errUsage, use)
	}
	fs := flag.NewFlagSet("idempotency show", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, helps["idempotency"]) }
	slug := fs.String("tenant", "", "the tenant's slug (required)")
	op := fs.String("operation", "", "the operation, e.g. payments.create (required)")
	key := fs.String("key", "", "the Idempotency-Key (required)")
	body := fs.Bool("body", false, "print the stored response body too")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 || *slug == "" || *op == "" || *key == "" {
		return fmt.Errorf("%w: %s", errUsage, use)
	}
	cfg, err := app.ConfigFromEnv(getenv)
	if err != nil {
		return err
	}
	known := false
	for _, s := range app.Operations() {
		known = known || string(s.Name) == *op
	}
	if !known {
		return fmt.Errorf("%w: no operation %q", errUsage, *op)
	}
	pool, err := postgres.Open(ctx, cfg.DatabaseURL, postgres.PoolConfig{MaxConns: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	t, err := app.NewTenants(pool, cfg, time.Now).Lookup(ctx, *slug)
	if err != nil {
		return err
	}
	rec, err := app.NewIdempotencyStore(cfg, time.Now).Inspect(ctx, pool, t.ID, idempotency.Operation(*op), idempotency.Key(*key))
	if errors.Is(err, idempotency.ErrNotFound) {
		return fmt.Errorf("no idempotency record for tenant %s, operation %s, key %q (never used, or expired and swept)", t.Slug, *op, *key)
	}
	if err != nil {
		return err
	}
	items, err := attention.ForAttempt(ctx, pool, t.ID, attention.Attempt{Operation: *op, Key: *key})
	if err != nil {
		return err
	}
	now := time.Now()
	fmt.Fprintf(stdout, "tenant:         %s (%s)\noperation:      %s\nkey:            %q\nstate:          %s\nrecovery point: %s\n",
		t.Slug, t.ID, rec.Operation, rec.Key, rec.State, rec.RecoveryPoint)
	switch {
	case rec.HeldAt != nil:
		fmt.Fprintf(stdout, "lease:          none: held for an operator since %s\n", rec.HeldAt.Format(time.RFC3339Nano))
	case rec.LockedUntil == nil:
		fmt.Fprintf(stdout, "lease:          none\n")
	case rec.LockedUntil.After(now):
		fmt.Fprintf(stdout, "lease:          until %s (live: an attempt may be running, held by %s)\n", rec.LockedUntil.Format(time.RFC3339Nano), rec.RequestID)
	default:
		fmt.Fprintf(stdout, "lease:          ran out at %s (last held by %s)\n", rec.LockedUntil.Format(time.RFC3339Nano), rec.RequestID)
	}
	if rec.State == idempotency.StatePending {
		next := "as soon as its lease runs out"
		if rec.NextRecoveryAt != nil {
			next = "not before " + rec.NextRecoveryAt.Format(time.RFC3339Nano)
		}
		fmt.Fprintf(stdout, "recoveries:     %d (next %s)\n", rec.Recoveries, next)
	}
	fmt.Fprintf(stdout, "fingerprint:    %s\n", hex.EncodeToString(rec.Fingerprint[:]))
	if rec.Resource != nil {
		fmt.Fprintf(stdout, "resource:       %s %s\n", rec.Resource.Type, rec.Resource.ID)
	} else {
		fmt.Fprintf(stdout, "resource:       none yet\n")
	}
	if rec.StatusCode != 0 {
		fmt.Fprintf(stdout, "response:       %d %s, %d bytes\n", rec.StatusCode, rec.ContentType, len(rec.Body))
	}
	fmt.Fprintf(stdout, "created:        %s\nupdated:        %s\nexpires:        %s\n",
		rec.CreatedAt.Format(time.RFC3339Nano), rec.UpdatedAt.Format(time.RFC3339Nano), rec.ExpiresAt.Format(time.RFC3339Nano))
	switch {
	case len(items) == 0:
		fmt.Fprintf(stdout, "attention:      none\n")
	default:
		for _, it := range items {
			fmt.Fprintf(stdout, "attention:      %s %s %s raised %s\n", it.ID, it.Status(), it.Reason, it.RaisedAt.Format(time.RFC3339))
		}
	}
	if *body && len(rec.Body) > 0 {
		fmt.Fprintf(stdout, "body:\n%s\n", rec.Body)
	}
	return nil
}
