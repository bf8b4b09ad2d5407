package httpapi

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
)

// guardedEcho serves GET /admin behind a guard of token on a clock the test
// moves, and counts the failures by result.
type guardedEcho struct {
	e     *echo.Echo
	mu    sync.Mutex
	now   time.Time
	fails map[string]int
}

func newGuardedEcho(token string) *guardedEcho {
	g := &guardedEcho{now: time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC), fails: map[string]int{}}
	guard := newAdminGuard(token, func() time.Time {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.now
	}, func(result string) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.fails[result]++
	})
	g.e = echo.New()
	g.e.HTTPErrorHandler = ErrorHandler(slog.New(slog.DiscardHandler))
	g.e.GET("/admin", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }, guard.middleware)
	return g
}

func (g *guardedEcho) advance(d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.now = g.now.Add(d)
}

func (g *guardedEcho) do(from, token string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, "/admin", nil)
	req.RemoteAddr = from
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	g.e.ServeHTTP(rec, req)
	return rec
}

// Failed operator authentications are limited per client address: the
// first AdminAuthBurst are 401, then every request of that address is 429
// rate_limited with Retry-After, the right token too (a guess made while
// limited learns nothing), until one failure's worth has refilled. Other
// addresses keep their own budget; a right token spends none; every
// failure is counted by result.
func TestAdminGuardLimitsFailuresPerAddress(t *testing.T) {
	t.Parallel()
	const token = "0123456789abcdef0123456789abcdef"
	g := newGuardedEcho(token)
	const attacker, operator = "192.0.2.7:40000", "198.51.100.2:50000"

	for range 3 {
		if rec := g.do(attacker, token); rec.Code != http.StatusNoContent {
			t.Fatalf("the right token: %d %s", rec.Code, rec.Body)
		}
	}
	for i := range AdminAuthBurst {
		if rec := g.do(attacker, fmt.Sprintf("guess-%d", i)); rec.Code != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d, want 401", i+1, rec.Code)
		}
	}
	for _, tok := range []string{"one-more-guess", token, ""} {
		rec := g.do("192.0.2.7:40001", tok) // another connection of the same address
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "12" ||
			rec.Header().Get(echo.HeaderContentType) != "application/problem+json" {
			t.Fatalf("past the budget, token %q: %d, Retry-After %q, %s; want 429 after 12 s, problem+json",
				tok, rec.Code, rec.Header().Get("Retry-After"), rec.Body)
		}
	}
	if rec := g.do(operator, token); rec.Code != http.StatusNoContent {
		t.Fatalf("another address with the right token: %d", rec.Code)
	}

	g.advance(AdminAuthEvery / 2)
	if rec := g.do(attacker, token); rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "6" {
		t.Fatalf("half a refill later: %d, Retry-After %q; want 429 after 6 s", rec.Code, rec.Header().Get("Retry-After"))
	}
	g.advance(AdminAuthEvery / 2)
	if rec := g.do(attacker, token); rec.Code != http.StatusNoContent {
		t.Fatalf("a refill later, the right token: %d", rec.Code)
	}
	if rec := g.do(attacker, "guess-again"); rec.Code != http.StatusUnauthorized {
		t.Fatalf("a refill later, a guess: %d, want 401", rec.Code)
	}
	if rec := g.do(attacker, "and-again"); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("the refilled failure spent: %d, want 429", rec.Code)
	}

	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fails[AdminAuthUnauthorized] != AdminAuthBurst+1 || g.fails[AdminAuthRateLimited] != 5 {
		t.Fatalf("counted %v, want %d unauthorized and 5 rate_limited", g.fails, AdminAuthBurst+1)
	}
}

// An IPv6 client is limited by its /64, so the addresses of one host's
// network do not each get a budget; and however many addresses fail, the
// table of budgets stays bounded, the addresses past the bound sharing one.
func TestAdminGuardBoundsItsAddresses(t *testing.T) {
	t.Parallel()
	const token = "0123456789abcdef0123456789abcdef"
	g := newGuardedEcho(token)
	for i := range AdminAuthBurst {
		if rec := g.do(fmt.Sprintf("[2001:db8:1:2::%x]:443", i), "guess"); rec.Code != http.StatusUnauthorized {
			t.Fatalf("IPv6 failure %d: %d", i+1, rec.Code)
		}
	}
	if rec := g.do("[2001:db8:1:2:ffff::1]:443", "guess"); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("another address of the same /64: %d, want 429", rec.Code)
	}
	if rec := g.do("[2001:db8:1:3::1]:443", "guess"); rec.Code != http.StatusUnauthorized {
		t.Fatalf("another /64: %d, want 401", rec.Code)
	}

	guard := newAdminGuard(token, time.Now, func(string) {})
	for i := range maxAdminAuthAddrs + 100 {
		guard.take(clientPrefix(fmt.Sprintf("10.%d.%d.%d:1", i>>16&0xff, i>>8&0xff, i&0xff)))
	}
	if n := len(guard.budgets); n > maxAdminAuthAddrs+1 {
		t.Fatalf("%d budgets, want at most %d", n, maxAdminAuthAddrs+1)
	}
	for range AdminAuthBurst {
		guard.take(clientPrefix("10.200.0.1:1"))
	}
	if _, ok := guard.take(clientPrefix("10.200.0.2:1")); ok {
		t.Fatal("an address past the bound escaped the shared budget")
	}
}
