package client_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/client"
)

// seen is one request as the scripted server received it.
type seen struct {
	method, path, query string
	key, auth, ctype    string
	body                string
}

// scripted is a test server that answers the n-th request with the n-th
// step (the last step repeats) and records what it received.
type scripted struct {
	*httptest.Server
	mu    sync.Mutex
	reqs  []seen
	steps []http.HandlerFunc
}

func newScripted(t *testing.T, steps ...http.HandlerFunc) *scripted {
	t.Helper()
	s := &scripted{steps: steps}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		n := len(s.reqs)
		s.reqs = append(s.reqs, seen{
			method: r.Method, path: r.URL.EscapedPath(), query: r.URL.RawQuery,
			key: r.Header.Get("Idempotency-Key"), auth: r.Header.Get("Authorization"),
			ctype: r.Header.Get("Content-Type"), body: string(body),
		})
		s.mu.Unlock()
		s.steps[min(n, len(s.steps)-1)](w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *scripted) requests() []seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seen(nil), s.reqs...)
}

// newClient returns a client of s with short backoffs and its own transport,
// so the first attempt always runs on a fresh connection and every retry
// seen is the client's own, not the transport's re-send on a reused
// connection.
func newClient(t *testing.T, s *scripted, opts ...client.Option) *client.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	opts = append([]client.Option{
		client.WithHTTPClient(&http.Client{Transport: tr, Timeout: 10 * time.Second}),
		client.WithBackoff(time.Millisecond, 5*time.Millisecond),
	}, opts...)
	c, err := client.New(s.URL, "sk_test_acme", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// retries records the OnRetry calls of a client.
type retries struct {
	attempts []int
	waits    []time.Duration
	errs     []error
}

func (r *retries) option() client.Option {
	return client.WithOnRetry(func(attempt int, wait time.Duration, err error) {
		r.attempts = append(r.attempts, attempt)
		r.waits = append(r.waits, wait)
		r.errs = append(r.errs, err)
	})
}

func problem(status int, code, retryAfter string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"type":"urn:oncepay:problem:`+code+`","title":"`+http.StatusText(status)+`","status":`+strconv.Itoa(status)+`,"detail":"scripted","code":"`+code+`"}`)
	}
}

func answer(status int, ctype, body string, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.Header().Set("Content-Type", ctype)
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

const orderJSON = `{"id":"0197a3c2-0000-7000-8000-000000000001","status":"awaiting_payment","currency":"EUR","amount_total":3600,"items":[{"sku":"travel-mug","name":"Travel mug","quantity":2,"unit_amount":1800,"amount":3600}],"created_at":"2026-01-02T03:04:05.123456Z"}`

func created(body string) http.HandlerFunc {
	return answer(http.StatusCreated, "application/json", body)
}

// drop reads the request and closes the connection without an answer: the
// server may have done the work, the client cannot know.
func drop(w http.ResponseWriter, _ *http.Request) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	conn.Close()
}

// truncate sends the status line, headers and part of the body, then closes
// the connection: the answer is lost midway.
func truncate(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(orderJSON)))
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, orderJSON[:10])
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		panic(err)
	}
	conn, buf, err := rc.Hijack()
	if err != nil {
		panic(err)
	}
	_ = buf.Flush()
	conn.Close()
}

func order() client.CreateOrderRequest {
	return client.CreateOrderRequest{Currency: "EUR", Items: []client.LineItem{{SKU: "travel-mug", Quantity: 2}}}
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestClientRetries5xxWithTheSameKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		first http.HandlerFunc
		code  string
	}{
		{"503 payment_provider_unavailable", problem(503, "payment_provider_unavailable", ""), "payment_provider_unavailable"},
		{"500 internal_error", problem(500, "internal_error", ""), "internal_error"},
		{"502 from a proxy", answer(502, "text/html", "<html>bad gateway</html>"), ""},
		{"504 without a body", answer(504, "text/plain", ""), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newScripted(t, tc.first, created(orderJSON))
			var r retries
			c := newClient(t, s, r.option())
			o, meta, err := c.CreateOrder(context.Background(), order())
			if err != nil {
				t.Fatalf("CreateOrder: %v", err)
			}
			if o.Status != "awaiting_payment" || o.AmountTotal != 3600 || len(o.Items) != 1 || o.Items[0].Amount != 3600 {
				t.Fatalf("order = %+v", o)
			}
			reqs := s.requests()
			if len(reqs) != 2 {
				t.Fatalf("server saw %d requests, want 2", len(reqs))
			}
			if reqs[0].key != reqs[1].key || !uuidV4.MatchString(reqs[0].key) {
				t.Fatalf("keys = %q, %q; want one UUIDv4 on both attempts", reqs[0].key, reqs[1].key)
			}
			if reqs[0].body != reqs[1].body || reqs[0].body != `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":2}]}` {
				t.Fatalf("bodies = %s, %s", reqs[0].body, reqs[1].body)
			}
			if meta.IdempotencyKey != reqs[0].key || meta.Attempts != 2 || meta.Status != 201 || meta.Replayed {
				t.Fatalf("meta = %+v", meta)
			}
			if len(r.attempts) != 1 || r.attempts[0] != 1 {
				t.Fatalf("OnRetry attempts = %v, want [1]", r.attempts)
			}
			var e *client.Error
			if !errors.As(r.errs[0], &e) || e.Code != tc.code || !client.Retryable(r.errs[0]) {
				t.Fatalf("OnRetry err = %v, want an *Error with code %q", r.errs[0], tc.code)
			}
		})
	}
}

func TestClientRetriesADroppedConnection(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		first http.HandlerFunc
	}{
		{"dropped before the answer", drop},
		{"dropped midway through the answer", truncate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newScripted(t, tc.first, created(`{"id":"pay_1","order_id":"ord_1","status":"succeeded","amount":3600,"currency":"EUR","payment_method":"pm_card_ok","provider_charge_id":"ch_1","failure_code":null,"amount_refunded":0,"created_at":"2026-01-02T03:04:05Z"}`))
			var r retries
			c := newClient(t, s, r.option())
			p, meta, err := c.Pay(context.Background(), "ord_1", client.PaymentMethodOK)
			if err != nil {
				t.Fatalf("Pay: %v", err)
			}
			if p.Status != client.StatusSucceeded || p.ProviderChargeID != "ch_1" || p.FailureCode != "" {
				t.Fatalf("payment = %+v", p)
			}
			reqs := s.requests()
			if len(reqs) != 2 || reqs[0].key != reqs[1].key || reqs[0].key != meta.IdempotencyKey {
				t.Fatalf("requests = %+v, meta key %q; want two attempts under one key", reqs, meta.IdempotencyKey)
			}
			if reqs[1].path != "/v1/orders/ord_1/payments" || reqs[1].body != `{"payment_method":"pm_card_ok"}` || reqs[1].ctype != "application/json" {
				t.Fatalf("request = %+v", reqs[1])
			}
			var e *client.Error
			if len(r.errs) != 1 || errors.As(r.errs[0], &e) || !client.Retryable(r.errs[0]) {
				t.Fatalf("OnRetry errs = %v, want one network error", r.errs)
			}
		})
	}
}

func TestClientHonoursRetryAfterOfRequestInProgress(t *testing.T) {
	t.Parallel()
	s := newScripted(t, problem(409, "request_in_progress", "1"), created(orderJSON))
	var r retries
	c := newClient(t, s, r.option())
	start := time.Now()
	_, meta, err := c.CreateOrder(context.Background(), order())
	if err != nil {
		t.Fatalf("CreateOrder: %v", err)
	}
	if len(r.waits) != 1 || r.waits[0] < time.Second {
		t.Fatalf("OnRetry waits = %v, want one wait of at least Retry-After (1s)", r.waits)
	}
	if d := time.Since(start); d < time.Second {
		t.Fatalf("call took %v, less than Retry-After", d)
	}
	if !client.IsCode(r.errs[0], client.CodeRequestInProgress) {
		t.Fatalf("OnRetry err = %v", r.errs[0])
	}
	if reqs := s.requests(); len(reqs) != 2 || reqs[0].key != reqs[1].key || meta.Attempts != 2 {
		t.Fatalf("requests = %+v, meta %+v", reqs, meta)
	}
}

func TestClientNeverRetriesADefiniteAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status   int
		code     string
		replayed bool
	}{
		{422, "idempotency_key_reused", false},
		{402, "card_declined", true},
		{409, "order_already_paid", true},
		{409, "payment_not_refundable", false},
		{409, "awaiting_operator", false}, // only an operator moves it on
		{422, "refund_exceeds_payment", false},
		{400, "idempotency_key_invalid", false},
		{404, "not_found", false},
		{401, "unauthorized", false},
	} {
		t.Run(tc.code, func(t *testing.T) {
			t.Parallel()
			p := problem(tc.status, tc.code, "")
			if tc.replayed {
				inner := p
				p = func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Idempotent-Replayed", "true")
					w.Header().Set("Idempotency-Expires", "Sun, 06 Dec 2026 21:24:18 GMT")
					inner(w, r)
				}
			}
			s := newScripted(t, p, created(`{}`))
			var r retries
			c := newClient(t, s, r.option())
			_, meta, err := c.Refund(context.Background(), "pay_1", 500)
			var e *client.Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want an *Error", err)
			}
			if e.Status != tc.status || e.Code != tc.code || e.Detail != "scripted" || e.Title != http.StatusText(tc.status) || e.Type != "urn:oncepay:problem:"+tc.code {
				t.Fatalf("error = %+v", e)
			}
			if !client.IsCode(err, tc.code) || client.Retryable(err) {
				t.Fatalf("IsCode = %v, Retryable = %v", client.IsCode(err, tc.code), client.Retryable(err))
			}
			if n := len(s.requests()); n != 1 || len(r.attempts) != 0 || meta.Attempts != 1 {
				t.Fatalf("requests = %d, retries = %d, meta.Attempts = %d; want 1, 0, 1", n, len(r.attempts), meta.Attempts)
			}
			if e.Replayed != tc.replayed || meta.Replayed != tc.replayed || e.IdempotencyKey != meta.IdempotencyKey || meta.IdempotencyKey == "" {
				t.Fatalf("error %+v, meta %+v", e, meta)
			}
			if tc.replayed && meta.Expires.IsZero() {
				t.Fatalf("meta.Expires not parsed")
			}
		})
	}
}

func TestClientDecodesFieldErrors(t *testing.T) {
	t.Parallel()
	s := newScripted(t, answer(422, "application/problem+json",
		`{"type":"urn:oncepay:problem:validation_failed","title":"Unprocessable Entity","status":422,"detail":"The request has invalid fields.","code":"validation_failed","errors":[{"field":"items[0].quantity","message":"must be between 1 and 1000"}]}`))
	c := newClient(t, s)
	_, _, err := c.CreateOrder(context.Background(), client.CreateOrderRequest{Currency: "EUR", Items: []client.LineItem{{SKU: "travel-mug", Quantity: 0}}})
	var e *client.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v", err)
	}
	if len(e.Fields) != 1 || e.Fields[0] != (client.FieldError{Field: "items[0].quantity", Message: "must be between 1 and 1000"}) {
		t.Fatalf("fields = %+v", e.Fields)
	}
	if got, want := err.Error(), "oncepay: 422 validation_failed: The request has invalid fields.; items[0].quantity: must be between 1 and 1000"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

func TestClientContextCancelStopsRetries(t *testing.T) {
	t.Parallel()
	s := newScripted(t, problem(503, "payment_provider_unavailable", "1"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	c := newClient(t, s, client.WithOnRetry(func(int, time.Duration, error) {
		calls++
		cancel() // the caller gives up while the client waits for Retry-After
	}))
	start := time.Now()
	_, meta, err := c.Pay(ctx, "ord_1", client.PaymentMethodOK)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if !client.IsCode(err, client.CodePaymentProviderUnavailable) || !client.Retryable(err) {
		t.Fatalf("err = %v, want the last answer wrapped and the outcome open", err)
	}
	if d := time.Since(start); d >= time.Second {
		t.Fatalf("call took %v: it waited out Retry-After after the cancel", d)
	}
	if n := len(s.requests()); n != 1 || calls != 1 || meta.Attempts != 1 || meta.IdempotencyKey == "" {
		t.Fatalf("requests = %d, retries = %d, meta = %+v", n, calls, meta)
	}
}

func TestClientDoesNotWaitPastTheDeadline(t *testing.T) {
	t.Parallel()
	s := newScripted(t, problem(503, "payment_provider_unavailable", "30"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var r retries
	c := newClient(t, s, r.option())
	_, _, err := c.Pay(ctx, "ord_1", client.PaymentMethodOK)
	if ctx.Err() != nil {
		t.Fatal("the call ran into its deadline instead of returning at once")
	}
	var e *client.Error
	if !errors.As(err, &e) || e.RetryAfter != 30*time.Second || !client.Retryable(err) {
		t.Fatalf("err = %v, want the 503 with RetryAfter 30s", err)
	}
	if n := len(s.requests()); n != 1 || len(r.attempts) != 0 {
		t.Fatalf("requests = %d, retries = %d; want 1, 0", n, len(r.attempts))
	}
}

// The contract's Retry-After policy (docs/CONTRACT.md, "Retry-After"): up
// to a minute the client waits at least that long on its own; past a
// minute it does not wait but returns the answer, with the server's
// RetryAfter and the key, for its caller to retry then. The web UI's side
// is internal/app TestBrowser/LongRetryAfterIsLeftToTheUser.
func TestClientLeavesLongRetryAfterToTheCaller(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		retryAfter string
		want       time.Duration
	}{
		{"61", 61 * time.Second},
		{"3600", time.Hour},
	} {
		s := newScripted(t, problem(503, "service_unavailable", tc.retryAfter))
		var r retries
		c := newClient(t, s, r.option())
		_, meta, err := c.CreateOrder(context.Background(), order())
		var e *client.Error
		if !errors.As(err, &e) || e.RetryAfter != tc.want || !client.Retryable(err) || e.IdempotencyKey == "" || e.IdempotencyKey != meta.IdempotencyKey {
			t.Fatalf("Retry-After %s: err = %v, want the retryable 503 with RetryAfter %v and the key to retry with", tc.retryAfter, err, tc.want)
		}
		if n := len(s.requests()); n != 1 || len(r.waits) != 0 {
			t.Fatalf("Retry-After %s: requests = %d, waits = %v; want 1 and none", tc.retryAfter, n, r.waits)
		}
	}

	// A minute is still waited for, at least the minute: the wait is
	// cut short here by cancelling the call once the client announced it.
	s := newScripted(t, problem(503, "service_unavailable", "60"), created(orderJSON))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var waits []time.Duration
	c := newClient(t, s, client.WithOnRetry(func(_ int, wait time.Duration, _ error) {
		waits = append(waits, wait)
		cancel()
	}))
	if _, _, err := c.CreateOrder(ctx, order()); !errors.Is(err, context.Canceled) {
		t.Fatalf("Retry-After 60: err = %v, want the call cancelled during its wait", err)
	}
	if len(waits) != 1 || waits[0] < time.Minute {
		t.Fatalf("Retry-After 60: waits = %v, want one of at least a minute", waits)
	}
}

func TestClientGivesUpAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	s := newScripted(t, problem(503, "payment_provider_unavailable", ""))
	var r retries
	c := newClient(t, s, client.WithMaxAttempts(3), r.option())
	_, meta, err := c.Pay(context.Background(), "ord_1", client.PaymentMethodOK)
	if !client.IsCode(err, client.CodePaymentProviderUnavailable) || !client.Retryable(err) {
		t.Fatalf("err = %v", err)
	}
	reqs := s.requests()
	if len(reqs) != 3 || meta.Attempts != 3 {
		t.Fatalf("requests = %d, meta.Attempts = %d; want 3", len(reqs), meta.Attempts)
	}
	for _, r := range reqs {
		if r.key != meta.IdempotencyKey {
			t.Fatalf("key %q, want %q on every attempt", r.key, meta.IdempotencyKey)
		}
	}
	if len(r.attempts) != 2 || r.attempts[0] != 1 || r.attempts[1] != 2 {
		t.Fatalf("OnRetry attempts = %v, want [1 2]", r.attempts)
	}
	for _, w := range r.waits {
		if w > 5*time.Millisecond {
			t.Fatalf("wait %v above the backoff cap", w)
		}
	}
}

func TestClientKeysAreOnePerCall(t *testing.T) {
	t.Parallel()
	s := newScripted(t, created(orderJSON))
	c := newClient(t, s)
	ctx := context.Background()
	_, m1, err := c.CreateOrder(ctx, order())
	if err != nil {
		t.Fatal(err)
	}
	_, m2, err := c.CreateOrder(ctx, order())
	if err != nil {
		t.Fatal(err)
	}
	_, m3, err := c.CreateOrder(ctx, order(), client.WithIdempotencyKey("order-7f3a"))
	if err != nil {
		t.Fatal(err)
	}
	reqs := s.requests()
	if reqs[0].key == reqs[1].key || reqs[0].key != m1.IdempotencyKey || reqs[1].key != m2.IdempotencyKey {
		t.Fatalf("keys = %q, %q: want a fresh key per call", reqs[0].key, reqs[1].key)
	}
	if reqs[2].key != "order-7f3a" || m3.IdempotencyKey != "order-7f3a" {
		t.Fatalf("key = %q, want the caller's", reqs[2].key)
	}
	for _, bad := range []string{"with space", string(make([]byte, 256)), "naïve"} {
		_, meta, err := c.CreateOrder(ctx, order(), client.WithIdempotencyKey(bad))
		if err == nil || client.Retryable(err) || meta.IdempotencyKey != bad {
			t.Fatalf("key %q: err = %v, meta %+v; want a local error", bad, err, meta)
		}
	}
	if n := len(s.requests()); n != 3 {
		t.Fatalf("requests = %d, want 3: invalid keys are refused before sending", n)
	}
}

func TestClientReadsIdempotencyHeaders(t *testing.T) {
	t.Parallel()
	s := newScripted(t, answer(200, "application/json", orderJSON,
		"Idempotent-Replayed", "true",
		"Idempotency-Expires", "Sun, 06 Dec 2026 21:24:18 GMT",
		"Location", "/v1/orders/0197a3c2-0000-7000-8000-000000000001",
		"X-Request-Id", "req-1"))
	c := newClient(t, s)
	o, meta, err := c.CreateOrder(context.Background(), order(), client.WithIdempotencyKey("k"))
	if err != nil {
		t.Fatal(err)
	}
	want := client.Meta{
		IdempotencyKey: "k",
		Replayed:       true,
		Expires:        time.Date(2026, 12, 6, 21, 24, 18, 0, time.UTC),
		Status:         200,
		Location:       "/v1/orders/" + o.ID,
		RequestID:      "req-1",
		Attempts:       1,
	}
	if !meta.Expires.Equal(want.Expires) {
		t.Fatalf("Expires = %v, want %v", meta.Expires, want.Expires)
	}
	meta.Expires = want.Expires
	if meta != want {
		t.Fatalf("meta = %+v, want %+v", meta, want)
	}
	if !o.CreatedAt.Equal(time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)) {
		t.Fatalf("created_at = %v", o.CreatedAt)
	}
}

func TestClientGETs(t *testing.T) {
	t.Parallel()
	s := newScripted(t,
		answer(200, "application/json", `{"data":[`+orderJSON+`],"next_cursor":"abc_-"}`),
		answer(200, "application/json", `{"data":[{"id":"e1","type":"order.created","aggregate_type":"order","aggregate_id":"o1","idempotency_key":"k","occurred_at":"2026-01-02T03:04:05Z","published_at":null,"attempts":0,"last_error":null,"payload":{"id":"o1"}}],"next_cursor":null}`),
		answer(200, "application/json", `{"data":[{"sku":"travel-mug","name":"Travel mug","unit_amount":1800,"currency":"EUR","stock":50}],"next_cursor":null}`),
		problem(404, "not_found", ""),
	)
	var r retries
	c := newClient(t, s, r.option())
	ctx := context.Background()
	orders, err := c.ListOrders(ctx, client.ListOptions{Limit: 1, Cursor: "a b"})
	if err != nil {
		t.Fatal(err)
	}
	if len(orders.Data) != 1 || orders.NextCursor != "abc_-" {
		t.Fatalf("orders = %+v", orders)
	}
	events, err := c.ListEvents(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(events.Data) != 1 || events.NextCursor != "" || events.Data[0].PublishedAt != nil || string(events.Data[0].Payload) != `{"id":"o1"}` {
		t.Fatalf("events = %+v", events)
	}
	products, err := c.ListProducts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(products) != 1 || products[0] != (client.Product{SKU: "travel-mug", Name: "Travel mug", UnitAmount: 1800, Currency: "EUR", Stock: 50}) {
		t.Fatalf("products = %+v", products)
	}
	_, err = c.GetPayment(ctx, "pay/1")
	if !client.IsCode(err, client.CodeNotFound) || len(r.attempts) != 0 {
		t.Fatalf("err = %v, retries %d; want not_found, not retried", err, len(r.attempts))
	}
	reqs := s.requests()
	wantReqs := []seen{
		{method: "GET", path: "/v1/orders", query: "cursor=a+b&limit=1", auth: "Bearer sk_test_acme"},
		{method: "GET", path: "/v1/events", auth: "Bearer sk_test_acme"},
		{method: "GET", path: "/v1/products", auth: "Bearer sk_test_acme"},
		{method: "GET", path: "/v1/payments/pay%2F1", auth: "Bearer sk_test_acme"},
	}
	if len(reqs) != len(wantReqs) {
		t.Fatalf("requests = %+v", reqs)
	}
	for i := range reqs {
		if reqs[i] != wantReqs[i] {
			t.Fatalf("request %d = %+v, want %+v", i, reqs[i], wantReqs[i])
		}
	}
}

func TestClientNew(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, key string }{
		{"127.0.0.1:8080", "sk"},
		{"ftp://example.com", "sk"},
		{"http://", "sk"},
		{"http://127.0.0.1:8080", ""},
	} {
		if _, err := client.New(tc.url, tc.key); err == nil {
			t.Fatalf("New(%q, %q) succeeded", tc.url, tc.key)
		}
	}
	// A path prefix and a trailing slash are kept and trimmed.
	s := newScripted(t, answer(200, "application/json", `{"data":[]}`))
	c, err := client.New(s.URL+"/api/", "sk")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListProducts(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p := s.requests()[0].path; p != "/api/v1/products" {
		t.Fatalf("path = %q", p)
	}
}

func TestClientNewIdempotencyKey(t *testing.T) {
	t.Parallel()
	seenKeys := map[string]bool{}
	for range 1000 {
		k := client.NewIdempotencyKey()
		if !uuidV4.MatchString(k) || seenKeys[k] {
			t.Fatalf("key %q: not a fresh UUIDv4", k)
		}
		seenKeys[k] = true
	}
}

func TestClientDoesNotRetryAnUntrustedCertificate(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		t.Error("a request passed the certificate check")
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
	srv.StartTLS()
	t.Cleanup(srv.Close)
	var r retries
	c, err := client.New(srv.URL, "sk_test_acme", r.option()) // the default client trusts no test CA
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = c.CreateOrder(context.Background(), order())
	if err == nil || client.Retryable(err) || len(r.attempts) != 0 {
		t.Fatalf("err = %v, retries = %d; want a final error, not retried", err, len(r.attempts))
	}
}
