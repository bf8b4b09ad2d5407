// The outage invariants: what a client that gave up while the database was
// away may see, and the grace an outage's edges get.

package chaos

import (
	"fmt"
	"strings"
	"time"
)

// outageGrace is how long after the database came back a client's call
// that gave up still counts as given up during the outage: the APIs first
// need to be ready again, and each dead connection in their pools fails one
// request.
const outageGrace = 10 * time.Second

// gaveUpDuringOutage reports whether a call ended without an answer, on a
// 5xx or on a 409 request_in_progress, while the database was away or the
// network to the database or the provider was broken (or within
// outageGrace after either). A client's retries are bounded, an outage of
// 20 s outlasts them, an attempt cut by it may hold its lease a while
// after (it could not give it back), and none of these answers promises
// anything: such a call is resumed after settling and must be definite
// then, but its giving up is not the service's fault. The broker's link is
// on no request's path.
func (c *checker) gaveUpDuringOutage(call Call) bool {
	inProgress := call.Status == 409 && call.Code == codeInProgress
	if call.Ended.IsZero() || (call.Status != 0 && call.Status < 500 && !inProgress) {
		return false
	}
	within := func(began, ended time.Time) bool {
		return !call.Ended.Before(began) && !call.Ended.After(ended.Add(outageGrace))
	}
	for _, o := range c.h.Outages {
		if within(o.Began, o.Ended) {
			return true
		}
	}
	for _, l := range c.h.LinkFaults {
		if l.Dep != DepNATS && within(l.Began, l.Ended) {
			return true
		}
	}
	return false
}

// GaveUpDuringOutages counts the calls whose client gave up while the
// database was away (see gaveUpDuringOutage).
func GaveUpDuringOutages(h History) int {
	c := &checker{h: h}
	n := 0
	for _, o := range h.Outcomes {
		for _, call := range o.Calls {
			if !call.Definite() && c.gaveUpDuringOutage(call) {
				n++
			}
		}
	}
	return n
}

// outages checks what the APIs answered while the database was away, and
// that they came back by themselves.
func (c *checker) outages() {
	for i, o := range c.h.Outages {
		bad := map[int][]string{}
		for _, p := range o.Probes {
			var problems []string
			if !p.Alive {
				problems = append(problems, "the process had exited")
			} else {
				if p.Healthz != 200 {
					problems = append(problems, fmt.Sprintf("/healthz answered %d", p.Healthz))
				}
				if p.Readyz != 503 {
					problems = append(problems, fmt.Sprintf("/readyz answered %d", p.Readyz))
				}
				if len(problems) > 0 && p.Err != "" {
					problems = append(problems, p.Err)
				}
			}
			if len(problems) > 0 {
				bad[p.API] = append(bad[p.API], fmt.Sprintf("%s after the database went: %s",
					p.At.Sub(o.Began).Round(time.Millisecond), strings.Join(problems, ", ")))
			}
		}
		for api, problems := range bad {
			c.add(UnhealthyDuringOutage, fmt.Sprintf("%s %d api-%d", o.Kind, i+1, api), "%s", strings.Join(problems, "; "))
		}
		for _, b := range o.Back {
			var problems []string
			if b.Ready < 0 {
				problems = append(problems, fmt.Sprintf("/readyz not 200 within %v", reconnectBound))
			}
			if b.Listening < 0 {
				problems = append(problems, fmt.Sprintf("no LISTEN connection for outbox notifications within %v", reconnectBound))
			}
			if len(problems) > 0 {
				c.add(NotReconnected, fmt.Sprintf("%s %d api-%d", o.Kind, i+1, b.API), "after the database came back: %s", strings.Join(problems, "; "))
			}
		}
	}
}
