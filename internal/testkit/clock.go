package testkit

import (
	"sync"
	"time"
)

// Clock is a test clock: real time plus an offset that the test moves
// forward, past a lease, a backoff or a cache TTL, without waiting for it. A
// stopped clock (StoppedClock) stands still between moves instead, for tests
// that need exact instants. It is safe for concurrent use: the code under
// test reads it from its own goroutines while the test moves it.
//
// Hand Now to the code under test wherever it takes a `now func() time.Time`.
type Clock struct {
	mu      sync.Mutex
	stopped bool
	at      time.Time // the stopped clock's instant before any move
	offset  time.Duration
}

// NewClock returns a clock that runs with real time.
func NewClock() *Clock { return &Clock{} }

// StoppedClock returns a clock that stands at `at` until the test moves it.
func StoppedClock(at time.Time) *Clock { return &Clock{stopped: true, at: at} }

// Now returns the clock's current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return c.at.Add(c.offset)
	}
	return time.Now().Add(c.offset)
}

// Advance moves the clock forward by d. Time never runs backwards for the
// code under test, so a negative d panics.
func (c *Clock) Advance(d time.Duration) {
	if d < 0 {
		panic("testkit: Clock.Advance with a negative duration " + d.String())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}
