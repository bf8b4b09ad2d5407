package app_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
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
	wantProblem(t, b.do(t, "PUT", "/demo/faults", acme, "", padTo(`{"fail_next":1}`, limit+1)), http.StatusRequestEntityTooLarge, "request_too_large")
	wantProblem(t, b.do(t, "POST", "/webhooks/psp", "", "", padTo(`{}`, limit+1)), http.StatusRequestEntityTooLarge, "request_too_large")
	if n := b.count(t, `SELECT count(*) FROM api_idempotency WHERE idempotency_key = 'limit-over'`); n != 0 {
		t.Fatalf("records of the refused request = %d, want 0", n)
	}
}
