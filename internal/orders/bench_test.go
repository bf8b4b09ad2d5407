package orders_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/httpapi"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/tenants"
	"github.com/oncepay/oncepay/internal/testkit"
)

// BenchmarkCreate is POST /v1/orders in process: the tenant middleware, the
// handler, the idempotent operation and its three round trips to a real
// PostgreSQL, without the HTTP transport and the API's other middleware.
// Its allocations per create are exact on any machine, its time is not:
// go test -run '^$' -bench . -benchmem ./internal/orders (docs/BENCHMARKS.md).
func BenchmarkCreate(b *testing.B) {
	serve, acme := benchHandler(b)
	// Keys are unique per run of a sub-benchmark: -count runs it again on
	// the same database.
	b.Run("fresh", func(b *testing.B) {
		prefix := "bench-fresh-" + uuid.NewString() + "-"
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			benchPost(b, serve, acme, prefix+strconv.Itoa(i), false)
		}
	})
	b.Run("replay", func(b *testing.B) {
		key := "bench-replay-" + uuid.NewString()
		benchPost(b, serve, acme, key, false)
		b.ReportAllocs()
		for b.Loop() {
			benchPost(b, serve, acme, key, true)
		}
	})
}

// benchHandler is the orders service as setup builds it, with the tenant
// cache on as in a deployment, served in process.
func benchHandler(b *testing.B) (http.Handler, testkit.Tenant) {
	b.Helper()
	pool := testkit.Pool(b)
	demo := testkit.SeedDemo(b, pool)
	logger := testkit.Logger(b)
	store := idempotency.NewStore(operation.PolicyOf(orders.Specs()), time.Now, idempotency.WithLease(30*time.Second))
	svc := orders.NewService(pool, operation.NewRunner(pool, store, logger), time.Now)
	if err := svc.SeedCatalog(context.Background(), demo["acme"].ID, orders.DemoCatalog()); err != nil {
		b.Fatal(err)
	}
	auth := tenants.Middleware(tenants.NewService(pool, time.Now, tenants.WithDemoKeys(true)))
	e := echo.New()
	e.HideBanner = true
	e.HTTPErrorHandler = httpapi.ErrorHandler(logger)
	e.POST("/v1/orders", orders.NewHandler(svc).Create, auth)
	return e, demo["acme"]
}

// benchPost posts the bench's order under key and fails unless it was
// answered 201, replayed as wantReplay says.
func benchPost(b *testing.B, h http.Handler, tenant testkit.Tenant, key string, wantReplay bool) {
	req := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(`{"currency":"EUR","items":[{"sku":"travel-mug","quantity":1}]}`))
	req.Header.Set("Authorization", "Bearer "+tenant.APIKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated || (rec.Header().Get("Idempotent-Replayed") == "true") != wantReplay {
		b.Fatalf("POST /v1/orders %s = %d (replayed %q): %s", key, rec.Code, rec.Header().Get("Idempotent-Replayed"), rec.Body)
	}
}
