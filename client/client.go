package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Defaults of the options.
const (
	// DefaultMaxAttempts bounds the HTTP attempts of one call, the first
	// included.
	DefaultMaxAttempts = 5
	// DefaultBackoffBase is the first wait between attempts when the server
	// gives no Retry-After; each further wait doubles it.
	DefaultBackoffBase = 200 * time.Millisecond
	// DefaultBackoffCap bounds the exponential wait.
	DefaultBackoffCap = 5 * time.Second
	// DefaultTimeout bounds one attempt when the caller supplies no
	// *http.Client; a hung attempt then turns into a retry instead of a stuck
	// call.
	DefaultTimeout = 30 * time.Second
)

// maxBody bounds an answer's body; the API's are a few kilobytes.
const maxBody = 8 << 20

// Client calls one oncepay service as one tenant. It is safe for concurrent
// use; make one and share it, so its connections are reused.
type Client struct {
	baseURL     string
	apiKey      string
	http        *http.Client
	maxAttempts int
	backoffBase time.Duration
	backoffCap  time.Duration
	onRetry     func(attempt int, wait time.Duration, err error)
}

// Option configures a Client in New.
type Option func(*Client)

// WithHTTPClient sets the *http.Client that sends every attempt. Its Timeout,
// if any, bounds each attempt; the context passed to a call bounds the whole
// call, retries included.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.http = hc
		}
	}
}

// WithMaxAttempts bounds the HTTP attempts of one call, the first included;
// 1 turns retries off. Values below 1 count as 1.
func WithMaxAttempts(n int) Option {
	return func(c *Client) { c.maxAttempts = max(n, 1) }
}

// WithBackoff sets the first wait between attempts and the cap of the
// exponential growth, for answers without Retry-After. Non-positive values
// keep the defaults.
func WithBackoff(base, ceiling time.Duration) Option {
	return func(c *Client) {
		if base > 0 {
			c.backoffBase = base
		}
		if ceiling > 0 {
			c.backoffCap = ceiling
		}
	}
}

// WithOnRetry registers f, called before each retry with the number of the
// attempt that failed (1 for the first), the wait before the next one, and
// that attempt's error: an *Error or a network error. Load tools count retries
// with it. f runs on the goroutine of the call and delays the retry while it
// runs; calls made concurrently may run f concurrently.
func WithOnRetry(f func(attempt int, wait time.Duration, err error)) Option {
	return func(c *Client) { c.onRetry = f }
}

// New returns a client of the service at baseURL (e.g.
// "http://127.0.0.1:8080"; a path prefix is kept) that authenticates with
// apiKey, which names the tenant.
func New(baseURL, apiKey string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("oncepay: base URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("oncepay: base URL %q: want http:// or https:// and a host", baseURL)
	}
	if apiKey == "" {
		return nil, errors.New("oncepay: empty API key")
	}
	c := &Client{
		baseURL:     strings.TrimRight(baseURL, "/"),
		apiKey:      apiKey,
		http:        &http.Client{Timeout: DefaultTimeout},
		maxAttempts: DefaultMaxAttempts,
		backoffBase: DefaultBackoffBase,
		backoffCap:  DefaultBackoffCap,
	}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// CallOption configures one idempotent call (a POST).
type CallOption func(*callConfig)

type callConfig struct {
	key string
}

// WithIdempotencyKey makes a call use key instead of a fresh one. Pass the
// key of an earlier call of the same intent to resume it, e.g. after a crash
// of the caller or after Retryable said the outcome was still open. A key is
// 1 to 255 visible ASCII characters; the call fails before sending otherwise.
func WithIdempotencyKey(key string) CallOption {
	return func(c *callConfig) { c.key = key }
}

// ListProducts returns the tenant's catalog.
func (c *Client) ListProducts(ctx context.Context) ([]Product, error) {
	var out struct {
		Data []Product `json:"data"`
	}
	if _, err := c.do(ctx, http.MethodGet, "/v1/products", nil, nil, "", &out); err != nil {
		return nil, err
	}
	return out.Data, nil
}

// CreateOrder creates an order (POST /v1/orders). Every attempt of the call
// carries the same key, so at most one order is created however often the
// call retries.
func (c *Client) CreateOrder(ctx context.Context, req CreateOrderRequest, opts ...CallOption) (*Order, Meta, error) {
	var o Order
	meta, err := c.post(ctx, "/v1/orders", req, &o, opts)
	if err != nil {
		return nil, meta, err
	}
	return &o, meta, nil
}

// GetOrder returns one of the tenant's orders as it is now. Another tenant's
// order is not_found, like a missing one.
func (c *Client) GetOrder(ctx context.Context, id string) (*Order, error) {
	if id == "" {
		return nil, errors.New("oncepay: GetOrder: empty order id")
	}
	var o Order
	if _, err := c.do(ctx, http.MethodGet, "/v1/orders/"+url.PathEscape(id), nil, nil, "", &o); err != nil {
		return nil, err
	}
	return &o, nil
}

// ListOrders returns one page of the tenant's orders, newest first.
func (c *Client) ListOrders(ctx context.Context, opt ListOptions) (*OrderList, error) {
	var out OrderList
	if _, err := c.do(ctx, http.MethodGet, "/v1/orders", opt.query(), nil, "", &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Pay charges an order with a payment method (POST /v1/orders/{id}/payments).
// A declined card is an *Error with CodeCardDeclined, final under its key: a
// new attempt needs a new key. When the provider's answer is unknown the
// server says 503 payment_provider_unavailable, and the call's retry with the
// same key resumes the same attempt at the provider: one charge at most.
func (c *Client) Pay(ctx context.Context, orderID, paymentMethod string, opts ...CallOption) (*Payment, Meta, error) {
	if orderID == "" {
		return nil, Meta{}, errors.New("oncepay: Pay: empty order id")
	}
	body := struct {
		PaymentMethod string `json:"payment_method"`
	}{paymentMethod}
	var p Payment
	meta, err := c.post(ctx, "/v1/orders/"+url.PathEscape(orderID)+"/payments", body, &p, opts)
	if err != nil {
		return nil, meta, err
	}
	return &p, meta, nil
}

// CancelOrderRequest is the optional body of CancelOrder.
type CancelOrderRequest struct {
	// Reason is why the order is given up (at most 200 characters); it
	// travels with the order.cancelled event.
	Reason string `json:"reason,omitempty"`
}

// CancelOrder gives an order up: an order awaiting its payment, with no
// payment at the provider, becomes cancelled and can no longer be paid. A
// paid order, or one whose payment's outcome is not known yet, is refused
// with CodeOrderNotCancellable (409); cancelling a cancelled order answers
// the order. Like every POST it runs at most once per idempotency key.
func (c *Client) CancelOrder(ctx context.Context, orderID string, req CancelOrderRequest, opts ...CallOption) (*Order, Meta, error) {
	if orderID == "" {
		return nil, Meta{}, errors.New("oncepay: CancelOrder: empty order id")
	}
	var o Order
	meta, err := c.post(ctx, "/v1/orders/"+url.PathEscape(orderID)+"/cancel", req, &o, opts)
	if err != nil {
		return nil, meta, err
	}
	return &o, meta, nil
}

// GetPayment returns one of the tenant's payments as it is now, with the
// amount refunded so far.
func (c *Client) GetPayment(ctx context.Context, id string) (*Payment, error) {
	if id == "" {
		return nil, errors.New("oncepay: GetPayment: empty payment id")
	}
	var p Payment
	if _, err := c.do(ctx, http.MethodGet, "/v1/payments/"+url.PathEscape(id), nil, nil, "", &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// LookupKey asks what became of one of the tenant's idempotency keys of
// operation (e.g. "payments.create"), without sending the request again
// (GET /v1/idempotency-keys/{operation}/{key}): for a caller that lost an
// answer and no longer holds the request, or must not repeat it. Another
// tenant's key is KeyUnknown, like a key never used.
func (c *Client) LookupKey(ctx context.Context, operation, key string) (*KeyStatus, error) {
	if operation == "" || key == "" {
		return nil, errors.New("oncepay: LookupKey: empty operation or key")
	}
	var k KeyStatus
	if _, err := c.do(ctx, http.MethodGet, "/v1/idempotency-keys/"+url.PathEscape(operation)+"/"+url.PathEscape(key), nil, nil, "", &k); err != nil {
		return nil, err
	}
	return &k, nil
}

// CancelPaymentByKey gives up on the payment of orderID asked for under
// paymentKey, whatever became of that request
// (POST /v1/payments/cancel-by-key): for a caller whose Pay timed out and
// that would rather void than retry. Cancellation.Outcome says what the
// cancel did: CancelPrevented (the request had not arrived, and never runs),
// CancelRequested (the outcome was unknown: a charge that succeeds is
// refunded), CancelRefundStarted (it had succeeded: refunded in full) or
// CancelNothingToCancel. A payment still being started is an *Error with
// CodeRequestInProgress, retryable. Like every POST it runs at most once per
// idempotency key (the cancel's own, not paymentKey).
func (c *Client) CancelPaymentByKey(ctx context.Context, orderID, paymentKey string, opts ...CallOption) (*Cancellation, Meta, error) {
	if orderID == "" || paymentKey == "" {
		return nil, Meta{}, errors.New("oncepay: CancelPaymentByKey: empty order id or payment key")
	}
	body := struct {
		OrderID        string `json:"order_id"`
		IdempotencyKey string `json:"idempotency_key"`
	}{orderID, paymentKey}
	var out Cancellation
	meta, err := c.post(ctx, "/v1/payments/cancel-by-key", body, &out, opts)
	if err != nil {
		return nil, meta, err
	}
	return &out, meta, nil
}

// Refund gives back amount (minor units) of a payment
// (POST /v1/payments/{id}/refunds). Two refunds of the same amount are two
// intents with two keys; retries of one are one refund. More than what
// remains is an *Error with CodeRefundExceedsPayment.
func (c *Client) Refund(ctx context.Context, paymentID string, amount int64, opts ...CallOption) (*Refund, Meta, error) {
	if paymentID == "" {
		return nil, Meta{}, errors.New("oncepay: Refund: empty payment id")
	}
	body := struct {
		Amount int64 `json:"amount"`
	}{amount}
	var r Refund
	meta, err := c.post(ctx, "/v1/payments/"+url.PathEscape(paymentID)+"/refunds", body, &r, opts)
	if err != nil {
		return nil, meta, err
	}
	return &r, meta, nil
}

// GetRefund returns one of the tenant's refunds as it is now.
func (c *Client) GetRefund(ctx context.Context, id string) (*Refund, error) {
	if id == "" {
		return nil, errors.New("oncepay: GetRefund: empty refund id")
	}
	var r Refund
	if _, err := c.do(ctx, http.MethodGet, "/v1/refunds/"+url.PathEscape(id), nil, nil, "", &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// ListEvents returns one page of the tenant's outbox events, newest first.
func (c *Client) ListEvents(ctx context.Context, opt ListOptions) (*EventList, error) {
	var out EventList
	if _, err := c.do(ctx, http.MethodGet, "/v1/events", opt.query(), nil, "", &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (o ListOptions) query() url.Values {
	q := url.Values{}
	if o.Limit != 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	return q
}

// post runs one idempotent call: it picks the call's key once, before the
// first attempt, and every attempt sends it.
func (c *Client) post(ctx context.Context, path string, in, out any, opts []CallOption) (Meta, error) {
	var cfg callConfig
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.key == "" {
		cfg.key = NewIdempotencyKey()
	} else if !validKey(cfg.key) {
		return Meta{IdempotencyKey: cfg.key}, errKeyInvalid
	}
	body, err := json.Marshal(in)
	if err != nil {
		return Meta{IdempotencyKey: cfg.key}, fmt.Errorf("oncepay: POST %s: encode request: %w", path, err)
	}
	return c.do(ctx, http.MethodPost, path, nil, body, cfg.key, out)
}

// do runs a call: attempts until a definite answer, the attempt bound, a
// Retry-After beyond what the client waits on its own, or the end of ctx.
// A 2xx body is decoded into out. key is empty for a GET.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body []byte, key string, out any) (Meta, error) {
	target := c.baseURL + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	var meta Meta
	for attempt := 1; ; attempt++ {
		// Meta describes the last attempt: after a final network error it
		// holds no status, because no answer arrived.
		meta = Meta{IdempotencyKey: key, Attempts: attempt}
		status, header, raw, err := c.once(ctx, method, target, body, key)
		if err != nil {
			var t *transportError
			switch {
			case ctx.Err() != nil: // the caller's end, not the network's
				return meta, fmt.Errorf("oncepay: %s %s: %w", method, path, err)
			case !errors.As(err, &t):
				return meta, fmt.Errorf("oncepay: %s %s: %w", method, path, err)
			case !retryableTransport(t.err): // unwrapped: Retryable says false
				return meta, fmt.Errorf("oncepay: %s %s: %w", method, path, t.err)
			}
			err = t
		} else {
			meta.Status = status
			meta.Replayed = header.Get("Idempotent-Replayed") == "true"
			meta.Expires, _ = http.ParseTime(header.Get("Idempotency-Expires"))
			meta.Location = header.Get("Location")
			meta.RequestID = header.Get("X-Request-Id")
			if status >= 200 && status <= 299 {
				if out != nil {
					if err := json.Unmarshal(raw, out); err != nil {
						return meta, fmt.Errorf("oncepay: %s %s: decode %d answer: %w", method, path, status, err)
					}
				}
				return meta, nil
			}
			apiErr := decodeError(status, header, raw, meta)
			if !apiErr.retryable() {
				return meta, apiErr
			}
			err = apiErr
		}

		// The outcome is open; err says why. Retry with the same key, if the
		// bounds allow.
		if attempt >= c.maxAttempts {
			return meta, fmt.Errorf("oncepay: %s %s: gave up (attempts: %d): %w", method, path, attempt, err)
		}
		var retryAfter time.Duration
		var apiErr *Error
		if errors.As(err, &apiErr) {
			retryAfter = apiErr.RetryAfter
		}
		if retryAfter > maxRetryAfter {
			return meta, fmt.Errorf("oncepay: %s %s: the server asks to retry in %v, longer than the client waits: %w", method, path, retryAfter, err)
		}
		wait := backoff(attempt, c.backoffBase, c.backoffCap, retryAfter, rand.Float64()) // #nosec G404 -- retry jitter; nothing depends on it being unpredictable
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			// Sleeping into the deadline cannot help; the caller gets the
			// answer now and keeps the key (Meta) to resume later.
			return meta, fmt.Errorf("oncepay: %s %s: the next attempt (in %v) would pass the context's deadline: %w", method, path, wait, err)
		}
		if c.onRetry != nil {
			c.onRetry(attempt, wait, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return meta, fmt.Errorf("oncepay: %s %s: %w (attempts: %d): %w", method, path, ctx.Err(), attempt, err)
		case <-t.C:
		}
	}
}

// once sends one attempt and reads its whole answer. A failure to exchange
// the request and the answer, a read that fails midway included, is a
// *transportError: the answer may have been lost, and a retry with the same
// key replays it. Any other error is final.
func (c *Client) once(ctx context.Context, method, target string, body []byte, key string) (int, http.Header, []byte, error) {
	var rd io.Reader = http.NoBody
	if body != nil {
		rd = bytes.NewReader(body) // lets the transport re-send it (GetBody)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.apiKey)
	req.Header.Set("Accept", "application/json, application/problem+json")
	req.Header.Set("User-Agent", "oncepay-go-client")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return 0, nil, nil, &transportError{err: err}
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxBody+1))
	if err != nil {
		return 0, nil, nil, &transportError{err: fmt.Errorf("read %d answer: %w", res.StatusCode, err)}
	}
	if len(raw) > maxBody {
		return 0, nil, nil, fmt.Errorf("read %d answer: body larger than %d bytes", res.StatusCode, maxBody)
	}
	return res.StatusCode, res.Header, raw, nil
}
