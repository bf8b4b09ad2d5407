package orders_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/httpapi"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/tenants"
	"github.com/oncepay/oncepay/internal/testkit"
)

// TestCreateRoundTrips counts what orders.create costs PostgreSQL in round
// trips, on the wire between the service's pool and the server: a fresh
// key is 3 (the replay lookup, then the transaction as two pipelined
// batches, COMMIT in the second), a replay 1 (the lookup). A change that
// adds a statement outside the batches fails here.
func TestCreateRoundTrips(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	demo := testkit.SeedDemo(t, pool)
	clock := testkit.NewClock()
	logger := testkit.Logger(t)

	// The orders service's pool goes through the counter, one connection:
	// every round trip of a create is on it.
	counted, counter := testkit.CountedPool(t, pool)
	store := idempotency.NewStore(operation.PolicyOf(orders.Specs()), clock.Now, idempotency.WithLease(30*time.Second))
	svc := orders.NewService(counted, operation.NewRunner(counted, store, logger), clock.Now)
	if err := svc.SeedCatalog(context.Background(), demo["acme"].ID, orders.DemoCatalog()); err != nil {
		t.Fatal(err)
	}
	// Authentication reads the tenant on a pool of its own: not counted.
	auth := tenants.Middleware(tenants.NewService(pool, clock.Now, tenants.WithCacheTTL(0), tenants.WithDemoKeys(true)))
	e := echo.New()
	e.HideBanner = true
	e.HTTPErrorHandler = httpapi.ErrorHandler(logger)
	e.POST("/v1/orders", orders.NewHandler(svc).Create, auth)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	b := &testBundle{url: srv.URL, client: srv.Client()}

	// roundTrips sends the request and returns the round trips it took.
	roundTrips := func(key string, want int) int64 {
		t.Helper()
		before := counter.RoundTrips()
		r := b.do(t, demo["acme"], "POST", "/v1/orders", key, `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":2},{"sku":"paper-filters-100","quantity":1}]}`)
		if r.Status != want {
			t.Fatalf("POST /v1/orders %s = %d %s", key, r.Status, r.Body)
		}
		return counter.RoundTrips() - before
	}
	// The connection's first create prepares its statements (pgx's
	// statement cache): a round trip more, once per connection.
	roundTrips("round-trips-warm-up", http.StatusCreated)
	// The least of three: the pool pings a connection idle for more than a
	// second before handing it out, a round trip that is not the create's.
	least := func(keys ...string) int64 {
		n := int64(1 << 30)
		for _, k := range keys {
			n = min(n, roundTrips(k, http.StatusCreated))
		}
		return n
	}
	if n := least("round-trips-1", "round-trips-2", "round-trips-3"); n != 3 {
		t.Errorf("a create with a fresh key took %d round trips to PostgreSQL, want 3 (lookup, then BEGIN+claim+products, then the writes+COMMIT)", n)
	}
	if n := least("round-trips-1", "round-trips-1", "round-trips-1"); n != 1 {
		t.Errorf("a replay took %d round trips to PostgreSQL, want 1 (the lookup)", n)
	}
}
