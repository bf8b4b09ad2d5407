package pspsim

import (
	"fmt"
	"net/http"
	"time"
)

// fate is what fault injection decided for one POST.
type fate int

const (
	// fateNormal answers normally.
	fateNormal fate = iota
	// fateFail answers 503 before charging.
	fateFail
	// fateDrop processes the request, then closes the connection unanswered.
	fateDrop
	// fateTimeout processes the request, waits for the client to give up,
	// then closes the connection unanswered.
	fateTimeout
)

// String names the fate for logs.
func (f fate) String() string {
	switch f {
	case fateFail:
		return "fail"
	case fateDrop:
		return "drop"
	case fateTimeout:
		return "timeout"
	default:
		return "normal"
	}
}

// drawFate consumes the one-shot counters of the request's scope first
// (ScopedFaults), then the global ones, then the random rates, and returns
// the latency to apply. Random numbers are drawn only for non-zero rates so
// adding a fault does not shift the others' sequences needlessly.
func (s *Server) drawFate(scope string) (fate, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := &s.faults
	latency := time.Duration(f.LatencyMS) * time.Millisecond
	if got, ok := s.drawScopedLocked(scope); ok {
		return got, latency
	}
	switch {
	case f.FailNext > 0:
		f.FailNext--
		return fateFail, latency
	case f.DropNext > 0:
		f.DropNext--
		return fateDrop, latency
	case f.TimeoutNext > 0:
		f.TimeoutNext--
		return fateTimeout, latency
	}
	if f.FailRate > 0 && s.rng.Float64() < f.FailRate {
		return fateFail, latency
	}
	if f.DropRate > 0 && s.rng.Float64() < f.DropRate {
		return fateDrop, latency
	}
	return fateNormal, latency
}

// declineAnywayLocked draws Faults.DeclineRate. s.mu must be held.
func (s *Server) declineAnywayLocked() bool {
	return s.faults.DeclineRate > 0 && s.rng.Float64() < s.faults.DeclineRate
}

// pause waits d. It deliberately ignores the request context: a real
// provider keeps processing after the caller hangs up, which is exactly the
// "charged, but the merchant never heard" case the simulator must produce.
func pause(d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	<-t.C
}

// dropConnection closes the client connection without writing a response,
// so the client sees EOF or a reset instead of an answer.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Not hijackable (HTTP/2 or a recorder): abort the handler, which
		// makes net/http reset the stream or close the connection.
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// ScopeMetadataKey is the metadata member of a charge or refund that names
// its scope for ScopedFaults: the merchant's tenant, which oncepay sends
// with every charge and refund.
const ScopeMetadataKey = "tenant_id"

// MaxScopes bounds how many scopes may hold armed faults at once, so a
// client that arms faults under ever new scopes cannot grow the simulator
// without bound.
const MaxScopes = 1000

// ScopedFaults are one-shot counters that only the POSTs of one scope meet:
// those whose metadata[ScopeMetadataKey] is the scope. They let one of
// several merchants' tenants break its own payments on purpose (the demo's
// PUT /demo/faults) without breaking the others'. A scope's counters are
// consumed before the global ones, in the same order (FailNext, DropNext,
// TimeoutNext); POSTs of other scopes, and POSTs without one, never meet
// them.
type ScopedFaults struct {
	// Scope is the scope the counters belong to, echoed in answers.
	Scope string `json:"scope"`
	// FailNext makes the scope's next N POSTs answer 503 before charging.
	FailNext int `json:"fail_next"`
	// DropNext makes the scope's next N POSTs charge and then drop the
	// connection.
	DropNext int `json:"drop_next"`
	// TimeoutNext makes the scope's next N POSTs charge and then hang until
	// the client gives up.
	TimeoutNext int `json:"timeout_next"`
}

// armed reports whether any counter is left.
func (f ScopedFaults) armed() bool { return f.FailNext > 0 || f.DropNext > 0 || f.TimeoutNext > 0 }

// ScopedFaults returns the one-shot counters armed for scope (all zero when
// none are).
func (s *Server) ScopedFaults(scope string) ScopedFaults {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.scoped[scope]
	f.Scope = scope
	return f
}

// SetScopedFaults replaces the one-shot counters of f.Scope. It fails with
// ErrInvalidFaults, and changes nothing, for an empty scope, a negative
// counter, or a new scope beyond MaxScopes.
func (s *Server) SetScopedFaults(f ScopedFaults) error {
	if f.Scope == "" {
		return fmt.Errorf("%w: a scope is required", ErrInvalidFaults)
	}
	if f.FailNext < 0 || f.DropNext < 0 || f.TimeoutNext < 0 {
		return fmt.Errorf("%w: a one-shot counter is negative", ErrInvalidFaults)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !f.armed() {
		delete(s.scoped, f.Scope)
		return nil
	}
	if _, ok := s.scoped[f.Scope]; !ok && len(s.scoped) >= MaxScopes {
		return fmt.Errorf("%w: %d scopes hold armed faults already", ErrInvalidFaults, MaxScopes)
	}
	s.scoped[f.Scope] = f
	return nil
}

// drawScopedLocked consumes one of scope's one-shot counters, if any is
// armed. s.mu must be held.
func (s *Server) drawScopedLocked(scope string) (fate, bool) {
	f, ok := s.scoped[scope]
	if scope == "" || !ok {
		return fateNormal, false
	}
	var got fate
	switch {
	case f.FailNext > 0:
		f.FailNext--
		got = fateFail
	case f.DropNext > 0:
		f.DropNext--
		got = fateDrop
	case f.TimeoutNext > 0:
		f.TimeoutNext--
		got = fateTimeout
	}
	if f.armed() {
		s.scoped[scope] = f
	} else {
		delete(s.scoped, scope)
	}
	return got, got != fateNormal
}
