package tenants

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/testdb"
)

// The key cache never holds more than maxCachedKeys entries, however many
// good keys a flood brings, and it keeps caching once it is full; unknown
// keys never enter it. (Internal: the bound is ten thousand keys, which a
// test fills directly rather than through as many tenants.)
func TestCacheStaysBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	s := NewService(testdb.Pool(t), func() time.Time { return now }, WithCacheTTL(time.Minute))
	tn, key, err := s.Create(ctx, "bounded", "Bounded")
	if err != nil {
		t.Fatal(err)
	}

	for i := range 100 {
		if _, err := s.Authenticate(ctx, fmt.Sprintf("sk_live_unknown%d", i)); !errors.Is(err, ErrUnknownKey) {
			t.Fatalf("unknown key: %v", err)
		}
	}
	if n := len(s.cache); n != 0 {
		t.Fatalf("unknown keys left %d cache entries, want 0", n)
	}

	// Full: as many entries as the bound allows, of other good keys.
	for i := range maxCachedKeys {
		s.cache[sha256.Sum256(fmt.Appendf(nil, "other key %d", i))] = cached{tenant: tn, expires: now.Add(time.Minute)}
	}
	if _, err := s.Authenticate(ctx, key); err != nil {
		t.Fatal(err)
	}
	if n := len(s.cache); n > maxCachedKeys {
		t.Fatalf("cache holds %d entries, more than its bound %d", n, maxCachedKeys)
	}
	if c, ok := s.cache[HashKey(key)]; !ok || c.tenant != tn {
		t.Fatal("the key authenticated last is not cached: a full cache stopped caching")
	}
}
