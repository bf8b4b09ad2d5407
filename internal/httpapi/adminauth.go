package httpapi

import (
	"crypto/subtle"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/problem"
)

// MinAdminTokenLen is the shortest operator token (ADMIN_TOKEN) the service
// accepts: 32 characters, 128 bits or more when they are random hex. The
// token is the one secret of the operator's endpoints, which act on every
// tenant; a short one could be guessed.
const MinAdminTokenLen = 32

// The limit of failed operator authentications per client address: a
// bucket of AdminAuthBurst failures, refilled by one every AdminAuthEvery.
// An operator who mistypes the token a few times waits seconds; a guesser
// gets 5 tries a minute, which against a token of MinAdminTokenLen random
// characters is nothing.
const (
	AdminAuthBurst = 5
	AdminAuthEvery = 12 * time.Second
)

// The results of failed operator authentications, as counted by
// WithAdminAuthObserver: refused with 401 (no token, or another one), or
// with 429 because the address used up its failures.
const (
	AdminAuthUnauthorized = "unauthorized"
	AdminAuthRateLimited  = "rate_limited"
)

// AdminAuthResults returns every result an admin authentication failure
// is counted with, for metrics declared before the first failure.
func AdminAuthResults() []string { return []string{AdminAuthUnauthorized, AdminAuthRateLimited} }

// maxAdminAuthAddrs bounds the addresses whose failures are tracked at
// once. Past it, addresses whose budget has refilled are forgotten; if all
// are still spending theirs, a new address shares one budget with every
// other new one, so no number of addresses grows the table or escapes the
// limit.
const maxAdminAuthAddrs = 1024

// adminGuard authenticates the operator's requests with the bearer token
// (compared in constant time, in the one Authorization header) and limits
// failed attempts per client address: an address that used up its
// failures gets 429 rate_limited with Retry-After, before its token is
// compared, so that a guess made while limited learns nothing, also when it
// is right. An IPv6 client is limited by its /64, which a single host
// usually holds whole. The address is the connection's: behind a proxy,
// every client shares the proxy's budget.
type adminGuard struct {
	token   []byte
	now     func() time.Time
	onFail  func(result string)
	mu      sync.Mutex
	budgets map[netip.Prefix]*adminBudget
}

// adminBudget is one address's bucket of failures: tokens left at the time
// of the last change.
type adminBudget struct {
	tokens float64
	at     time.Time
}

func newAdminGuard(token string, now func() time.Time, onFail func(result string)) *adminGuard {
	return &adminGuard{token: []byte(token), now: now, onFail: onFail, budgets: make(map[netip.Prefix]*adminBudget)}
}

func (g *adminGuard) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		addr := clientPrefix(c.Request().RemoteAddr)
		if wait, ok := g.take(addr); !ok {
			g.onFail(AdminAuthRateLimited)
			return &problem.Error{Code: problem.RateLimited, RetryAfter: wait,
				Detail: fmt.Sprintf("Too many failed operator authentications from this address: at most %d, then one every %s. Retry after the Retry-After seconds.", AdminAuthBurst, AdminAuthEvery)}
		}
		values := c.Request().Header.Values("Authorization")
		if len(values) != 1 {
			g.onFail(AdminAuthUnauthorized)
			return problem.New(problem.Unauthorized, "Send the operator token in exactly one Authorization header.")
		}
		got, ok := strings.CutPrefix(values[0], "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), g.token) != 1 {
			g.onFail(AdminAuthUnauthorized)
			return problem.New(problem.Unauthorized, "The operator token is not valid.")
		}
		g.giveBack(addr)
		return next(c)
	}
}

// take spends one failure of addr's budget before the token is compared
// (giveBack returns it when the token is right), so that concurrent
// guesses cannot all pass the check before any is counted. It reports
// false, and how long until one failure is available again, when the
// budget is spent.
func (g *adminGuard) take(addr netip.Prefix) (time.Duration, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	b := g.budget(addr, now)
	b.tokens = min(AdminAuthBurst, b.tokens+float64(now.Sub(b.at))/float64(AdminAuthEvery))
	b.at = now
	if b.tokens < 1 {
		return time.Duration((1 - b.tokens) * float64(AdminAuthEvery)), false
	}
	b.tokens--
	return 0, true
}

func (g *adminGuard) giveBack(addr netip.Prefix) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if b, ok := g.budgets[addr]; ok {
		b.tokens = min(AdminAuthBurst, b.tokens+1)
	}
}

// budget returns addr's budget, making it if needed within
// maxAdminAuthAddrs (see there). g.mu is held.
func (g *adminGuard) budget(addr netip.Prefix, now time.Time) *adminBudget {
	if b, ok := g.budgets[addr]; ok {
		return b
	}
	if len(g.budgets) >= maxAdminAuthAddrs {
		for a, b := range g.budgets {
			if b.tokens+float64(now.Sub(b.at))/float64(AdminAuthEvery) >= AdminAuthBurst {
				delete(g.budgets, a)
			}
		}
		if len(g.budgets) >= maxAdminAuthAddrs {
			// The shared budget of the addresses not tracked: one entry
			// past the bound.
			addr = netip.Prefix{}
			if b, ok := g.budgets[addr]; ok {
				return b
			}
		}
	}
	b := &adminBudget{tokens: AdminAuthBurst, at: now}
	g.budgets[addr] = b
	return b
}

// clientPrefix is the budget's key of a connection's remote address: the
// address itself for IPv4, its /64 for IPv6, and one shared key for an
// address that does not parse (none does not, from net/http).
func clientPrefix(remoteAddr string) netip.Prefix {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Prefix{}
	}
	a = a.Unmap()
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits) // bits is within the address's length
	return p
}
