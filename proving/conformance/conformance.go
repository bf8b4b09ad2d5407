// Package conformance is a black-box suite of oncepay's idempotency
// contract (docs/CONTRACT.md), run over HTTP against any base URL: this
// service as `make run` or `make run-cluster` starts it, a fork of it, or
// another implementation of the same contract in any language.
//
// It is written from the contract, not from the code: every case names the
// section of docs/CONTRACT.md it checks (Case.Anchor) and quotes the
// sentence (Case.Quote), and it sees only what a client sees. A fork imports
// it into its own tests (Run with a Target, then Report.Failed), or points
// the command at a URL (`make conform BASE=http://host:port`,
// proving/cmd/conform).
//
// Two cases need the target's help, and report "not applicable" without it:
//
//   - a request held in flight (Target.Hold): a payment that stays at the
//     provider for a few seconds. A target in demo mode whose provider is the
//     payment simulator offers it (PUT /demo/faults arms the simulator's
//     timeout_next for the caller's tenant); DemoHold finds it.
//   - a late retry after expiry (Target.Expire): only a test that owns the
//     target's clock or retention can make its records expire now.
//
// The cases create orders and payments under two tenants' API keys, with
// idempotency keys of their own run (a random prefix): run them against a
// target whose data may grow, never against production. Counting an
// effect reads the tenant's newest orders, so the tenants' keys should be
// the kit's alone while it runs.
package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Target is what the kit runs against.
type Target struct {
	// BaseURL is the service's root, e.g. http://127.0.0.1:8080.
	BaseURL string
	// APIKeys are the API keys of two different tenants (Authorization:
	// Bearer). Empty: the kit asks GET /demo for the demo tenants' keys.
	APIKeys []string
	// Client sends every request (default: a client with a 60 s timeout).
	Client *http.Client
	// Hold makes the next payment of the tenant of apiKey stay in flight
	// (at the provider) for at least two seconds, and then end without a
	// final outcome, as a provider timeout does. Nil: DemoHold is tried,
	// and without it the cases that need a held request are not applicable.
	Hold func(ctx context.Context, apiKey string) error
	// Expire makes every idempotency record the target holds expire and be
	// deleted, as its retention would after 45 days (advance its clock past
	// the longest retention, then run its sweeper). Nil: the late-retry
	// case is not applicable.
	Expire func(ctx context.Context) error
	// OnResult, when set, is called with each case's result as soon as
	// the case ends (the command prints its line then).
	OnResult func(Result)
}

// Outcome is how a case ended.
type Outcome int

const (
	// Passed: the target kept the promise.
	Passed Outcome = iota
	// Failed: it did not; Result.Detail says how.
	Failed
	// NotApplicable: the target offers no way to check it; Result.Detail
	// says why.
	NotApplicable
)

func (o Outcome) String() string {
	switch o {
	case Passed:
		return "PASS"
	case Failed:
		return "FAIL"
	default:
		return "N/A "
	}
}

// Case is one check of the contract.
type Case struct {
	// Name is the case's stable name, which docs/CONTRACT.md links to.
	Name string
	// Anchor is the heading of docs/CONTRACT.md whose rule it checks.
	Anchor string
	// Quote is the sentence of that section it checks, as the page says it
	// (without the page's code and emphasis marks).
	Quote string
	run   func(ctx context.Context, k *kit) error
}

// Cite is where the case's rule is written: docs/CONTRACT.md#anchor.
func (c Case) Cite() string { return "docs/CONTRACT.md#" + c.Anchor }

// Result is one case's outcome.
type Result struct {
	Case    Case
	Outcome Outcome
	Detail  string
	Took    time.Duration
}

// Report is the outcome of a run, one result per case, in Cases' order.
type Report struct {
	Results []Result
}

func (r Report) count(o Outcome) int {
	n := 0
	for _, res := range r.Results {
		if res.Outcome == o {
			n++
		}
	}
	return n
}

// Passed is the number of cases that passed.
func (r Report) Passed() int { return r.count(Passed) }

// Failed is the number of cases that failed.
func (r Report) Failed() int { return r.count(Failed) }

// NotApplicable is the number of cases the target offered no way to run.
func (r Report) NotApplicable() int { return r.count(NotApplicable) }

// Result returns the result of the case named name.
func (r Report) Result(name string) (Result, bool) {
	for _, res := range r.Results {
		if res.Case.Name == name {
			return res, true
		}
	}
	return Result{}, false
}

// Write prints one line per case (Result.Line) and then the totals (Totals).
func (r Report) Write(w io.Writer) error {
	var b strings.Builder
	for _, res := range r.Results {
		b.WriteString(res.Line())
		b.WriteByte('\n')
	}
	b.WriteString(r.Totals())
	b.WriteByte('\n')
	_, err := io.WriteString(w, b.String())
	return err
}

// Totals is the report's last line: "N passed, M failed, K not applicable".
func (r Report) Totals() string {
	return fmt.Sprintf("%d passed, %d failed, %d not applicable", r.Passed(), r.Failed(), r.NotApplicable())
}

// Line is the result's line: its outcome, the case, the rule it checks, and
// what failed or why it could not run.
func (res Result) Line() string {
	line := fmt.Sprintf("%s %-34s %s", res.Outcome, res.Case.Name, res.Case.Cite())
	switch res.Outcome {
	case Failed:
		line += ": " + res.Detail
	case NotApplicable:
		line += ": not applicable: " + res.Detail
	}
	return line
}

// notApplicable is a case's answer when the target offers no way to check
// its rule.
type notApplicable struct{ why string }

func (n notApplicable) Error() string { return n.why }

// Run runs every case against t, one after the other, and reports each.
// It fails as a whole (an error, no report) only when it cannot start: no
// base URL, or no two tenants' keys.
func Run(ctx context.Context, t Target) (Report, error) {
	k, err := newKit(ctx, t)
	if err != nil {
		return Report{}, err
	}
	var rep Report
	for _, c := range Cases() {
		start := time.Now()
		err := c.run(ctx, k)
		res := Result{Case: c, Took: time.Since(start)}
		var na notApplicable
		switch {
		case err == nil:
			res.Outcome = Passed
		case errors.As(err, &na):
			res.Outcome, res.Detail = NotApplicable, na.why
		default:
			res.Outcome, res.Detail = Failed, err.Error()
		}
		rep.Results = append(rep.Results, res)
		if t.OnResult != nil {
			t.OnResult(res)
		}
	}
	return rep, nil
}

// kit is one run's state: the target, the keys, and every error answer
// seen, which the last case checks for problem+json.
type kit struct {
	base   string
	keys   [2]string
	client *http.Client
	hold   func(ctx context.Context, apiKey string) error
	noHold string // why there is no hold, when hold is nil
	expire func(ctx context.Context) error
	prefix string // of every idempotency key of this run
	seq    int
	sku    string // a product every order buys one of
	cur    string // its currency

	mu         sync.Mutex // guards errorsSeen: a case may send requests at once
	errorsSeen []exchange
}

func newKit(ctx context.Context, t Target) (*kit, error) {
	base := strings.TrimRight(t.BaseURL, "/")
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		return nil, fmt.Errorf("conformance: the base URL %q is not an http:// or https:// URL", t.BaseURL)
	}
	k := &kit{base: base, client: t.Client, hold: t.Hold, expire: t.Expire}
	if k.client == nil {
		k.client = &http.Client{Timeout: 60 * time.Second}
	}
	var p [6]byte
	if _, err := rand.Read(p[:]); err != nil {
		return nil, err
	}
	k.prefix = "conform-" + hex.EncodeToString(p[:])
	keys := t.APIKeys
	if len(keys) > 0 && !twoTenants(keys) {
		return nil, fmt.Errorf("conformance: needs exactly two API keys of two different tenants, got %d", len(keys))
	}
	var demo *demoStatus
	if len(keys) == 0 || k.hold == nil {
		var err error
		demo, err = k.demoStatus(ctx)
		if err != nil {
			return nil, err
		}
	}
	if len(keys) == 0 {
		if demo == nil || len(demo.Tenants) < 2 {
			return nil, errors.New("conformance: needs the API keys of two tenants (KEYS=key1,key2): the target is not in demo mode (GET /demo), which would name its demo tenants' keys")
		}
		keys = []string{demo.Tenants[0].APIKey, demo.Tenants[1].APIKey}
	}
	if !twoTenants(keys) {
		return nil, errors.New("conformance: GET /demo names fewer than two demo tenants: pass two tenants' API keys (KEYS=key1,key2)")
	}
	k.keys = [2]string{keys[0], keys[1]}
	if k.hold == nil {
		k.hold, k.noHold = demoHold(k, demo)
	}
	if err := k.pickProduct(ctx); err != nil {
		return nil, err
	}
	return k, nil
}

// twoTenants reports whether keys are two API keys, which must be two
// tenants'.
func twoTenants(keys []string) bool {
	return len(keys) == 2 && keys[0] != "" && keys[1] != "" && keys[0] != keys[1]
}

// key returns a fresh idempotency key of this run; what names the case.
func (k *kit) key(what string) string {
	k.seq++
	return fmt.Sprintf("%s-%s-%d", k.prefix, what, k.seq)
}
