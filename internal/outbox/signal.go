package outbox

// Signal tells the dispatcher of this process that a transaction which
// appended events has committed, so that it publishes them at once instead
// of at its next poll.
//
// It is deliberately not a NOTIFY from inside the business transaction.
// PostgreSQL queues notifications at commit under one database-wide lock
// held until the commit is durable, so a NOTIFY in every order transaction
// makes those commits run one at a time and halves throughput under load
// (docs/BENCHMARKS.md, "NOTIFY serialized commits"). The process that
// commits an event runs a dispatcher itself (api serve), so waking it in
// memory after the commit costs nothing. Dispatchers of other processes
// find the event at their next poll (OUTBOX_POLL_INTERVAL) if this one
// cannot publish it, and operators' commands still wake every dispatcher
// with a NOTIFY of their own (OutboxNotify).
//
// Call Committed after the commit, never before: a wake-up before the
// commit finds nothing to publish. Losing a wake-up (a crash right after
// the commit) delays the event by one poll; it never loses it.
type Signal struct {
	c chan struct{}
}

// NewSignal returns a Signal; pass it to NewDispatcher (WithSignal) and to
// the services that append events.
func NewSignal() *Signal { return &Signal{c: make(chan struct{}, 1)} }

// Committed wakes the dispatcher. It never blocks: wake-ups that arrive
// while one is pending merge into it. A nil Signal does nothing, for
// processes and tests without a dispatcher.
func (s *Signal) Committed() {
	if s == nil {
		return
	}
	select {
	case s.c <- struct{}{}:
	default:
	}
}
