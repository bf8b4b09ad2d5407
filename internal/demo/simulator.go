package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/oncepay/oncepay/internal/payments"
)

// errNotSimulator means the provider answered, but not as the payment
// simulator does: a real provider has no ledger and no fault switches, and a
// simulator that refuses our API key lets us use neither.
var errNotSimulator = errors.New("the payment provider is not a simulator that answers us")

// maxSimulatorBody bounds what is read of one answer of the simulator.
const maxSimulatorBody = 1 << 20

// Simulator reaches the payment simulator's ledger (GET /v1/ledger) and its
// fault switches of one tenant (GET and PUT /admin/faults?scope=) over HTTP, with the provider's
// API key, exactly as any other client of the simulator would; the demo
// does not link the simulator. Against a real provider both answer
// errNotSimulator.
type Simulator struct {
	baseURL string
	apiKey  string
	client  *http.Client
}

// SimulatorOption configures a Simulator.
type SimulatorOption func(*Simulator)

// WithAPIKey authenticates with key (PSP_API_KEY) as a bearer token
// (default none: no Authorization header).
func WithAPIKey(key string) SimulatorOption {
	return func(s *Simulator) { s.apiKey = key }
}

// WithTimeout bounds each call, so a provider that hangs cannot hold a demo
// request (default payments.DefaultTimeout, 5s, as the provider client).
// Zero, as in http.Client, sets no bound of the client's own; the demo
// request's context still ends the call.
func WithTimeout(d time.Duration) SimulatorOption {
	return func(s *Simulator) { s.client.Timeout = d }
}

// NewSimulator returns the demo's client of the provider at baseURL
// (PSP_URL), which bounds each call by payments.DefaultTimeout and sends no
// API key unless options say otherwise.
func NewSimulator(baseURL string, opts ...SimulatorOption) *Simulator {
	s := &Simulator{
		baseURL: strings.TrimRight(baseURL, "/"),
		client:  &http.Client{Timeout: payments.DefaultTimeout},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// simLedger is what the demo reads of the simulator's ledger.
type simLedger struct {
	Charges []struct {
		Status string `json:"status"`
	} `json:"charges"`
	Refunds []struct {
		Status string `json:"status"`
		Amount int64  `json:"amount"`
	} `json:"refunds"`
}

// simSucceeded is the status of a charge or refund that moved money.
const simSucceeded = "succeeded"

// simFailed is the status of a declined charge.
const simFailed = "failed"

// ledger returns the charges and refunds the simulator recorded for one
// reference (our payment id, which every charge carries).
func (s *Simulator) ledger(ctx context.Context, reference string) (simLedger, error) {
	var l simLedger
	err := s.call(ctx, http.MethodGet, "/v1/ledger?reference="+url.QueryEscape(reference), nil, &l)
	if err == nil && (l.Charges == nil || l.Refunds == nil) {
		err = fmt.Errorf("%w: its ledger has no charges or refunds", errNotSimulator)
	}
	return l, err
}

// simFaults are the one-shot counters the simulator keeps for one scope
// (pspsim.ScopedFaults), as it sends them: raw members, so that a
// read-modify-write changes the members the demo knows and hands every
// other back untouched.
type simFaults map[string]json.RawMessage

// count reads one of the one-shot counters.
func (f simFaults) count(name string) int {
	var n int
	_ = json.Unmarshal(f[name], &n) // absent or odd: 0, as the simulator would start
	return n
}

// scopedFaultsPath is the simulator's fault switches of one scope: only
// the charges and refunds whose metadata tenant_id is scope meet them.
func scopedFaultsPath(scope string) string { return "/admin/faults?scope=" + url.QueryEscape(scope) }

// faults reads the one-shot faults armed for scope (a tenant's id). A
// provider that answers it is a simulator the demo can break on purpose,
// for one tenant at a time; one that answers without the scope (a
// simulator that cannot scope its faults) is not used, since arming it
// would break every tenant's payments.
func (s *Simulator) faults(ctx context.Context, scope string) (simFaults, error) {
	var f simFaults
	if err := s.call(ctx, http.MethodGet, scopedFaultsPath(scope), nil, &f); err != nil {
		return nil, err
	}
	var got string
	if err := json.Unmarshal(f["scope"], &got); err != nil || got != scope {
		return nil, fmt.Errorf("%w: its faults cannot be scoped to one tenant", errNotSimulator)
	}
	if _, ok := f["fail_next"]; !ok {
		return nil, fmt.Errorf("%w: its faults have no fail_next", errNotSimulator)
	}
	return f, nil
}

// setFaults replaces the one-shot faults of scope and returns them as the
// simulator then holds them.
func (s *Simulator) setFaults(ctx context.Context, scope string, f simFaults) (simFaults, error) {
	body, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("encode faults: %w", err)
	}
	var out simFaults
	if err := s.call(ctx, http.MethodPut, scopedFaultsPath(scope), body, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// call sends one request and decodes a 200 answer into out. A 4xx answer is
// errNotSimulator; a transport error or a 5xx is an error of its own.
func (s *Simulator) call(ctx context.Context, method, path string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.baseURL+path, rd)
	if err != nil {
		return fmt.Errorf("simulator %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if s.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+s.apiKey)
	}
	res, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("simulator %s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxSimulatorBody))
	if err != nil {
		return fmt.Errorf("simulator %s %s: read answer: %w", method, path, err)
	}
	switch {
	case res.StatusCode == http.StatusOK:
	case res.StatusCode >= 400 && res.StatusCode < 500:
		return fmt.Errorf("%w: %s %s answered %d", errNotSimulator, method, path, res.StatusCode)
	default:
		return fmt.Errorf("simulator %s %s answered %d", method, path, res.StatusCode)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%w: %s %s: decode answer: %v", errNotSimulator, method, path, err)
	}
	return nil
}
