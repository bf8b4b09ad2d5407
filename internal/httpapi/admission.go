package httpapi

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/problem"
)

// Admission defaults: the service's tuning fields MaxInFlight and
// AdmissionWait (app.Tuning).
// DefaultMaxInFlight is twice the default pool (DB_MAX_CONNS, 20): enough
// to keep every connection busy while payments wait on the provider, few
// enough that an admitted request waits little for its connection.
const (
	DefaultMaxInFlight   = 40
	DefaultAdmissionWait = 100 * time.Millisecond
)

// admitted reports whether a route is subject to admission: the routes that
// do the service's work (the API, the provider's webhooks, the demo
// endpoints). Probes, /metrics, the API description, the UI's files and the
// operator's endpoints are always answered: a load balancer, a scraper and
// an operator must still see an overloaded service, or they cannot tell it
// from a dead one.
func admitted(route string) bool {
	return strings.HasPrefix(route, "/v1/") || strings.HasPrefix(route, "/webhooks/") || strings.HasPrefix(route, "/demo/")
}

// Admission bounds how many requests the service works on at once. Past
// capacity a request waits at most wait for a slot and is then answered
// 503 overloaded with Retry-After, at once and before its body is read,
// instead of queueing without bound for the pool's connections: latency
// stays bounded, goroutines and memory stay flat, and the client's retry
// with the same Idempotency-Key is safe because nothing was done.
//
// The limit is of requests, not of connections: the pool (DB_MAX_CONNS)
// serves the admitted ones, and a limit about twice the pool keeps it busy
// while bounding the wait for a connection to limit/throughput.
type Admission struct {
	slots    chan struct{}
	wait     time.Duration
	inFlight atomic.Int64
	onShed   func(route string)
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

// NewAdmission admits limit requests at once (at least 1); one past the
// limit waits up to wait for a slot (0: not at all).
func NewAdmission(limit int, wait time.Duration, opts ...AdmissionOption) *Admission {
	a := &Admission{slots: make(chan struct{}, max(limit, 1)), wait: max(wait, 0), onShed: func(string) {}}
	for _, opt := range opts {
		opt(a)
	}
	return a
}

// InFlight is the number of admitted requests being worked on now.
func (a *Admission) InFlight() int64 { return a.inFlight.Load() }

// Limit is the number of requests admitted at once.
func (a *Admission) Limit() int { return cap(a.slots) }

func (a *Admission) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		route := c.Path()
		if !admitted(route) {
			return next(c)
		}
		select {
		case a.slots <- struct{}{}:
		default:
			if err := a.await(c, route); err != nil {
				return err
			}
		}
		a.inFlight.Add(1)
		defer func() {
			a.inFlight.Add(-1)
			<-a.slots
		}()
		return next(c)
	}
}

// await waits up to a.wait for a slot; a request that gets none, or whose
// client goes away first, is answered without one.
func (a *Admission) await(c echo.Context, route string) error {
	t := time.NewTimer(a.wait)
	defer t.Stop()
	select {
	case a.slots <- struct{}{}:
		return nil
	case <-c.Request().Context().Done():
		return &problem.Error{Code: problem.ClientClosedRequest, Detail: "The client went away while the request waited for capacity.", Err: c.Request().Context().Err()}
	case <-t.C:
		a.onShed(route)
		return &problem.Error{Code: problem.Overloaded, Detail: "The service is at capacity and did not start this request. Nothing was done: retry after Retry-After, with the same Idempotency-Key.", RetryAfter: time.Second}
	}
}
