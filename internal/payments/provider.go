package payments

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

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/tracing"
)

// The provider's statuses of charges and refunds, as it writes them.
const (
	chargeSucceeded    = "succeeded"
	chargeFailed       = "failed"
	refundSucceeded    = "succeeded"
	refundFailedStatus = "failed"
)

// ErrOutcomeUnknown means the provider may or may not have acted: a timeout,
// a dropped connection, a 5xx, or a request of ours still in flight there.
// The attempt stays pending; repeating it with the same provider key is safe.
var ErrOutcomeUnknown = errors.New("payment provider outcome unknown")

// Provider is the HTTP client of the payment provider (the simulator in
// proving/pspsim, or anything that speaks its Stripe-like API).
type Provider struct {
	baseURL string
	apiKey  string
	client  *http.Client
	observe func(call, result string)
}

// ProviderOption configures a Provider.
type ProviderOption func(*Provider)

// ProviderCalls lists every call the client makes and every result it
// reports for it (WithCallObserver).
func ProviderCalls() map[string][]string {
	return map[string][]string{
		"charge":      {"succeeded", "declined", "rejected", "unknown"},
		"find_charge": {"found", "not_found", "unknown"},
		"refund":      {"succeeded", "rejected", "unknown"},
		"find_refund": {"found", "not_found", "unknown"},
	}
}

// WithCallObserver reports every call ("charge", "find_charge", "refund",
// "find_refund") with its result ("succeeded", "declined", "rejected",
// "unknown", "found", "not_found"), e.g. to metrics (default none).
func WithCallObserver(fn func(call, result string)) ProviderOption {
	return func(p *Provider) { p.observe = fn }
}

// WithAPIKey sends key to the provider as a bearer token (default none: no
// Authorization header).
func WithAPIKey(key string) ProviderOption {
	return func(p *Provider) { p.apiKey = key }
}

// DefaultTimeout bounds one provider call unless WithTimeout says
// otherwise.
const DefaultTimeout = 5 * time.Second

// WithTimeout bounds each call (default DefaultTimeout, 5s): past it the
// outcome is unknown, never assumed. Zero, as in http.Client, sets no bound
// of the client's own; the caller's context still ends the call.
func WithTimeout(d time.Duration) ProviderOption {
	return func(p *Provider) { p.client.Timeout = d }
}

// WithTracerProvider traces every call with tp as a client span (otelhttp:
// the method and path, the status, the W3C trace context sent in the
// request's headers), which carries the provider key of a charge or refund
// (tracing.ProviderKey). The default is none: the client's transport is
// Go's default, untouched.
func WithTracerProvider(tp trace.TracerProvider) ProviderOption {
	return func(p *Provider) {
		p.client.Transport = otelhttp.NewTransport(providerKeyTransport{http.DefaultTransport},
			otelhttp.WithTracerProvider(tp),
			otelhttp.WithPropagators(tracing.Propagator()),
			otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()), // the calls are counted by WithCallObserver
			otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + r.URL.Path }))
	}
}

// providerKeyTransport puts the request's Idempotency-Key, the provider key
// of a charge or refund, on the client span otelhttp started for it, and the
// reference a lookup asks about.
type providerKeyTransport struct{ base http.RoundTripper }

func (t providerKeyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	span := trace.SpanFromContext(r.Context())
	if key := r.Header.Get("Idempotency-Key"); key != "" {
		span.SetAttributes(tracing.ProviderKey.String(key))
	}
	if ref := r.URL.Query().Get("reference"); ref != "" {
		span.SetAttributes(tracing.ProviderReference.String(ref))
	}
	return t.base.RoundTrip(r)
}

// NewProvider returns a client for the provider at baseURL, which bounds
// each call by DefaultTimeout and sends no API key unless options say
// otherwise.
func NewProvider(baseURL string, opts ...ProviderOption) *Provider {
	p := &Provider{
		baseURL: strings.TrimRight(baseURL, "/"),
		client: &http.Client{
			Timeout: DefaultTimeout,
			// A redirect is never followed: a 301/302/303 would turn our
			// POST into a GET whose 200 reads like an answer. The 3xx
			// itself is an unknown outcome (classify).
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		observe: func(string, string) {},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// result names the outcome of a call for the observer.
func result(err error, found bool) string {
	var rejected *RejectedError
	switch {
	case errors.As(err, &rejected):
		return "rejected"
	case err != nil:
		return "unknown"
	case found:
		return "found"
	}
	return "not_found"
}

// Charge is the provider's charge object.
type Charge struct {
	ID             string            `json:"id"`
	Amount         int64             `json:"amount"`
	Currency       string            `json:"currency"`
	Status         string            `json:"status"` // succeeded or failed
	FailureCode    *string           `json:"failure_code"`
	AmountRefunded int64             `json:"amount_refunded"`
	Metadata       map[string]string `json:"metadata"`
}

// ProviderRefund is the provider's refund object.
type ProviderRefund struct {
	ID       string            `json:"id"`
	Charge   string            `json:"charge"`
	Amount   int64             `json:"amount"`
	Status   string            `json:"status"`
	Metadata map[string]string `json:"metadata"`
}

// RejectedError is a definite refusal by the provider (it did nothing).
type RejectedError struct {
	Status int
	Code   string
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("payment provider refused: %d %s", e.Status, e.Code)
}

type providerError struct {
	Error struct {
		Type   string `json:"type"`
		Code   string `json:"code"`
		Charge string `json:"charge"`
	} `json:"error"`
}

// CreateCharge charges amount with the provider key key. A declined card is a
// final outcome, returned as a Charge with status failed, not as an error.
func (p *Provider) CreateCharge(ctx context.Context, key string, amount int64, currency, paymentMethod string, metadata map[string]string) (Charge, error) {
	c, err := p.createCharge(ctx, key, amount, currency, paymentMethod, metadata)
	switch {
	case err != nil:
		p.observe("charge", result(err, false))
	case c.Status == chargeSucceeded:
		p.observe("charge", "succeeded")
	default:
		p.observe("charge", "declined")
	}
	return c, err
}

func (p *Provider) createCharge(ctx context.Context, key string, amount int64, currency, paymentMethod string, metadata map[string]string) (Charge, error) {
	body := map[string]any{"amount": amount, "currency": currency, "payment_method": paymentMethod, "metadata": metadata}
	var c Charge
	status, raw, err := p.post(ctx, "/v1/charges", key, body)
	if err != nil {
		return Charge{}, err
	}
	switch {
	case status == http.StatusOK:
		if err := json.Unmarshal(raw, &c); err != nil {
			return Charge{}, fmt.Errorf("%w: decode charge: %v", ErrOutcomeUnknown, err)
		}
		if c.Status != chargeSucceeded && c.Status != chargeFailed {
			return Charge{}, fmt.Errorf("%w: charge %q has status %q", ErrOutcomeUnknown, c.ID, c.Status)
		}
		return c, nil
	case status == http.StatusPaymentRequired:
		var pe providerError
		if err := json.Unmarshal(raw, &pe); err != nil || pe.Error.Charge == "" {
			return Charge{}, fmt.Errorf("%w: decode decline: %s", ErrOutcomeUnknown, raw)
		}
		code := pe.Error.Code
		return Charge{ID: pe.Error.Charge, Amount: amount, Currency: currency, Status: chargeFailed, FailureCode: &code, Metadata: metadata}, nil
	}
	return Charge{}, classify(status, raw)
}

// FindCharge returns the charge our reference created, or nil. It is asked
// before a resumed attempt charges again: the provider forgets keys after
// its retention (24 hours), our attempts live 45 days.
func (p *Provider) FindCharge(ctx context.Context, reference string) (*Charge, error) {
	c, err := p.findCharge(ctx, reference)
	p.observe("find_charge", result(err, c != nil))
	return c, err
}

func (p *Provider) findCharge(ctx context.Context, reference string) (*Charge, error) {
	var out struct {
		Data []Charge `json:"data"`
	}
	if err := p.get(ctx, "/v1/charges?reference="+url.QueryEscape(reference), &out); err != nil {
		return nil, err
	}
	for i := range out.Data {
		if out.Data[i].Status == chargeSucceeded {
			return &out.Data[i], nil
		}
	}
	if len(out.Data) > 0 {
		return &out.Data[0], nil
	}
	return nil, nil
}

// CreateRefund refunds amount of charge with the provider key key.
func (p *Provider) CreateRefund(ctx context.Context, key, charge string, amount int64, metadata map[string]string) (ProviderRefund, error) {
	r, err := p.createRefund(ctx, key, charge, amount, metadata)
	if err != nil {
		p.observe("refund", result(err, false))
	} else {
		p.observe("refund", "succeeded")
	}
	return r, err
}

func (p *Provider) createRefund(ctx context.Context, key, charge string, amount int64, metadata map[string]string) (ProviderRefund, error) {
	body := map[string]any{"charge": charge, "amount": amount, "metadata": metadata}
	status, raw, err := p.post(ctx, "/v1/refunds", key, body)
	if err != nil {
		return ProviderRefund{}, err
	}
	if status != http.StatusOK {
		return ProviderRefund{}, classify(status, raw)
	}
	var r ProviderRefund
	if err := json.Unmarshal(raw, &r); err != nil {
		return ProviderRefund{}, fmt.Errorf("%w: decode refund: %v", ErrOutcomeUnknown, err)
	}
	return r, nil
}

// FindRefund returns the refund our reference created on the charge that
// chargeReference created, or nil.
func (p *Provider) FindRefund(ctx context.Context, chargeReference, reference string) (*ProviderRefund, error) {
	r, err := p.findRefund(ctx, chargeReference, reference)
	p.observe("find_refund", result(err, r != nil))
	return r, err
}

func (p *Provider) findRefund(ctx context.Context, chargeReference, reference string) (*ProviderRefund, error) {
	var out struct {
		Refunds []ProviderRefund `json:"refunds"`
	}
	if err := p.get(ctx, "/v1/ledger?reference="+url.QueryEscape(chargeReference), &out); err != nil {
		return nil, err
	}
	for i := range out.Refunds {
		if out.Refunds[i].Metadata["reference"] == reference {
			return &out.Refunds[i], nil
		}
	}
	return nil, nil
}

// classify turns a non-success answer to a POST into an error. Only the
// provider's own word that the request itself is wrong (400 or 404 with an
// invalid_request_error: unknown payment method, amount too large, no such
// charge) is a RejectedError: the provider did nothing and never will for
// this request, so the attempt may be finished as failed. Every other answer
// is an unknown outcome and the attempt stays pending: 409 (the key is busy),
// 429 and 5xx; 401 and 403 (our credentials: once an operator fixes them, a
// retry or the recoverer completes the attempt); the provider's idempotency
// errors (a bug of ours, not a refusal of the customer's request); and a
// 4xx without the provider's error object (a proxy, a wrong PSP_URL).
// Finishing an attempt as failed on such an answer would be final for 45
// days while the money may have moved or may still move.
func classify(status int, raw []byte) error {
	var pe providerError
	_ = json.Unmarshal(raw, &pe)
	if (status == http.StatusBadRequest || status == http.StatusNotFound) && pe.Error.Type == "invalid_request_error" {
		return &RejectedError{Status: status, Code: pe.Error.Code}
	}
	return fmt.Errorf("%w: status %d %s", ErrOutcomeUnknown, status, pe.Error.Code)
}

func (p *Provider) post(ctx context.Context, path, key string, body any) (int, []byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, nil, fmt.Errorf("encode request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.baseURL+path, bytes.NewReader(b))
	if err != nil {
		return 0, nil, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	// Go's http.Transport sends a request with an Idempotency-Key header
	// again, unasked, when a kept-alive connection fails before the answer;
	// it can only do so with GetBody. Without it, the retry is ours and
	// visible: a lost answer is an unknown outcome, which the client's retry
	// or the recoverer resumes with the same key (and logs, and counts).
	req.GetBody = nil
	return p.do(req)
}

func (p *Provider) get(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.baseURL+path, nil)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	status, raw, err := p.do(req)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		// A lookup that fails says nothing about the outcome it looks for,
		// whatever the status: never a refusal.
		var pe providerError
		_ = json.Unmarshal(raw, &pe)
		return fmt.Errorf("%w: %s answered %d %s", ErrOutcomeUnknown, req.URL.Path, status, pe.Error.Code)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%w: decode %s: %v", ErrOutcomeUnknown, req.URL.Path, err)
	}
	return nil
}

func (p *Provider) do(req *http.Request) (int, []byte, error) {
	if p.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+p.apiKey)
	}
	res, err := p.client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("%w: read answer: %v", ErrOutcomeUnknown, err)
	}
	return res.StatusCode, raw, nil
}
