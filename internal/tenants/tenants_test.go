package tenants_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/tenants"
	"github.com/oncepay/oncepay/internal/testkit"
)

// testBundle is a database with two tenants, and a stopped clock so that a
// cache entry's age is exactly what the test says.
type testBundle struct {
	pool  *pgxpool.Pool
	clock *testkit.Clock
	a, b  testkit.Tenant
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	pool := testkit.Pool(t)
	return &testBundle{
		pool:  pool,
		clock: testkit.StoppedClock(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)),
		a:     testkit.NewTenant(t, pool),
		b:     testkit.NewTenant(t, pool),
	}
}

// service returns a Service built with opts on a pool of its own, and
// cutOff, which closes that pool: after it, an answer can only come from the
// cache, and any lookup that reaches the database fails.
func (b *testBundle) service(t *testing.T, opts ...tenants.ServiceOption) (svc *tenants.Service, cutOff func()) {
	t.Helper()
	pool := testkit.AnotherPool(t, b.pool)
	return tenants.NewService(pool, b.clock.Now, opts...), pool.Close
}

// authenticates fails unless key authenticates as want.
func authenticates(t *testing.T, svc *tenants.Service, key string, want testkit.Tenant) {
	t.Helper()
	got, err := svc.Authenticate(context.Background(), key)
	if err != nil || got != want.Tenant {
		t.Fatalf("Authenticate(key of %s) = %+v, %v; want %+v", want.Slug, got, err, want.Tenant)
	}
}

// refused fails unless key is refused as unknown.
func refused(t *testing.T, svc *tenants.Service, key string) {
	t.Helper()
	if got, err := svc.Authenticate(context.Background(), key); !errors.Is(err, tenants.ErrUnknownKey) {
		t.Fatalf("Authenticate(%q) = %+v, %v; want ErrUnknownKey", key, got, err)
	}
}

// reachesTheDatabase fails unless authenticating key needed the database
// (which cutOff took away): the lookup fails, and not as an unknown key.
func reachesTheDatabase(t *testing.T, svc *tenants.Service, key string) {
	t.Helper()
	got, err := svc.Authenticate(context.Background(), key)
	if err == nil || errors.Is(err, tenants.ErrUnknownKey) {
		t.Fatalf("Authenticate with the database cut off = %+v, %v; want a lookup error", got, err)
	}
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	svc, _ := b.service(t, tenants.WithCacheTTL(0))
	authenticates(t, svc, b.a.APIKey, b.a)
	// A key of another tenant names that tenant, and only it.
	authenticates(t, svc, b.b.APIKey, b.b)
	refused(t, svc, "sk_live_"+"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	refused(t, svc, b.a.APIKey[:len(b.a.APIKey)-1])
	refused(t, svc, b.a.APIKey+"x")
	refused(t, svc, "")
}

// An empty key is refused without a database round trip.
func TestEmptyKeyNeedsNoDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	svc, cutOff := b.service(t, tenants.WithCacheTTL(time.Minute))
	cutOff()
	refused(t, svc, "")
}

// A cached key is answered from memory; a key not in the cache is looked
// up, and a failed lookup is an error, never an unknown key (a 500 the
// client may retry, not a 401 telling it its key is bad).
func TestCacheHitDoesNotReachTheDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	svc, cutOff := b.service(t, tenants.WithCacheTTL(time.Minute))
	authenticates(t, svc, b.a.APIKey, b.a)
	cutOff()
	authenticates(t, svc, b.a.APIKey, b.a)
	reachesTheDatabase(t, svc, b.b.APIKey)
}

// A cache entry lives for the TTL on the service's clock, not longer.
func TestCacheExpiresAfterTheTTL(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const ttl = 45 * time.Second
	svc, cutOff := b.service(t, tenants.WithCacheTTL(ttl))
	authenticates(t, svc, b.a.APIKey, b.a)
	cutOff()
	b.clock.Advance(ttl - time.Nanosecond)
	authenticates(t, svc, b.a.APIKey, b.a)
	b.clock.Advance(time.Nanosecond)
	reachesTheDatabase(t, svc, b.a.APIKey)
}

// Without WithCacheTTL a key is cached for DefaultCacheTTL, 30 seconds (the
// AUTH_CACHE_TTL default docs/CONFIGURATION.md names).
func TestCacheTTLDefaultsToThirtySeconds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	svc, cutOff := b.service(t)
	authenticates(t, svc, b.a.APIKey, b.a)
	cutOff()
	b.clock.Advance(30*time.Second - time.Nanosecond)
	authenticates(t, svc, b.a.APIKey, b.a)
	b.clock.Advance(time.Nanosecond)
	reachesTheDatabase(t, svc, b.a.APIKey)
}

func TestCacheTTLZeroDisablesTheCache(t *testing.T) {
	t.Parallel()
	b := setup(t)
	svc, cutOff := b.service(t, tenants.WithCacheTTL(0))
	authenticates(t, svc, b.a.APIKey, b.a)
	cutOff()
	reachesTheDatabase(t, svc, b.a.APIKey)
}

// revoke revokes key the way an operator does it (api keys revoke), on the
// bundle's clock.
func (b *testBundle) revoke(t *testing.T, key string) {
	t.Helper()
	k, err := tenants.NewService(b.pool, b.clock.Now).RevokeKey(context.Background(), key)
	if err != nil || k.RevokedAt == nil || !k.RevokedAt.Equal(b.clock.Now()) {
		t.Fatalf("RevokeKey = %+v, %v; want it revoked now", k, err)
	}
}

// A revoked key keeps working for at most the cache TTL after it was
// cached, and is refused after it; a process that had not cached it, and
// a service without a cache, refuse it at once. Other keys are untouched.
func TestRevokedKeyWorksAtMostTheCacheTTL(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const ttl = 45 * time.Second
	cached, _ := b.service(t, tenants.WithCacheTTL(ttl))
	uncached, _ := b.service(t, tenants.WithCacheTTL(0))
	other, _ := b.service(t, tenants.WithCacheTTL(ttl))
	authenticates(t, cached, b.a.APIKey, b.a)
	authenticates(t, uncached, b.a.APIKey, b.a)

	b.revoke(t, b.a.APIKey)
	refused(t, uncached, b.a.APIKey)
	refused(t, other, b.a.APIKey)
	authenticates(t, cached, b.a.APIKey, b.a)
	b.clock.Advance(ttl - time.Nanosecond)
	authenticates(t, cached, b.a.APIKey, b.a)
	b.clock.Advance(time.Nanosecond)
	refused(t, cached, b.a.APIKey)
	authenticates(t, cached, b.b.APIKey, b.b)
}

var liveKey = regexp.MustCompile(`^sk_live_[a-z2-7]{32}$`)

// Create makes a tenant and a random key, returns the key once and stores
// only its hash.
func TestCreate(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	ctx := context.Background()
	svc := tenants.NewService(pool, time.Now, tenants.WithCacheTTL(0))
	tn, key, err := svc.Create(ctx, "initech", "Initech")
	if err != nil {
		t.Fatal(err)
	}
	if tn.Slug != "initech" || tn.Name != "Initech" || !liveKey.MatchString(key) {
		t.Fatalf("Create = %+v, key %q; want initech and a sk_live_ key of 32 base32 characters", tn, key)
	}
	got, err := svc.Authenticate(ctx, key)
	if err != nil || got != tn {
		t.Fatalf("Authenticate(new key) = %+v, %v; want %+v", got, err, tn)
	}

	want := sha256.Sum256([]byte(key))
	var rows, hashed, leaks int
	err = pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE key_hash = $2),
		  count(*) FILTER (WHERE position($3 IN row_to_json(k)::text) > 0)
		FROM api_keys k WHERE tenant_id = $1`, tn.ID, want[:], key).Scan(&rows, &hashed, &leaks)
	if err != nil {
		t.Fatal(err)
	}
	if rows != 1 || hashed != 1 || leaks != 0 {
		t.Fatalf("api_keys: %d rows, %d with the key's SHA-256, %d holding the key; want one row, its hash, no key", rows, hashed, leaks)
	}
	var tenantLeaks int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM tenants t WHERE position($1 IN row_to_json(t)::text) > 0`, key).Scan(&tenantLeaks); err != nil || tenantLeaks != 0 {
		t.Fatalf("tenants rows holding the key: %d, %v", tenantLeaks, err)
	}

	// The slug is taken: nothing is created, the first tenant keeps its one key.
	again, againKey, err := svc.Create(ctx, "initech", "Initech again")
	if !errors.Is(err, tenants.ErrTenantExists) || againKey != "" || again != (tenants.Tenant{}) {
		t.Fatalf("Create(taken slug) = %+v, %q, %v; want ErrTenantExists and nothing", again, againKey, err)
	}
	var tenantRows, keyRows int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM tenants), (SELECT count(*) FROM api_keys)`).Scan(&tenantRows, &keyRows); err != nil {
		t.Fatal(err)
	}
	if tenantRows != 1 || keyRows != 1 {
		t.Fatalf("after the refused Create: %d tenants, %d keys; want 1, 1", tenantRows, keyRows)
	}

	// Every key is new.
	_, other, err := svc.Create(ctx, "hooli", "Hooli")
	if err != nil || other == key || !liveKey.MatchString(other) {
		t.Fatalf("second Create: key %q, %v; want another sk_live_ key", other, err)
	}
}

// demoState counts the tenants, keys and products in the database.
func demoState(t *testing.T, pool *pgxpool.Pool) (tenantRows, keyRows, productRows int) {
	t.Helper()
	err := pool.QueryRow(context.Background(), `SELECT
		  (SELECT count(*) FROM tenants), (SELECT count(*) FROM api_keys), (SELECT count(*) FROM products)`).
		Scan(&tenantRows, &keyRows, &productRows)
	if err != nil {
		t.Fatalf("read demo data: %v", err)
	}
	return tenantRows, keyRows, productRows
}

// SeedDemo runs at every start in demo mode: a second run finds the same
// tenants with the same keys. It returns the tenants in the order of
// DemoTenants and seeds no catalog: products are the orders feature's.
func TestSeedDemoIsIdempotent(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	ctx := context.Background()
	svc := tenants.NewService(pool, time.Now, tenants.WithCacheTTL(0), tenants.WithDemoKeys(true))
	first, err := svc.SeedDemo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	demo := tenants.DemoTenants()
	if len(first) != len(demo) {
		t.Fatalf("SeedDemo returned %d tenants, want %d", len(first), len(demo))
	}
	for i, d := range demo {
		tn, err := svc.Authenticate(ctx, d.APIKey)
		if err != nil || tn.Slug != d.Slug || tn.Name != d.Name || tn != first[i] {
			t.Fatalf("demo key %s = %+v, %v; want tenant %s as SeedDemo returned it (%+v)", d.APIKey, tn, err, d.Slug, first[i])
		}
	}
	if tn, keys, products := demoState(t, pool); tn != len(demo) || keys != len(demo) || products != 0 {
		t.Fatalf("after seeding: %d tenants, %d keys, %d products; want %d, %d, 0", tn, keys, products, len(demo), len(demo))
	}

	again, err := svc.SeedDemo(ctx)
	if err != nil {
		t.Fatalf("second SeedDemo: %v", err)
	}
	if tn, keys, products := demoState(t, pool); tn != len(demo) || keys != len(demo) || products != 0 {
		t.Fatalf("after seeding again: %d tenants, %d keys, %d products; want %d, %d, 0", tn, keys, products, len(demo), len(demo))
	}
	for i, d := range demo {
		if tn, err := svc.Authenticate(ctx, d.APIKey); err != nil || tn != first[i] || again[i] != first[i] {
			t.Fatalf("after seeding again, demo key %s = %+v, %v (returned %+v); want %+v", d.APIKey, tn, err, again[i], first[i])
		}
	}
}
