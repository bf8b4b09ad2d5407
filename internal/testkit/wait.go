package testkit

import (
	"testing"
	"time"
)

// pollInterval is how often WaitFor checks its condition: often enough that
// a test ends soon after the condition holds, rarely enough that conditions
// querying the database or the broker leave the machine to the code under
// test.
const pollInterval = 10 * time.Millisecond

// WaitFor polls cond until it holds and fails the test once timeout has
// passed without it; what names the awaited state in the failure ("the event
// to be published"). It is how a test waits for asynchronous work: it never
// sleeps for a fixed time. cond runs on the test's goroutine, so it may call
// t.Fatal.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-tick.C
	}
}
