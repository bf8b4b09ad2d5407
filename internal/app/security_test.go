package app_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/httpapi"
)

// httpSeries returns the series of the HTTP latency histogram (its _count
// lines: one per label set) that /metrics holds now.
func (b *testBundle) httpSeries(t *testing.T) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for s, v := range b.scrape(t) {
		if strings.HasPrefix(s, "oncepay_http_request_duration_seconds_count{") {
			out[s] = v
		}
	}
	return out
}

// Every label of the HTTP histogram comes from a bounded set, whatever the
// requests: made-up methods count as OTHER, paths that match no route as
// one fixed route, and paths under a route as its template. So a hundred
// made-up methods and paths add no series once each kind has been seen.
func TestMetricLabelsAreBoundedWhateverTheRequest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	send := func(method, path string) {
		t.Helper()
		req, err := http.NewRequest(method, b.baseURL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := b.client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		res.Body.Close()
	}
	kinds := func(i int) {
		send(fmt.Sprintf("MADEUP%d", i), "/v1/orders")            // a method nobody defined
		send(strings.Repeat("X", 1000)+fmt.Sprint(i), "/healthz") // a long one
		send(http.MethodGet, fmt.Sprintf("/no/such/path/%d", i))  // no route
		send(http.MethodGet, fmt.Sprintf("/v1/orders/%d", i))     // a route's template
		send(http.MethodGet, fmt.Sprintf("/assets/missing-%d.js", i))
	}
	kinds(0)
	b.httpSeries(t) // the scrape's own series
	before := b.httpSeries(t)
	for i := 1; i <= 20; i++ {
		kinds(i)
	}
	after := b.httpSeries(t)
	for s := range after {
		if _, ok := before[s]; !ok {
			t.Errorf("new series after made-up requests: %s", s)
		}
	}
	if len(after) != len(before) {
		t.Fatalf("series: %d before, %d after the made-up requests", len(before), len(after))
	}
	for _, want := range []string{
		`oncepay_http_request_duration_seconds_count{method="OTHER",route="/v1/orders",status="405"}`,
		`oncepay_http_request_duration_seconds_count{method="OTHER",route="/healthz",status="405"}`,
		`oncepay_http_request_duration_seconds_count{method="GET",route="/v1/orders/:id",status="401"}`,
	} {
		if after[want] != 21 {
			t.Errorf("%s = %v, want 21", want, after[want])
		}
	}
	for s := range after {
		if strings.Contains(s, "MADEUP") || strings.Contains(s, "XXXX") || strings.Contains(s, "/no/such") || strings.Contains(s, "missing-") {
			t.Errorf("a label holds the request's own text: %s", s)
		}
	}
}

// padTo returns body with spaces after it, n bytes in all.
func padTo(body string, n int) string { return body + strings.Repeat(" ", n-len(body)) }

// The body limit is 65,536 bytes, as the docs and the 413 say, on every
// route that reads a body: a body of exactly that size is read, one byte
// more is 413 request_too_large and nothing is stored.
func TestBodyLimitIsExactly64KiB(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const limit = 65536
	r := b.do(t, "POST", "/v1/orders", acme, "limit-exact", padTo(orderBody, limit))
	if r.status != http.StatusCreated {
		t.Fatalf("a body of %d bytes: status %d, want 201; body %s", limit, r.status, r.body)
	}
	p := wantProblem(t, b.do(t, "POST", "/v1/orders", acme, "limit-over", padTo(orderBody, limit+1)), http.StatusRequestEntityTooLarge, "request_too_large")
	if d, _ := p["detail"].(string); !strings.Contains(d, "65536 bytes") {
		t.Fatalf("detail %q does not name the limit", d)
	}
	wantProblem(t, b.do(t, "POST", "/webhooks/psp", "", "", padTo(`{}`, limit+1)), http.StatusRequestEntityTooLarge, "request_too_large")
	if n := b.count(t, `SELECT count(*) FROM api_idempotency WHERE idempotency_key = 'limit-over'`); n != 0 {
		t.Fatalf("records of the refused request = %d, want 0", n)
	}
}

// partialRequest is a POST whose head announces a body of twice the bytes
// it carries: what a client that hangs up (or stalls) halfway through
// sending sends.
func partialRequest(method, path, apiKey, key, body string) string {
	var head strings.Builder
	fmt.Fprintf(&head, "%s %s HTTP/1.1\r\nHost: oncepay\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", method, path, 2*len(body))
	if apiKey != "" {
		fmt.Fprintf(&head, "Authorization: Bearer %s\r\n", apiKey)
	}
	if key != "" {
		fmt.Fprintf(&head, "Idempotency-Key: %s\r\n", key)
	}
	return head.String() + "\r\n" + body
}

// noServerErrors fails the test when /metrics counted any 5xx answer.
func (b *testBundle) noServerErrors(t *testing.T) {
	t.Helper()
	for s, v := range b.httpSeries(t) {
		if strings.Contains(s, `status="5`) {
			t.Errorf("%s = %v: a 5xx answer", s, v)
		}
	}
}

// A client that hangs up halfway through its body is a client error on
// every route that reads one: logged and counted as 499
// client_closed_request, never as a 500, and nothing is stored, so the same
// key then works for the whole request.
func TestClientHangingUpMidBodyIsAClientError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orderID, _ := b.order(t, "hangup-order")
	for _, tc := range []struct{ method, path, route, apiKey, key, body string }{
		{"POST", "/v1/orders", "/v1/orders", acme, "hangup-1", orderBody},
		{"POST", "/v1/orders/" + orderID + "/payments", "/v1/orders/:id/payments", acme, "hangup-2", `{"payment_method":"pm_card_ok"}`},
		{"POST", "/webhooks/psp", "/webhooks/psp", "", "", `{"id":"evt_1","type":"charge.succeeded"}`},
	} {
		conn, err := net.Dial("tcp", b.addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(conn, partialRequest(tc.method, tc.path, tc.apiKey, tc.key, tc.body)); err != nil {
			t.Fatal(err)
		}
		conn.Close()
		b.waitForSeries(t, 10*time.Second,
			fmt.Sprintf(`oncepay_http_request_duration_seconds_count{method=%q,route=%q,status="499"}`, tc.method, tc.route),
			"the hang-up counted as a client error", atLeast(1))
	}
	b.noServerErrors(t)
	if r := b.do(t, "POST", "/v1/orders", acme, "hangup-1", orderBody); r.status != http.StatusCreated {
		t.Fatalf("the same key after the hang-up: %d %s, want 201", r.status, r.body)
	}
}

// A client slower than the read timeout gets 408 request_timeout (it may
// still be there to read it), and it is counted as that, not as a 500.
func TestClientSlowerThanTheReadTimeoutGets408(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *app.Config) { c.Tuning.ReadTimeout, c.Tuning.BodyReadTimeout = time.Second, time.Second })
	conn, err := net.Dial("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, partialRequest("POST", "/v1/orders", acme, "slow-1", orderBody)); err != nil {
		t.Fatal(err)
	}
	// The rest of the body never comes; the answer must, well within the
	// deadline that keeps a broken server from hanging the test.
	if err := conn.SetReadDeadline(time.Now().Add(15 * time.Second)); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to the stalled request: %v", err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	wantProblem(t, response{status: res.StatusCode, header: res.Header, body: raw}, http.StatusRequestTimeout, "request_timeout")
	b.waitForSeries(t, 10*time.Second, `oncepay_http_request_duration_seconds_count{method="POST",route="/v1/orders",status="408"}`,
		"the stalled request counted as a client error", atLeast(1))
	b.noServerErrors(t)
}

// Member names are matched exactly on every route that reads a body: a
// member that differs from the contract's only by case is an unknown member
// (422 validation_failed naming it), never read into the field it
// resembles, and the same name twice is 400 invalid_json. Nothing of a
// refused request runs: the quantity, the refund amount and the payment
// method stay what the lowercase member said once the request is sent right.
func TestRequestMemberNamesMatchExactly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orderID, _ := b.order(t, "names-order")
	paymentID, _ := b.paidOrder(t)
	for _, tc := range []struct {
		name, method, path, body, status, code, field string
	}{
		{"order quantity", "POST", "/v1/orders", `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":1,"QUANTITY":7}]}`, "422", "validation_failed", "items[0].QUANTITY"},
		{"order currency", "POST", "/v1/orders", `{"Currency":"EUR","items":[{"sku":"travel-mug","quantity":1}]}`, "422", "validation_failed", "Currency"},
		{"order duplicate", "POST", "/v1/orders", `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":1,"quantity":7}]}`, "400", "invalid_json", ""},
		{"payment method", "POST", "/v1/orders/" + orderID + "/payments", `{"payment_method":"pm_card_ok","PAYMENT_METHOD":"pm_card_declined"}`, "422", "validation_failed", "PAYMENT_METHOD"},
		{"payment duplicate", "POST", "/v1/orders/" + orderID + "/payments", `{"payment_method":"pm_card_ok","payment_method":"pm_card_declined"}`, "400", "invalid_json", ""},
		{"refund amount", "POST", "/v1/payments/" + paymentID + "/refunds", `{"amount":1,"AMOUNT":2}`, "422", "validation_failed", "AMOUNT"},
		{"refund duplicate", "POST", "/v1/payments/" + paymentID + "/refunds", `{"amount":1,"amount":2}`, "400", "invalid_json", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := ""
			if tc.method == "POST" {
				key = "names-" + strings.ReplaceAll(tc.name, " ", "-")
			}
			r := b.do(t, tc.method, tc.path, acme, key, tc.body)
			status := map[string]int{"400": 400, "422": 422}[tc.status]
			p := wantProblem(t, r, status, tc.code)
			if tc.field != "" {
				errs, _ := p["errors"].([]any)
				if len(errs) != 1 || errs[0].(map[string]any)["field"] != tc.field || errs[0].(map[string]any)["message"] != "unknown field" {
					t.Fatalf("errors = %v, want %s: unknown field", p["errors"], tc.field)
				}
			}
		})
	}
	if n := b.count(t, `SELECT count(*) FROM api_idempotency WHERE idempotency_key LIKE 'names-%' AND idempotency_key <> 'names-order'`); n != 0 {
		t.Fatalf("refused requests left %d idempotency records, want 0", n)
	}

	// The provider's events are open objects: a member that differs from a
	// known one only by case is ignored like any unknown member, so the
	// event is what its lowercase members say; a name twice is refused.
	open := `{"id":"evt_names","TYPE":"charge.succeeded","data":{"object":{"id":"ch_x","status":"succeeded"}}}`
	r := b.webhook(t, "msg_names_1", open, true)
	p := wantProblem(t, r, http.StatusUnprocessableEntity, "validation_failed")
	if errs, _ := p["errors"].([]any); len(errs) != 1 || errs[0].(map[string]any)["field"] != "type" {
		t.Fatalf("errors = %v, want type (TYPE is not type)", p["errors"])
	}
	dup := `{"id":"evt_names","type":"charge.failed","type":"charge.succeeded","data":{"object":{"id":"ch_x","status":"succeeded"}}}`
	wantProblem(t, b.webhook(t, "msg_names_2", dup, true), http.StatusBadRequest, "invalid_json")
	if n := b.count(t, `SELECT count(*) FROM webhook_receipts WHERE delivery_id LIKE 'msg_names_%'`); n != 0 {
		t.Fatalf("refused deliveries left %d receipts, want 0", n)
	}
}

// Two Authorization headers are refused with 401 on the tenant routes and
// on the operator's, instead of the first one winning silently.
func TestTwoAuthorizationHeadersAreRefused(t *testing.T) {
	t.Parallel()
	const token = "admin-token-of-this-test-0123456789abcdef"
	b := setup(t, func(c *app.Config) { c.AdminToken = token })
	for _, tc := range []struct{ path, first, second string }{
		{"/v1/orders", "Bearer " + acme, "Bearer " + globex},
		{"/v1/orders", "Bearer " + acme, "Bearer " + acme},
		{"/admin/outbox/stuck", "Bearer " + token, "Bearer " + token},
	} {
		req, err := http.NewRequest("GET", b.baseURL+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Add("Authorization", tc.first)
		req.Header.Add("Authorization", tc.second)
		res, err := b.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		wantProblem(t, response{status: res.StatusCode, header: res.Header, body: raw}, http.StatusUnauthorized, "unauthorized")
	}
}

// Failed authentications at the operator's endpoints are limited per
// client address and counted: five wrong tokens are 401 each, then the
// address gets 429 rate_limited with Retry-After, also with the right
// token, until a failure's worth has refilled (AdminAuthEvery on the
// service's clock); oncepay_admin_auth_failures_total counts both kinds.
func TestFailedAdminAuthenticationsAreLimitedAndCounted(t *testing.T) {
	t.Parallel()
	b := setup(t, withAdminToken)
	start := time.Now() // the service's clock runs on: a slow test sees the refill begun
	for i := range httpapi.AdminAuthBurst {
		wantProblem(t, b.do(t, "GET", "/admin/attention", fmt.Sprintf("guess-%d", i), "", ""), http.StatusUnauthorized, "unauthorized")
	}
	for _, token := range []string{"one-more-guess", openAPIAdminToken} {
		r := b.do(t, "GET", "/admin/outbox/stuck", token, "", "")
		wantProblem(t, r, http.StatusTooManyRequests, "rate_limited")
		got, err := strconv.Atoi(r.header.Get("Retry-After"))
		if lo := 12 - int(time.Since(start).Seconds()); err != nil || got < lo || got > 12 {
			t.Fatalf("Retry-After = %q, want %d to 12: a failure's worth (12 s) less the time since the first", r.header.Get("Retry-After"), lo)
		}
	}
	s := b.scrape(t)
	for series, want := range map[string]float64{
		`oncepay_admin_auth_failures_total{result="unauthorized"}`: httpapi.AdminAuthBurst,
		`oncepay_admin_auth_failures_total{result="rate_limited"}`: 2,
	} {
		if s[series] != want {
			t.Errorf("%s = %v, want %v", series, s[series], want)
		}
	}
	b.clock.Advance(httpapi.AdminAuthEvery)
	if r := b.admin(t, "GET", "/admin/attention"); r.status != http.StatusOK {
		t.Fatalf("a refill later, the right token: %d %s", r.status, r.body)
	}
}

// rawExchange sends raw bytes on a new connection and reads one answer.
func (b *testBundle) rawExchange(t *testing.T, raw string) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%.40q: no answer: %v", raw, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, body
}

// What net/http lets through reaches the service and gets its
// problem+json: "OPTIONS *", which net/http would answer itself with an
// empty 200, and the odd request forms it passes on. What net/http answers
// before any handler runs (a malformed request line or header, a missing
// Host, headers over MaxHeaderBytes, an unknown Transfer-Encoding, an
// unsupported Expect or HTTP version) is text/plain and closes the
// connection; Go offers no hook to change it, and docs/CONTRACT.md lists
// it. This test pins that list, so the docs stay true when Go changes.
func TestNetHTTPAnswersAreProblemsWhereGoAllows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, raw := range []string{
		"OPTIONS * HTTP/1.1\r\nHost: oncepay\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n",
	} {
		res, body := b.rawExchange(t, raw)
		if res.StatusCode < 400 || res.StatusCode > 499 || res.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%.40q: %d %q %s, want a 4xx problem", raw, res.StatusCode, res.Header.Get("Content-Type"), body)
		}
	}
	for _, tc := range []struct {
		raw    string
		status int
	}{
		{"GARBAGE\r\n\r\n", 400},
		{"GET /healthz HTTP/1.1\r\n\r\n", 400}, // no Host
		{"GET /healthz HTTP/1.1\r\nHost: oncepay\r\nBad Header: x\r\n\r\n", 400},
		{"GET /healthz HTTP/1.1\r\nHost: oncepay\r\nX-Big: " + strings.Repeat("a", 70<<10) + "\r\n\r\n", 431},
		{"POST /v1/orders HTTP/1.1\r\nHost: oncepay\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
		{"POST /v1/orders HTTP/1.1\r\nHost: oncepay\r\nExpect: teapot\r\nContent-Length: 2\r\n\r\n{}", 417},
		{"GET /healthz HTTP/3.0\r\nHost: oncepay\r\n\r\n", 505},
	} {
		res, body := b.rawExchange(t, tc.raw)
		if res.StatusCode != tc.status || strings.HasPrefix(res.Header.Get("Content-Type"), "application/problem+json") {
			t.Errorf("%.50q: %d %q %s; docs/CONTRACT.md says net/http answers %d itself, not as a problem", tc.raw, res.StatusCode, res.Header.Get("Content-Type"), body, tc.status)
		}
	}
}
