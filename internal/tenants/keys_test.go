package tenants_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/tenants"
)

// A rotated old key works for exactly its overlap, even in a process that
// cached it: the cache never outlives the end a rotation gave the key. The
// new key works at once, and after the overlap only it does.
func TestRotatedKeyWorksForItsOverlapThenStops(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const ttl, overlap = 45 * time.Second, 10 * time.Minute
	cached, _ := b.service(t, tenants.WithCacheTTL(ttl))
	uncached, _ := b.service(t, tenants.WithCacheTTL(0))
	authenticates(t, cached, b.a.APIKey, b.a)

	k, fresh, old, err := tenants.NewService(b.pool, b.clock.Now).RotateKey(context.Background(), b.a.Slug, overlap)
	if err != nil {
		t.Fatal(err)
	}
	if !liveKey.MatchString(fresh) || k.Prefix != fresh[:12] || k.TenantID != b.a.ID {
		t.Fatalf("RotateKey = %+v, %q; want a new sk_live_ key of %s", k, fresh, b.a.Slug)
	}
	if len(old) != 1 || old[0].RevokedAt == nil || !old[0].RevokedAt.Equal(b.clock.Now().Add(overlap)) {
		t.Fatalf("RotateKey ended %+v; want the one old key, ending after the overlap", old)
	}
	for _, svc := range []*tenants.Service{cached, uncached} {
		authenticates(t, svc, fresh, b.a)
		authenticates(t, svc, b.a.APIKey, b.a)
	}
	// A second before the end both processes look the old key up again
	// (the first cache entry expired long ago) and still accept it.
	b.clock.Advance(overlap - time.Second)
	authenticates(t, cached, b.a.APIKey, b.a)
	authenticates(t, uncached, b.a.APIKey, b.a)
	b.clock.Advance(time.Second)
	refused(t, cached, b.a.APIKey)
	refused(t, uncached, b.a.APIKey)
	authenticates(t, cached, fresh, b.a)
	authenticates(t, uncached, b.b.APIKey, b.b) // another tenant's key is untouched
}

// Rotating with no overlap ends the old key at once (for a process that
// cached it: within its cache TTL, like a revocation).
func TestRotationWithoutOverlapEndsTheOldKeyAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	uncached, _ := b.service(t, tenants.WithCacheTTL(0))
	_, fresh, _, err := tenants.NewService(b.pool, b.clock.Now).RotateKey(context.Background(), b.a.Slug, 0)
	if err != nil {
		t.Fatal(err)
	}
	refused(t, uncached, b.a.APIKey)
	authenticates(t, uncached, fresh, b.a)
}

// A revocation never gives a key more time: rotating again with a longer
// overlap leaves the earlier end, and revoking a key in its overlap ends it
// now. Revoking a revoked key changes nothing.
func TestRevocationNeverExtendsAKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	svc := tenants.NewService(b.pool, b.clock.Now, tenants.WithCacheTTL(0))
	if _, _, _, err := svc.RotateKey(ctx, b.a.Slug, time.Hour); err != nil {
		t.Fatal(err)
	}
	_, _, old, err := svc.RotateKey(ctx, b.a.Slug, 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(old) != 1 { // the first rotation's key; the original ends in an hour still
		t.Fatalf("the second rotation ended %d keys, want 1 (the first rotation's)", len(old))
	}
	keys, err := svc.Keys(ctx, b.a.Slug)
	if err != nil || len(keys) != 3 {
		t.Fatalf("Keys = %+v, %v; want 3", keys, err)
	}
	if end := keyWithPrefix(t, keys, b.a.APIKey).RevokedAt; end == nil || !end.Equal(b.clock.Now().Add(time.Hour)) {
		t.Fatalf("the original key ends at %v, want in an hour: a rotation extended it", end)
	}

	k, err := svc.RevokeKey(ctx, b.a.APIKey)
	if err != nil || !k.RevokedAt.Equal(b.clock.Now()) {
		t.Fatalf("RevokeKey in the overlap = %+v, %v; want it ended now", k, err)
	}
	refused(t, svc, b.a.APIKey)
	b.clock.Advance(time.Minute)
	again, err := svc.RevokeKey(ctx, k.ID.String())
	if err != nil || !again.RevokedAt.Equal(*k.RevokedAt) {
		t.Fatalf("RevokeKey of a revoked key = %+v, %v; want it unchanged (%v)", again, err, k.RevokedAt)
	}
}

// RevokeKey finds a key by its id, by the key itself, or by the prefix Keys
// shows; a prefix two keys share is refused, naming both ids; nothing else
// matches.
func TestRevokeKeyByIDKeyOrPrefix(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	svc := tenants.NewService(b.pool, b.clock.Now, tenants.WithCacheTTL(0))
	byID, _, err := svc.CreateKey(ctx, b.a.Slug)
	if err != nil {
		t.Fatal(err)
	}
	byPrefix, byPrefixRaw, err := svc.CreateKey(ctx, b.a.Slug)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ ref, key string }{
		{byID.ID.String(), ""},
		{byPrefix.Prefix, byPrefixRaw},
		{b.a.APIKey, b.a.APIKey},
	} {
		k, err := svc.RevokeKey(ctx, tc.ref)
		if err != nil || k.TenantID != b.a.ID || k.RevokedAt == nil {
			t.Fatalf("RevokeKey(%q) = %+v, %v", tc.ref, k, err)
		}
		if tc.key != "" {
			refused(t, svc, tc.key)
		}
	}
	for _, ref := range []string{"sk_live_zzzz", "01a22931-c9da-71c4-a494-fc128972f4cb", b.b.APIKey + "x", ""} {
		if _, err := svc.RevokeKey(ctx, ref); !errors.Is(err, tenants.ErrNoSuchKey) {
			t.Errorf("RevokeKey(%q) = %v, want ErrNoSuchKey", ref, err)
		}
	}
	authenticates(t, svc, b.b.APIKey, b.b)

	// Two keys with one prefix: make the second's stored prefix the first's.
	shared, _, err := svc.CreateKey(ctx, b.b.Slug)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `UPDATE api_keys SET key_prefix = $1 WHERE id = $2`, b.b.APIKey[:12], shared.ID); err != nil {
		t.Fatal(err)
	}
	_, err = svc.RevokeKey(ctx, b.b.APIKey[:12])
	if !errors.Is(err, tenants.ErrAmbiguousKey) || !strings.Contains(err.Error(), shared.ID.String()) {
		t.Fatalf("RevokeKey(shared prefix) = %v, want ErrAmbiguousKey naming the ids", err)
	}
	authenticates(t, svc, b.b.APIKey, b.b)
}

// Keys lists every key of the tenant, oldest first, with its prefix, its
// creation and its end, and never the key; CreateKey adds one and leaves
// the others working. An unknown slug is ErrUnknownTenant.
func TestCreateKeyAndKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	svc := tenants.NewService(b.pool, b.clock.Now, tenants.WithCacheTTL(0))
	k, raw, err := svc.CreateKey(ctx, b.a.Slug)
	if err != nil || !liveKey.MatchString(raw) || raw == b.a.APIKey {
		t.Fatalf("CreateKey = %+v, %q, %v", k, raw, err)
	}
	authenticates(t, svc, raw, b.a)
	authenticates(t, svc, b.a.APIKey, b.a)
	b.revoke(t, raw)

	keys, err := svc.Keys(ctx, b.a.Slug)
	if err != nil || len(keys) != 2 {
		t.Fatalf("Keys = %+v, %v; want 2", keys, err)
	}
	if o := keyWithPrefix(t, keys, b.a.APIKey); o.RevokedAt != nil || !o.WorksAt(b.clock.Now()) {
		t.Errorf("original key %+v; want it live", o)
	}
	if c := keyWithPrefix(t, keys, raw); c.ID != k.ID || c.RevokedAt == nil || c.WorksAt(b.clock.Now()) {
		t.Errorf("created key %+v; want it (id %s) revoked", c, k.ID)
	}
	for _, key := range keys {
		if strings.Contains(key.Prefix, raw[12:]) || len(key.Prefix) != 12 {
			t.Errorf("Keys shows %q: more than the prefix", key.Prefix)
		}
	}
	if _, _, err := svc.CreateKey(ctx, "nobody"); !errors.Is(err, tenants.ErrUnknownTenant) {
		t.Errorf("CreateKey(unknown) = %v, want ErrUnknownTenant", err)
	}
	if _, err := svc.Keys(ctx, "nobody"); !errors.Is(err, tenants.ErrUnknownTenant) {
		t.Errorf("Keys(unknown) = %v, want ErrUnknownTenant", err)
	}
	if _, _, _, err := svc.RotateKey(ctx, "nobody", time.Hour); !errors.Is(err, tenants.ErrUnknownTenant) {
		t.Errorf("RotateKey(unknown) = %v, want ErrUnknownTenant", err)
	}
}

// Outside demo mode the public demo keys are refused before any lookup,
// even in a database seeded in demo mode; LiveDemoKeys names those that
// still work there until they are revoked; seeding again in demo mode makes
// them work again.
func TestDemoKeysWorkOnlyInDemoMode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	demo := tenants.NewService(b.pool, b.clock.Now, tenants.WithCacheTTL(0), tenants.WithDemoKeys(true))
	if _, err := demo.SeedDemo(ctx); err != nil {
		t.Fatal(err)
	}
	prod, cutOff := b.service(t, tenants.WithCacheTTL(0))
	for _, d := range tenants.DemoTenants() {
		if tn, err := demo.Authenticate(ctx, d.APIKey); err != nil || tn.Slug != d.Slug {
			t.Fatalf("demo mode: %s = %+v, %v", d.APIKey, tn, err)
		}
		refused(t, prod, d.APIKey)
	}
	liveDemoKeys := func(want ...string) {
		t.Helper()
		live, err := demo.LiveDemoKeys(ctx)
		if err != nil || strings.Join(live, " ") != strings.Join(want, " ") {
			t.Fatalf("LiveDemoKeys = %q, %v; want %q", live, err, want)
		}
	}
	liveDemoKeys("sk_test_acme", "sk_test_globex")
	b.revoke(t, "sk_test_acme")
	liveDemoKeys("sk_test_globex")
	b.revoke(t, "sk_test_globex")
	liveDemoKeys()
	if _, err := demo.SeedDemo(ctx); err != nil {
		t.Fatal(err)
	}
	liveDemoKeys("sk_test_acme", "sk_test_globex")
	cutOff()
	refused(t, prod, "sk_test_acme") // no lookup: the database is gone
}

// keyWithPrefix returns the one key of keys that shows raw's prefix. (The
// fixtures' keys are made on the wall clock, the tests' on a stopped one, so
// creation order says nothing here.)
func keyWithPrefix(t *testing.T, keys []tenants.Key, raw string) tenants.Key {
	t.Helper()
	var found []tenants.Key
	for _, k := range keys {
		if k.Prefix == raw[:12] {
			found = append(found, k)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d keys show the prefix %s, want 1", len(found), raw[:12])
	}
	return found[0]
}
