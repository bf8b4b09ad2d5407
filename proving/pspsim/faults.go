package pspsim

import (
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

// drawFate consumes one-shot counters first, then the random rates, and
// returns the latency to apply. Random numbers are drawn only for non-zero
// rates so adding a fault does not shift the others' sequences needlessly.
func (s *Server) drawFate() (fate, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := &s.faults
	latency := time.Duration(f.LatencyMS) * time.Millisecond
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
