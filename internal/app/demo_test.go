package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/orders"
)

// The demo's own surface end to end (internal/demo, wired by demo.go): its
// endpoints, the provider faults it arms, the X-Demo-Chaos header, and all
// of it answering 404 outside demo mode. make starter deletes this file
// with the demo (docs/FORKING.md).

// tenantWithCatalog creates a tenant with the demo catalog, for a service
// that is not in demo mode, and returns its API key.
func (b *testBundle) tenantWithCatalog(t *testing.T, slug string) string {
	t.Helper()
	ctx := context.Background()
	tenant, key, err := b.app.Tenants().Create(ctx, slug, slug)
	if err != nil {
		t.Fatalf("create tenant: %v", err)
	}
	if err := b.app.Orders().SeedCatalog(ctx, tenant.ID, orders.DemoCatalog()); err != nil {
		t.Fatalf("seed the catalog: %v", err)
	}
	return key
}

// The demo endpoints the UI reads, through real HTTP: tenant-scoped, and
// the provider's ledger agrees with our payments.
func TestDemoEndpoints(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orderID, amount := b.order(t, "demo-o1")
	wantProblem(t, b.pay(t, orderID, "demo-declined", "pm_card_declined"), http.StatusPaymentRequired, "card_declined")
	paid := b.pay(t, orderID, "demo-ok", "pm_card_ok")
	if paid.status != http.StatusCreated {
		t.Fatalf("pay: %d %s", paid.status, paid.body)
	}
	paymentID := paid.json(t)["id"].(string)
	if r := b.do(t, "POST", "/v1/payments/"+paymentID+"/refunds", acme, "demo-refund", `{"amount":500}`); r.status != http.StatusCreated {
		t.Fatalf("refund: %d %s", r.status, r.body)
	}

	r := b.do(t, "GET", "/demo/orders/"+orderID+"/payments", acme, "", "")
	if r.status != http.StatusOK {
		t.Fatalf("GET demo payments: %d %s", r.status, r.body)
	}
	var view struct {
		OrderID  string `json:"order_id"`
		Charged  *int   `json:"charged"`
		Payments []struct {
			ID             string `json:"id"`
			Status         string `json:"status"`
			Amount         int64  `json:"amount"`
			IdempotencyKey string `json:"idempotency_key"`
			Provider       *struct {
				ChargesSucceeded int   `json:"charges_succeeded"`
				ChargesFailed    int   `json:"charges_failed"`
				Refunds          int   `json:"refunds"`
				AmountRefunded   int64 `json:"amount_refunded"`
			} `json:"provider"`
		} `json:"payments"`
		Refunds []struct {
			PaymentID string `json:"payment_id"`
			Amount    int64  `json:"amount"`
			Status    string `json:"status"`
		} `json:"refunds"`
	}
	if err := json.Unmarshal(r.body, &view); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
	if view.OrderID != orderID || view.Charged == nil || *view.Charged != 1 || len(view.Payments) != 2 {
		t.Fatalf("view = %s", r.body)
	}
	declined, ok := view.Payments[0], view.Payments[1]
	if declined.Status != "failed" || declined.IdempotencyKey != "demo-declined" || declined.Provider.ChargesFailed != 1 || declined.Provider.ChargesSucceeded != 0 {
		t.Fatalf("declined attempt = %+v", declined)
	}
	if ok.ID != paymentID || ok.Status != "succeeded" || ok.Amount != amount || ok.Provider.ChargesSucceeded != 1 ||
		ok.Provider.Refunds != 1 || ok.Provider.AmountRefunded != 500 {
		t.Fatalf("paid attempt = %+v", ok)
	}
	if len(view.Refunds) != 1 || view.Refunds[0].PaymentID != paymentID || view.Refunds[0].Amount != 500 || view.Refunds[0].Status != "succeeded" {
		t.Fatalf("refunds = %+v", view.Refunds)
	}

	// Another tenant's order does not exist; a key is required.
	wantProblem(t, b.do(t, "GET", "/demo/orders/"+orderID+"/payments", globex, "", ""), http.StatusNotFound, "not_found")
	wantProblem(t, b.do(t, "GET", "/demo/orders/not-a-uuid/payments", acme, "", ""), http.StatusNotFound, "not_found")
	wantProblem(t, b.do(t, "GET", "/demo/orders/"+orderID+"/payments", "", "", ""), http.StatusUnauthorized, "unauthorized")

	// The status needs no key; it names the demo tenants, and the provider,
	// being the simulator, offers its faults.
	if s := b.do(t, "GET", "/demo", "", "", ""); s.status != http.StatusOK || !bytes.Contains(s.body, []byte(`"api_key":"sk_test_globex"`)) ||
		!bytes.Contains(s.body, []byte(`"provider_faults":true`)) {
		t.Fatalf("GET /demo = %d %s", s.status, s.body)
	}
}

// Provider faults armed through the demo endpoint: the provider charges and
// drops the answer, oncepay answers 503, the retry with the same key finds
// the charge, and the ledger holds one.
func TestDemoProviderFault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orderID, _ := b.order(t, "fault-o1")
	if r := b.do(t, "PUT", "/demo/faults", acme, "", `{"drop_next":1}`); r.status != http.StatusOK || string(r.body) != `{"timeout_next":0,"fail_next":0,"drop_next":1}` {
		t.Fatalf("PUT /demo/faults = %d %s", r.status, r.body)
	}
	first := b.pay(t, orderID, "fault-pay", "pm_card_ok")
	wantProblem(t, first, http.StatusServiceUnavailable, "payment_provider_unavailable")
	retry := b.pay(t, orderID, "fault-pay", "pm_card_ok")
	if retry.status != http.StatusCreated {
		t.Fatalf("retry: %d %s", retry.status, retry.body)
	}
	if n := b.charges(t, retry.json(t)["id"].(string)); n != 1 {
		t.Fatalf("provider charges = %d, want 1", n)
	}
	wantProblem(t, b.do(t, "PUT", "/demo/faults", acme, "", `{"drop_next":99}`), http.StatusUnprocessableEntity, "validation_failed")
}

// Demo faults are the tenant's own: faults acme arms meet acme's next
// payment only, never globex's, and globex sees none armed.
func TestDemoProviderFaultsAreScopedToTheTenant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if r := b.do(t, "PUT", "/demo/faults", acme, "", `{"fail_next":2}`); r.status != http.StatusOK {
		t.Fatalf("PUT /demo/faults = %d %s", r.status, r.body)
	}
	if r := b.do(t, "GET", "/demo/faults", globex, "", ""); string(r.body) != `{"timeout_next":0,"fail_next":0,"drop_next":0}` {
		t.Fatalf("globex's faults = %d %s, want none armed", r.status, r.body)
	}
	o := b.do(t, "POST", "/v1/orders", globex, "scoped-o1", orderBody)
	if o.status != http.StatusCreated {
		t.Fatalf("globex's order: %d %s", o.status, o.body)
	}
	if r := b.do(t, "POST", "/v1/orders/"+o.json(t)["id"].(string)+"/payments", globex, "scoped-pay", `{"payment_method":"pm_card_ok"}`); r.status != http.StatusCreated {
		t.Fatalf("globex's payment met acme's fault: %d %s", r.status, r.body)
	}
	orderID, _ := b.order(t, "scoped-o2")
	wantProblem(t, b.pay(t, orderID, "scoped-pay", "pm_card_ok"), http.StatusServiceUnavailable, "payment_provider_unavailable")
	if r := b.do(t, "GET", "/demo/faults", acme, "", ""); string(r.body) != `{"timeout_next":0,"fail_next":1,"drop_next":0}` {
		t.Fatalf("acme's faults after one = %d %s", r.status, r.body)
	}
}

// X-Demo-Chaos: lose-response is drill 1 on demand: the request commits,
// the answer never arrives, the retry gets it replayed.
func TestDemoChaosLoseResponse(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A client of its own without keep-alive: a retry by the transport on a
	// reused connection would hide what this test looks at.
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	req, err := http.NewRequest("POST", b.baseURL+"/v1/orders", strings.NewReader(orderBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+acme)
	req.Header.Set("Idempotency-Key", "chaos-1")
	req.Header.Set("X-Demo-Chaos", "lose-response")
	if res, err := client.Do(req); err == nil {
		res.Body.Close()
		t.Fatalf("got %d; want the connection closed without an answer", res.StatusCode)
	}
	if n := b.count(t, `SELECT count(*) FROM orders`); n != 1 {
		t.Fatalf("orders = %d, want 1: the request ran before its answer was lost", n)
	}
	retry := b.do(t, "POST", "/v1/orders", acme, "chaos-1", orderBody)
	if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry = %d replayed=%q %s", retry.status, retry.header.Get("Idempotent-Replayed"), retry.body)
	}
}

// Outside demo mode the demo surface answers 404 and the chaos header is
// refused before anything runs; the UI is still served.
func TestDemoModeOff(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *app.Config) { c.DemoMode = false })
	key := b.tenantWithCatalog(t, "initech")
	if r := b.do(t, "GET", "/", "", "", ""); r.status != http.StatusOK || !bytes.Contains(r.body, []byte("<title>oncepay")) {
		t.Fatalf("GET / = %d", r.status)
	}
	wantProblem(t, b.do(t, "GET", "/demo", "", "", ""), http.StatusNotFound, "not_found")
	wantProblem(t, b.do(t, "GET", "/demo/faults", key, "", ""), http.StatusNotFound, "not_found")
	wantProblem(t, b.do(t, "PUT", "/demo/faults", key, "", `{"drop_next":1}`), http.StatusNotFound, "not_found")
	wantProblem(t, b.do(t, "GET", "/demo/orders/01a22931-c9da-71c4-a494-fc128972f4cb/payments", key, "", ""), http.StatusNotFound, "not_found")
	wantProblem(t, b.do(t, "POST", "/demo/events/01a22931-c9da-71c4-a494-fc128972f4cb/replay", key, "", ""), http.StatusNotFound, "not_found")

	req, err := http.NewRequest("POST", b.baseURL+"/v1/orders", strings.NewReader(orderBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Idempotency-Key", "chaos-off")
	req.Header.Set("X-Demo-Chaos", "lose-response")
	res, err := b.client.Do(req)
	if err != nil {
		t.Fatalf("the chaos header must be refused with an answer outside demo mode: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Fatalf("chaos header outside demo mode = %d, want 404", res.StatusCode)
	}
	if n := b.count(t, `SELECT count(*) FROM orders`); n != 0 {
		t.Fatalf("orders = %d, want 0: a refused request must not run", n)
	}
}

// Outside demo mode every /demo endpoint answers 404, as a route that does
// not exist would, with a key, with a wrong one and without one: a 401
// would say that the endpoint is there.
func TestDemoEndpointsAre404OutsideDemoModeWithOrWithoutAKey(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *app.Config) { c.DemoMode = false })
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/demo", ""},
		{"GET", "/demo/faults", ""},
		{"PUT", "/demo/faults", `{"drop_next":1}`},
		{"GET", "/demo/orders/01a22931-c9da-71c4-a494-fc128972f4cb/payments", ""},
		{"POST", "/demo/events/01a22931-c9da-71c4-a494-fc128972f4cb/replay", ""},
	} {
		for _, apiKey := range []string{"", "sk_test_unknown"} {
			wantProblem(t, b.do(t, r.method, r.path, apiKey, "", r.body), http.StatusNotFound, "not_found")
		}
	}
}

// The demo's faults endpoint reads its body like every route of the API:
// 65,536 bytes at most, a client that hangs up halfway is a 499, member
// names match exactly and a name twice is invalid_json; a refused request
// arms nothing.
func TestDemoFaultsReadTheirBodyLikeTheAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const limit = 65536
	wantProblem(t, b.do(t, "PUT", "/demo/faults", acme, "", padTo(`{"fail_next":1}`, limit+1)), http.StatusRequestEntityTooLarge, "request_too_large")
	p := wantProblem(t, b.do(t, "PUT", "/demo/faults", acme, "", `{"FAIL_NEXT":1}`), http.StatusUnprocessableEntity, "validation_failed")
	if errs, _ := p["errors"].([]any); len(errs) != 1 || errs[0].(map[string]any)["field"] != "FAIL_NEXT" {
		t.Fatalf("errors = %v, want FAIL_NEXT: unknown field", p["errors"])
	}
	wantProblem(t, b.do(t, "PUT", "/demo/faults", acme, "", `{"fail_next":0,"fail_next":1}`), http.StatusBadRequest, "invalid_json")

	conn, err := net.Dial("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, partialRequest("PUT", "/demo/faults", acme, "", `{"fail_next":1}`)); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	b.waitForSeries(t, 10*time.Second, `oncepay_http_request_duration_seconds_count{method="PUT",route="/demo/faults",status="499"}`,
		"the hang-up counted as a client error", atLeast(1))
	b.noServerErrors(t)
	if got := b.do(t, "GET", "/demo/faults", acme, "", ""); !strings.Contains(string(got.body), `"fail_next":0`) {
		t.Fatalf("faults after the refused PUTs = %s, want none armed", got.body)
	}
}
