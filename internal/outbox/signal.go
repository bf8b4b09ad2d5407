package outbox

import (
	"sync"

	"github.com/google/uuid"
)

// Signal tells the dispatcher of this process that a transaction which
// appended events has committed, and for which tenant, so that it
// publishes them at once instead of at its next poll.
//
// It is deliberately not a NOTIFY from inside the business transaction.
// PostgreSQL queues notifications at commit under one database-wide lock
// held until the commit is durable, so a NOTIFY in every order transaction
// makes those commits run one at a time and halves throughput under load
// (docs/BENCHMARKS.md, "NOTIFY serialized commits"). The process that
// commits an event runs a dispatcher itself (api serve), so waking it in
// memory after the commit costs nothing. Dispatchers of other processes
// find the event at their next poll (the tuning's OutboxPollInterval) if this one
// cannot publish it, and operators' commands still wake every dispatcher
// with a NOTIFY of their own (OutboxNotify).
//
// Naming the tenant saves the round a statement: a round woken by
// Committed claims the named tenants' rows directly, without first
// listing the tenants that have due rows (OutboxDueTenants, the one
// statement of the dispatcher that reads every tenant's rows, and on
// Citus every shard). Rounds woken otherwise (CommittedAny, a
// notification, the poll) still list them.
//
// Call Committed after the commit, never before: a wake-up before the
// commit finds nothing to publish. Losing a wake-up (a crash right after
// the commit) delays the event by one poll; it never loses it.
type Signal struct {
	c chan struct{}

	mu sync.Mutex
	// tenants were named by commits since a round last took them.
	tenants map[uuid.UUID]struct{}
	// any says a wake-up named no tenant: the next round lists them.
	any bool
}

// NewSignal returns a Signal; pass it to NewDispatcher (WithSignal) and to
// the services that append events.
func NewSignal() *Signal {
	return &Signal{c: make(chan struct{}, 1), tenants: make(map[uuid.UUID]struct{})}
}

// Committed wakes the dispatcher for tenant's events. It never blocks:
// wake-ups that arrive while one is pending merge into it. A nil Signal
// does nothing, for processes and tests without a dispatcher.
func (s *Signal) Committed(tenant uuid.UUID) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.tenants[tenant] = struct{}{}
	s.mu.Unlock()
	s.wake()
}

// CommittedAny wakes the dispatcher for a commit that does not name its
// tenants (a webhook round's, which may touch many): its round lists the
// tenants with due rows. A nil Signal does nothing.
func (s *Signal) CommittedAny() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.any = true
	s.mu.Unlock()
	s.wake()
}

// wake sends the wake-up after the tenant was recorded, so that the round
// it wakes, or one that took the tenants before it, claims after the
// commit.
func (s *Signal) wake() {
	select {
	case s.c <- struct{}{}:
	default:
	}
}

// putBack returns tenants that a round took and did not get to (it
// failed first) for the next round to take, without waking one: the next
// commit's wake-up or the poll starts it.
func (s *Signal) putBack(tenants []uuid.UUID) {
	s.mu.Lock()
	for _, t := range tenants {
		s.tenants[t] = struct{}{}
	}
	s.mu.Unlock()
}

// take hands a round its work. A round that lists the tenants with due
// rows (list, or because a wake-up named no tenant: all) takes no named
// tenant: the list is bounded (maxTenantsPerRound) and may not reach
// them, so they stay for a round of their own, which take wakes. Any other
// round takes up to limit named tenants; the rest wake the next round.
//
// Only a woken round takes a wake-up that named no tenant: a poll's round
// (list) leaves it to the round its wake-up starts, which lists again. So
// every such wake-up gets a listing round that began after it, and a
// dispatcher's first rounds are the same however its start and its
// listener's first notification interleave.
func (s *Signal) take(list bool, limit int) (tenants []uuid.UUID, all bool) {
	s.mu.Lock()
	all = list || s.any
	if !list {
		s.any = false
	}
	if !all {
		for t := range s.tenants {
			if len(tenants) == limit {
				break
			}
			tenants = append(tenants, t)
			delete(s.tenants, t)
		}
	}
	more := len(s.tenants) > 0
	s.mu.Unlock()
	if more {
		s.wake()
	}
	return tenants, all
}
