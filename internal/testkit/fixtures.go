package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/tenants"
	"github.com/oncepay/oncepay/internal/testdb"
)

// Pool returns a pool on a database of t's own with every migration applied,
// cloned from a template in milliseconds (internal/testdb). It is closed when
// t ends; a failed test's database is kept for inspection.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return testdb.Pool(t)
}

// AnotherPool opens a second pool on pool's database, as another process of
// the service would: its own connections, sessions and locks. It has as many
// connections as pool and is closed when t ends.
func AnotherPool(t testing.TB, pool *pgxpool.Pool) *pgxpool.Pool {
	t.Helper()
	cfg := pool.Config()
	other, err := postgres.Open(context.Background(), cfg.ConnString(), postgres.PoolConfig{MaxConns: cfg.MaxConns})
	if err != nil {
		t.Fatalf("open another pool: %v", err)
	}
	t.Cleanup(other.Close)
	return other
}

// Tenant is a tenant a fixture made, with an API key that authenticates as
// it (send it as "Authorization: Bearer <APIKey>").
type Tenant struct {
	tenants.Tenant
	APIKey string
}

// NewTenant creates a tenant with a fresh API key through
// tenants.Service.Create, as `api tenants create` does. Its slug is unique,
// so a test may create as many as it needs.
func NewTenant(t testing.TB, pool *pgxpool.Pool) Tenant {
	t.Helper()
	slug := "test-" + uuid.NewString()[:13] // "xxxxxxxx-xxxx": 48 random bits
	tn, key, err := tenants.NewService(pool, time.Now).Create(context.Background(), slug, "Test tenant "+slug)
	if err != nil {
		t.Fatalf("create tenant %s: %v", slug, err)
	}
	return Tenant{Tenant: tn, APIKey: key}
}

// SeedDemo seeds the demo tenants and their keys as demo mode does
// (tenants.Service.SeedDemo) and returns them by slug ("acme", "globex"),
// each found by authenticating its demo key. Their catalogs belong to the
// orders feature: a test that needs them seeds them through it
// (orders.Service.SeedCatalog).
func SeedDemo(t testing.TB, pool *pgxpool.Pool) map[string]Tenant {
	t.Helper()
	ctx := context.Background()
	svc := tenants.NewService(pool, time.Now, tenants.WithCacheTTL(0), tenants.WithDemoKeys(true))
	if _, err := svc.SeedDemo(ctx); err != nil {
		t.Fatalf("seed demo tenants: %v", err)
	}
	out := make(map[string]Tenant)
	for _, d := range tenants.DemoTenants() {
		tn, err := svc.Authenticate(ctx, d.APIKey)
		if err != nil {
			t.Fatalf("authenticate demo tenant %s: %v", d.Slug, err)
		}
		if tn.Slug != d.Slug {
			t.Fatalf("demo key of %s authenticates as %s", d.Slug, tn.Slug)
		}
		out[d.Slug] = Tenant{Tenant: tn, APIKey: d.APIKey}
	}
	return out
}
