package httpapi

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/tenants"
)

// Admission defaults: the service's tuning fields MaxInFlight,
// WebhookMaxInFlight, TenantShare, AdmissionWait and BodyReadTimeout
// (app.Tuning).
//
// DefaultMaxInFlight is twice the default pool (DB_MAX_CONNS, 20): enough
// to keep every connection busy while payments wait on the provider, few
// enough that an admitted request waits little for its connection.
// DefaultWebhookMaxInFlight is a quarter of that: a delivery is a signature
// check and one insert, and a provider delivers a few at a time (the
// simulator one at a time). DefaultTenantShare leaves a quarter of
// MaxInFlight to the other tenants while they have requests in flight.
// DefaultBodyReadTimeout lets a body of the largest size (64 KiB) come at
// 32 KiB/s; the bodies of the API are a few hundred bytes and come with
// their headers.
const (
	DefaultMaxInFlight        = 40
	DefaultWebhookMaxInFlight = 10
	DefaultTenantShare        = 0.75
	DefaultAdmissionWait      = 100 * time.Millisecond
	DefaultBodyReadTimeout    = 2 * time.Second
)

// The pools of admission slots, also the values of the metrics' pool label.
const (
	PoolAPI      = "api"      // the tenants' API: /v1 and /demo
	PoolWebhooks = "webhooks" // the provider's deliveries: /webhooks
)

// poolOf is the pool of slots a route takes one of: the routes that do the
// service's work (the API, the provider's webhooks, the demo endpoints).
// Probes, /metrics, the API description, the UI's files and the operator's
// endpoints take none and are always answered (""): a load balancer, a
// scraper and an operator must still see an overloaded service, or they
// cannot tell it from a dead one.
func poolOf(route string) string {
	switch {
	case strings.HasPrefix(route, "/v1/"), strings.HasPrefix(route, "/demo/"):
		return PoolAPI
	case strings.HasPrefix(route, "/webhooks/"):
		return PoolWebhooks
	}
	return ""
}

// admitted reports whether a route is subject to admission.
func admitted(route string) bool { return poolOf(route) != "" }

// Admission bounds how many requests the service works on at once, so that
// past capacity it answers at once instead of queueing without bound for
// the pool's connections: latency stays bounded, goroutines and memory
// stay flat. A request holds a slot only while the service works on it,
// and no one client, tenant or caller can take every slot from the others:
//
//   - The body comes first. A request's body is read, whole and bounded
//     (wire.MaxBodyBytes, and BodyReadTimeout from when its headers are
//     in), before the request asks for a slot, so a client that sends its
//     body slowly holds a connection, never a slot. A body later than that
//     is answered 408 request_timeout.
//   - Two pools. The tenants' API (/v1, /demo) has MaxInFlight slots, the
//     provider's deliveries (/webhooks, which anyone can call: the signature
//     is checked by the handler) WebhookMaxInFlight of their own, so neither
//     can drain the other.
//   - A share per tenant. While another tenant has a request in flight, one
//     tenant holds at most TenantShare of the API's slots at once (at least
//     one); alone, it may hold all but a few (loneReserve), kept free for
//     the first request of another tenant, which then brings the share into
//     force. A request past its tenant's limit is shed at once, once its key
//     is checked, and gives its slot back: waiting would hold a slot the
//     other tenants may need. A deployment with one tenant so loses almost
//     no capacity to the rule.
//
// A request that finds its pool full waits at most wait for a slot and is
// then answered 503 overloaded with Retry-After, before its key is checked
// or anything is done; the client's retry with the same Idempotency-Key is
// safe because nothing was done.
//
// The limit is of requests, not of connections: the database pool
// (DB_MAX_CONNS) serves the admitted ones, and a limit about twice the pool
// keeps it busy while bounding the wait for a connection to
// limit/throughput.
type Admission struct {
	api, webhooks *slotPool
	// tenantLimit is a tenant's share of the API's slots while another
	// tenant has one; loneLimit what it may hold alone.
	tenantLimit, loneLimit int
	wait                   time.Duration
	bodyTimeout            time.Duration
	onShed                 func(route string)
	mu                     sync.Mutex
	byTenant               map[uuid.UUID]int // the API's slots each tenant holds
}

// slotPool is one pool of admission slots.
type slotPool struct {
	slots    chan struct{}
	inFlight atomic.Int64
}

func newSlotPool(limit int) *slotPool {
	return &slotPool{slots: make(chan struct{}, max(limit, 1))}
}

// AdmissionOption configures NewAdmission.
type AdmissionOption func(*Admission)

// WithShedObserver receives the route template of every request answered
// 503 overloaded, e.g. for metrics (default none). It must not block.
func WithShedObserver(fn func(route string)) AdmissionOption {
	return func(a *Admission) {
		if fn != nil {
			a.onShed = fn
		}
	}
}

// WithWebhookLimit admits n deliveries of the provider at once, in a pool
// of their own (at least 1; default DefaultWebhookMaxInFlight).
func WithWebhookLimit(n int) AdmissionOption {
	return func(a *Admission) { a.webhooks = newSlotPool(n) }
}

// WithTenantShare lets one tenant hold at most share of the API's slots at
// once (at least one slot; default DefaultTenantShare; 1: all of them).
func WithTenantShare(share float64) AdmissionOption {
	return func(a *Admission) {
		if share > 0 && share <= 1 {
			a.tenantLimit = tenantLimit(cap(a.api.slots), share)
			a.loneLimit = max(loneLimit(cap(a.api.slots)), a.tenantLimit)
		}
	}
}

// WithBodyReadTimeout bounds the wait for a request's body from when its
// headers are in (default DefaultBodyReadTimeout); the server's read
// timeout still bounds the whole request.
func WithBodyReadTimeout(d time.Duration) AdmissionOption {
	return func(a *Admission) {
		if d > 0 {
			a.bodyTimeout = d
		}
	}
}

func tenantLimit(limit int, share float64) int {
	return max(int(float64(limit)*share), 1)
}

// loneLimit is what one tenant may hold of limit slots while no other
// tenant holds any: all but loneReserve of them.
func loneLimit(limit int) int { return max(limit-loneReserve(limit), 1) }

// loneReserve is how many of limit slots a lone tenant leaves free: a
// twentieth, at least one, so that another tenant's first request finds a
// slot at once (2 of the default 40).
func loneReserve(limit int) int { return max(limit/20, 1) }

// NewAdmission admits limit requests of the tenants' API at once (at least
// 1); one past the limit waits up to wait for a slot (0: not at all).
func NewAdmission(limit int, wait time.Duration, opts ...AdmissionOption) *Admission {
	a := &Admission{
		api:         newSlotPool(limit),
		webhooks:    newSlotPool(DefaultWebhookMaxInFlight),
		tenantLimit: tenantLimit(max(limit, 1), DefaultTenantShare),
		loneLimit:   max(loneLimit(max(limit, 1)), tenantLimit(max(limit, 1), DefaultTenantShare)),
		wait:        max(wait, 0),
		bodyTimeout: DefaultBodyReadTimeout,
		onShed:      func(string) {},
		byTenant:    make(map[uuid.UUID]int),
	}
	for _, opt := range opts {
		opt(a)
	}
	return a
}

// InFlight is the number of admitted requests of pool (PoolAPI,
// PoolWebhooks) being worked on now.
func (a *Admission) InFlight(pool string) int64 { return a.pool(pool).inFlight.Load() }

// Limit is the number of requests of pool admitted at once.
func (a *Admission) Limit(pool string) int { return cap(a.pool(pool).slots) }

// TenantLimit is the number of the API's slots one tenant holds at most
// while another tenant holds some; LoneLimit while none does.
func (a *Admission) TenantLimit() int { return a.tenantLimit }

// LoneLimit: see TenantLimit.
func (a *Admission) LoneLimit() int { return a.loneLimit }

func (a *Admission) pool(name string) *slotPool {
	if name == PoolWebhooks {
		return a.webhooks
	}
	return a.api
}

func (a *Admission) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		route := c.Path()
		name := poolOf(route)
		if name == "" {
			return next(c)
		}
		if err := readBodyFirst(c, a.bodyTimeout); err != nil {
			return err
		}
		p := a.pool(name)
		select {
		case p.slots <- struct{}{}:
		default:
			if err := a.await(c, p, route); err != nil {
				return err
			}
		}
		p.inFlight.Add(1)
		defer func() {
			p.inFlight.Add(-1)
			<-p.slots
		}()
		return next(c)
	}
}

// await waits up to a.wait for a slot of p; a request that gets none, or
// whose client goes away first, is answered without one.
func (a *Admission) await(c echo.Context, p *slotPool, route string) error {
	t := time.NewTimer(a.wait)
	defer t.Stop()
	select {
	case p.slots <- struct{}{}:
		return nil
	case <-c.Request().Context().Done():
		return &problem.Error{Code: problem.ClientClosedRequest, Detail: "The client went away while the request waited for capacity.", Err: c.Request().Context().Err()}
	case <-t.C:
		a.onShed(route)
		return &problem.Error{Code: problem.Overloaded, Detail: "The service is at capacity and did not start this request. Nothing was done: retry after Retry-After, with the same Idempotency-Key.", RetryAfter: time.Second}
	}
}

// tenantShare runs after the key check (tenants.Middleware), inside the
// slot the request already holds: a tenant that holds its limit of the
// API's slots (its share while another tenant holds some, all but the
// reserve alone) has its further requests shed at once, and the slot they
// took goes back to the others.
func (a *Admission) tenantShare(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := tenants.FromContext(c).ID
		a.mu.Lock()
		held := a.byTenant[id]
		limit := a.tenantLimit
		if others := len(a.byTenant) - min(held, 1); others == 0 {
			limit = a.loneLimit
		}
		if held >= limit {
			a.mu.Unlock()
			a.onShed(c.Path())
			return &problem.Error{Code: problem.Overloaded, Detail: "Your requests in progress hold your share of the service's capacity; this one was not started. Nothing was done: retry after Retry-After, with the same Idempotency-Key.", RetryAfter: time.Second}
		}
		a.byTenant[id] = held + 1
		a.mu.Unlock()
		defer func() {
			a.mu.Lock()
			if a.byTenant[id]--; a.byTenant[id] == 0 {
				delete(a.byTenant, id)
			}
			a.mu.Unlock()
		}()
		return next(c)
	}
}

// authenticated is auth followed by the tenant's share of admission: the
// middleware of every route that authenticates a tenant.
func (a *Admission) authenticated(auth echo.MiddlewareFunc) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc { return auth(a.tenantShare(next)) }
}
