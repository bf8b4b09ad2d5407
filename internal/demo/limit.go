package demo

import (
	"sync"
	"time"

	"github.com/google/uuid"
	"golang.org/x/time/rate"
)

// The default bound of POST /demo/events/{id}/replay per tenant: a burst of
// DefaultReplayBurst, then one more every DefaultReplayEvery. A person
// clicking the demo's replay button never meets it; a loop that floods the
// broker with republished events does.
const (
	DefaultReplayBurst = 5
	DefaultReplayEvery = time.Second
)

// maxLimited bounds the tenants whose replay budget is remembered. Only
// authenticated tenants reach the limiter, and a service has few; more than
// this many is a flood, and the budgets start over.
const maxLimited = 10_000

// tenantLimiter is a token bucket per tenant on an injected clock.
type tenantLimiter struct {
	every time.Duration
	burst int
	now   func() time.Time

	mu      sync.Mutex
	buckets map[uuid.UUID]*rate.Limiter
}

func newTenantLimiter(every time.Duration, burst int, now func() time.Time) *tenantLimiter {
	return &tenantLimiter{every: every, burst: burst, now: now, buckets: make(map[uuid.UUID]*rate.Limiter)}
}

// allow takes one token of tenant's bucket, or reports how long until one
// is there.
func (l *tenantLimiter) allow(tenant uuid.UUID) (ok bool, retryAfter time.Duration) {
	now := l.now()
	l.mu.Lock()
	b, found := l.buckets[tenant]
	if !found {
		if len(l.buckets) >= maxLimited {
			clear(l.buckets)
		}
		b = rate.NewLimiter(rate.Every(l.every), l.burst)
		l.buckets[tenant] = b
	}
	l.mu.Unlock()
	r := b.ReserveN(now, 1)
	if !r.OK() {
		return false, l.every
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now) // refused: the token is not spent
		return false, d
	}
	return true, 0
}
