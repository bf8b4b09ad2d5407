package orders_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/httpapi"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/tenants"
	"github.com/oncepay/oncepay/internal/testkit"
)

// testBundle is the orders service on a database with the demo tenants and
// their catalogs, its handlers served behind the tenant middleware and the
// service's error handler over loopback HTTP, as the API routes them.
type testBundle struct {
	pool         *pgxpool.Pool
	svc          *orders.Service
	url          string
	client       *http.Client
	acme, globex testkit.Tenant
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	pool := testkit.Pool(t)
	demo := testkit.SeedDemo(t, pool)
	clock := testkit.NewClock()
	logger := testkit.Logger(t)
	store := idempotency.NewStore(operation.PolicyOf(orders.Specs()), clock.Now, idempotency.WithLease(30*time.Second))
	svc := orders.NewService(pool, operation.NewRunner(pool, store, logger), clock.Now, orders.WithLivePayment(payments.HasLivePayment))
	for _, tn := range demo {
		if err := svc.SeedCatalog(context.Background(), tn.ID, orders.DemoCatalog()); err != nil {
			t.Fatal(err)
		}
	}
	h := orders.NewHandler(svc)
	auth := tenants.Middleware(tenants.NewService(pool, clock.Now, tenants.WithCacheTTL(0), tenants.WithDemoKeys(true)))
	e := echo.New()
	e.HideBanner = true
	e.HTTPErrorHandler = httpapi.ErrorHandler(logger)
	e.GET("/v1/products", h.Products, auth)
	e.POST("/v1/orders", h.Create, auth)
	e.GET("/v1/orders", h.List, auth)
	e.GET("/v1/orders/:id", h.Get, auth)
	e.POST("/v1/orders/:id/cancel", h.Cancel, auth)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &testBundle{pool: pool, svc: svc, url: srv.URL, client: srv.Client(), acme: demo["acme"], globex: demo["globex"]}
}

// do sends a request as tenant, with an Idempotency-Key when key is set.
func (b *testBundle) do(t *testing.T, tenant testkit.Tenant, method, path, key, body string) testkit.Response {
	t.Helper()
	req, err := http.NewRequest(method, b.url+path, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tenant.APIKey)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	return testkit.Do(t, b.client, req)
}

// orderJSON is an order as a client reads it.
type orderJSON struct {
	ID          uuid.UUID `json:"id"`
	Status      string    `json:"status"`
	Currency    string    `json:"currency"`
	AmountTotal int64     `json:"amount_total"`
	Items       []struct {
		SKU        string `json:"sku"`
		Name       string `json:"name"`
		Quantity   int    `json:"quantity"`
		UnitAmount int64  `json:"unit_amount"`
		Amount     int64  `json:"amount"`
	} `json:"items"`
	CreatedAt time.Time `json:"created_at"`
}

// create places an order and fails unless it is created.
func (b *testBundle) create(t *testing.T, tenant testkit.Tenant, key, body string) (orderJSON, testkit.Response) {
	t.Helper()
	r := b.do(t, tenant, http.MethodPost, "/v1/orders", key, body)
	if r.Status != http.StatusCreated {
		t.Fatalf("POST /v1/orders = %d %s, want 201", r.Status, r.Body)
	}
	var o orderJSON
	if err := json.Unmarshal(r.Body, &o); err != nil {
		t.Fatalf("decode order %s: %v", r.Body, err)
	}
	if loc := r.Header.Get("Location"); loc != "/v1/orders/"+o.ID.String() {
		t.Fatalf("Location = %q, want /v1/orders/%s", loc, o.ID)
	}
	return o, r
}

// catalog returns tenant's products by SKU, as the service lists them.
func (b *testBundle) catalog(t *testing.T, tenant testkit.Tenant) map[string]orders.Product {
	t.Helper()
	list, err := b.svc.Products(context.Background(), tenant.ID)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]orders.Product, len(list))
	for _, p := range list {
		out[p.SKU] = p
	}
	return out
}

// orderCount returns how many orders tenant has.
func (b *testBundle) orderCount(t *testing.T, tenant testkit.Tenant) int {
	t.Helper()
	list, _, err := b.svc.List(context.Background(), tenant.ID, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	return len(list)
}

// Every line is priced from the tenant's catalog: its unit amount and name,
// amount = unit amount x quantity, and the total is the sum of the lines.
// What is stored is what was answered.
func TestCreatePricesEveryLineFromTheCatalog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cat := b.catalog(t, b.acme)
	lines := []struct {
		sku string
		qty int
	}{{"burr-grinder", 2}, {"paper-filters-100", 3}, {"travel-mug", 1}}
	o, _ := b.create(t, b.acme, "price-1", `{"currency":"EUR","items":[
		{"sku":"burr-grinder","quantity":2},{"sku":"paper-filters-100","quantity":3},{"sku":"travel-mug","quantity":1}]}`)
	if o.Status != string(orders.StatusAwaitingPayment) || o.Currency != "EUR" || len(o.Items) != len(lines) {
		t.Fatalf("order = %+v, want an awaiting_payment EUR order of %d lines", o, len(lines))
	}
	var total int64
	for i, l := range lines {
		p, it := cat[l.sku], o.Items[i]
		if p.UnitAmount == 0 {
			t.Fatalf("the demo catalog has no %s", l.sku)
		}
		if it.SKU != l.sku || it.Name != p.Name || it.Quantity != l.qty || it.UnitAmount != p.UnitAmount || it.Amount != p.UnitAmount*int64(l.qty) {
			t.Fatalf("line %d = %+v, want %s x %d at the catalog's %d (%q)", i, it, l.sku, l.qty, p.UnitAmount, p.Name)
		}
		total += it.Amount
	}
	if o.AmountTotal != total {
		t.Fatalf("amount_total = %d, want the sum of the lines %d", o.AmountTotal, total)
	}

	stored, err := b.svc.Get(context.Background(), b.acme.ID, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.AmountTotal != o.AmountTotal || string(stored.Status) != o.Status || len(stored.Items) != len(o.Items) {
		t.Fatalf("stored order = %+v, answered %+v", stored, o)
	}
	for i, it := range stored.Items {
		if it.SKU != o.Items[i].SKU || it.Quantity != o.Items[i].Quantity || it.UnitAmount != o.Items[i].UnitAmount || it.Amount != o.Items[i].Amount {
			t.Fatalf("stored line %d = %+v, answered %+v", i, it, o.Items[i])
		}
	}
}

// The price is the catalog's when the order is created: a new price applies
// to new orders, and an existing order keeps the price it was made with.
// A client cannot send a price at all.
func TestPricesComeFromTheCatalogNeverTheClient(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const body = `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":2}]}`
	before, _ := b.create(t, b.acme, "mug-1", body)
	old := b.catalog(t, b.acme)["travel-mug"].UnitAmount
	// The catalog is the orders feature's table; no service method changes a
	// price.
	if _, err := b.pool.Exec(context.Background(), `UPDATE products SET unit_amount = unit_amount + 111 WHERE tenant_id = $1 AND sku = 'travel-mug'`, b.acme.ID); err != nil {
		t.Fatal(err)
	}
	after, _ := b.create(t, b.acme, "mug-2", body)
	if after.Items[0].UnitAmount != old+111 || after.AmountTotal != 2*(old+111) {
		t.Fatalf("order after the price change = %+v, want unit amount %d", after, old+111)
	}
	kept, err := b.svc.Get(context.Background(), b.acme.ID, before.ID)
	if err != nil {
		t.Fatal(err)
	}
	if kept.Items[0].UnitAmount != old || kept.AmountTotal != 2*old {
		t.Fatalf("earlier order = %+v, want it to keep unit amount %d", kept, old)
	}

	r := b.do(t, b.acme, http.MethodPost, "/v1/orders", "mug-3", `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":2,"unit_amount":1}]}`)
	p := testkit.WantProblem(t, r, http.StatusUnprocessableEntity, problem.ValidationFailed)
	if len(p.Errors) != 1 || p.Errors[0].Field != "items[0].unit_amount" {
		t.Fatalf("errors = %+v, want the unknown field items[0].unit_amount", p.Errors)
	}
	if n := b.orderCount(t, b.acme); n != 2 {
		t.Fatalf("acme has %d orders, want 2", n)
	}
}

// A SKU that is not in the tenant's catalog, or is priced in another
// currency than the order's, is a 422 naming each offending line's path.
// Nothing is created and the key stays free: the corrected request
// executes under it.
func TestUnknownAndOtherCurrencySKUsAreValidationErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		name   string
		tenant testkit.Tenant
		body   string
		want   []problem.FieldError
	}{
		{"unknown SKU", b.acme, `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":1},{"sku":"no-such-sku","quantity":1}]}`,
			[]problem.FieldError{{Field: "items[1].sku", Message: "unknown SKU"}}},
		{"priced in another currency", b.acme, `{"currency":"USD","items":[{"sku":"travel-mug","quantity":1}]}`,
			[]problem.FieldError{{Field: "items[0].sku", Message: "priced in EUR, not USD"}}},
		{"every bad line", b.acme, `{"currency":"USD","items":[{"sku":"nope","quantity":1},{"sku":"burr-grinder","quantity":2},{"sku":"nope-2","quantity":3}]}`,
			[]problem.FieldError{{Field: "items[0].sku", Message: "unknown SKU"}, {Field: "items[1].sku", Message: "priced in EUR, not USD"}, {Field: "items[2].sku", Message: "unknown SKU"}}},
		{"another tenant's catalog", testkit.NewTenant(t, b.pool), `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":1}]}`,
			[]problem.FieldError{{Field: "items[0].sku", Message: "unknown SKU"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := b.do(t, tc.tenant, http.MethodPost, "/v1/orders", "bad-sku", tc.body)
			p := testkit.WantProblem(t, r, http.StatusUnprocessableEntity, problem.ValidationFailed)
			if len(p.Errors) != len(tc.want) {
				t.Fatalf("errors = %+v, want %+v", p.Errors, tc.want)
			}
			for i := range tc.want {
				if p.Errors[i] != tc.want[i] {
					t.Fatalf("errors = %+v, want %+v", p.Errors, tc.want)
				}
			}
			if n := b.orderCount(t, tc.tenant); n != 0 {
				t.Fatalf("a refused request created %d orders", n)
			}
		})
	}
	o, _ := b.create(t, b.acme, "bad-sku", `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":1}]}`)
	if n := b.orderCount(t, b.acme); n != 1 || o.AmountTotal != b.catalog(t, b.acme)["travel-mug"].UnitAmount {
		t.Fatalf("after the corrected request: %d orders, total %d", n, o.AmountTotal)
	}
}

// A retry of the same request is answered with the stored answer, byte for
// byte, even after the order has moved on; it creates nothing.
func TestReplayReturnsTheStoredBytes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o, first := b.create(t, b.acme, "replay-1", `{"currency":"EUR","items":[{"sku":"ceramic-dripper","quantity":2}]}`)
	if first.Header.Get("Idempotent-Replayed") != "" {
		t.Fatal("the first answer is marked as replayed")
	}
	// A payment moves the order on, as payments does.
	if _, err := b.pool.Exec(context.Background(), `UPDATE orders SET status = 'paid' WHERE id = $1`, o.ID); err != nil {
		t.Fatal(err)
	}
	// The same request: key order and spacing do not change it.
	for _, body := range []string{
		`{"currency":"EUR","items":[{"sku":"ceramic-dripper","quantity":2}]}`,
		`{ "items": [ { "quantity": 2.0, "sku": "ceramic-dripper" } ], "currency": "EUR" }`,
	} {
		r := b.do(t, b.acme, http.MethodPost, "/v1/orders", "replay-1", body)
		if r.Status != first.Status || !bytes.Equal(r.Body, first.Body) {
			t.Fatalf("replay = %d %s, want %d %s", r.Status, r.Body, first.Status, first.Body)
		}
		if r.Header.Get("Idempotent-Replayed") != "true" || r.Header.Get("Location") != first.Header.Get("Location") ||
			r.Header.Get("Content-Type") != first.Header.Get("Content-Type") {
			t.Fatalf("replay headers = %v, want Idempotent-Replayed: true and the first answer's Location and Content-Type", r.Header)
		}
	}
	if n := b.orderCount(t, b.acme); n != 1 {
		t.Fatalf("acme has %d orders, want 1", n)
	}
}

// The same key with another request is 422 idempotency_key_reused: nothing
// executes, and the original answer is untouched. The same key in another
// tenant is another intent.
func TestKeyReusedWithAnotherBodyIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const body = `{"currency":"EUR","items":[{"sku":"espresso-beans-1kg","quantity":1}]}`
	_, first := b.create(t, b.acme, "reuse-1", body)
	r := b.do(t, b.acme, http.MethodPost, "/v1/orders", "reuse-1", `{"currency":"EUR","items":[{"sku":"espresso-beans-1kg","quantity":5}]}`)
	testkit.WantProblem(t, r, http.StatusUnprocessableEntity, problem.IdempotencyKeyReused)
	if n := b.orderCount(t, b.acme); n != 1 {
		t.Fatalf("acme has %d orders, want 1", n)
	}
	if again := b.do(t, b.acme, http.MethodPost, "/v1/orders", "reuse-1", body); !bytes.Equal(again.Body, first.Body) {
		t.Fatalf("replay after the refused reuse = %s, want %s", again.Body, first.Body)
	}
	other, _ := b.create(t, b.globex, "reuse-1", `{"currency":"EUR","items":[{"sku":"espresso-beans-1kg","quantity":5}]}`)
	if other.Items[0].Quantity != 5 {
		t.Fatalf("globex's order under the same key = %+v, want its own request", other)
	}
}

// A tenant reads its own orders only: another tenant's order is not found,
// exactly like one that does not exist. Lists are newest first, in pages.
func TestGetAndListAreTheTenantsOwn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const body = `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":1}]}`
	var ids []uuid.UUID
	for _, key := range []string{"own-1", "own-2", "own-3"} {
		o, _ := b.create(t, b.acme, key, body)
		ids = append(ids, o.ID)
	}
	if _, err := b.svc.Get(ctx, b.globex.ID, ids[0]); !errors.Is(err, orders.ErrNotFound) {
		t.Fatalf("Get(globex, acme's order) = %v, want orders.ErrNotFound", err)
	}
	testkit.WantProblem(t, b.do(t, b.globex, http.MethodGet, "/v1/orders/"+ids[0].String(), "", ""), http.StatusNotFound, problem.NotFound)
	testkit.WantProblem(t, b.do(t, b.acme, http.MethodGet, "/v1/orders/"+uuid.NewString(), "", ""), http.StatusNotFound, problem.NotFound)
	if r := b.do(t, b.acme, http.MethodGet, "/v1/orders/"+ids[0].String(), "", ""); r.Status != http.StatusOK {
		t.Fatalf("GET own order = %d %s", r.Status, r.Body)
	}
	if n := b.orderCount(t, b.globex); n != 0 {
		t.Fatalf("globex lists %d orders, want 0", n)
	}

	page, next, err := b.svc.List(ctx, b.acme.ID, 2, nil)
	if err != nil || len(page) != 2 || next == nil || page[0].ID != ids[2] || page[1].ID != ids[1] {
		t.Fatalf("first page = %v, next %v, %v; want the two newest and a cursor", page, next, err)
	}
	page, next, err = b.svc.List(ctx, b.acme.ID, 2, next)
	if err != nil || len(page) != 1 || next != nil || page[0].ID != ids[0] {
		t.Fatalf("second page = %v, next %v, %v; want the oldest and no cursor", page, next, err)
	}
}
