package pspsim

import (
	"crypto/sha256"
	"time"
)

// keySweepInterval is how often (on the Server's clock) expired keys are
// removed in bulk; expired keys are also dropped lazily when touched.
const keySweepInterval = time.Minute

// keyEntry is what the provider remembers about one Idempotency-Key.
type keyEntry struct {
	// fingerprint is SHA-256 over method, path and the canonical request.
	fingerprint [sha256.Size]byte
	// inFlight is true while the first request is being processed.
	inFlight bool
	// resp is the stored response, valid once inFlight is false.
	resp response
	// storedAt is when resp was stored; retention counts from here.
	storedAt time.Time
}

// response is an HTTP answer as stored under an idempotency key.
type response struct {
	status int
	body   []byte
	// replayed is true when the response comes from the key store.
	replayed bool
	// idempotent is true for answers that carry Idempotent-Replayed.
	idempotent bool
}

// keyOutcome says what to do with a request after looking up its key.
type keyOutcome int

const (
	// keyProceed means the key is new (or expired) and now held in flight.
	keyProceed keyOutcome = iota
	// keyReplay means the stored response must be sent again.
	keyReplay
	// keyConflict means the key cannot be used; an error response is ready.
	keyConflict
)

// fingerprint hashes what identifies a request for idempotency purposes.
// canonical is the request decoded into its struct and re-encoded, so
// whitespace and key order do not matter.
func fingerprint(method, path string, canonical []byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte(method))
	h.Write([]byte{0})
	h.Write([]byte(path))
	h.Write([]byte{0})
	h.Write(canonical)
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// beginKeyLocked looks key up and, if it is new or expired, marks it in
// flight. A different request under a known key is rejected with 422 even
// while the first is in flight, because that is a merchant bug regardless of
// timing. s.mu must be held.
func (s *Server) beginKeyLocked(key string, fp [sha256.Size]byte) (keyOutcome, response) {
	now := s.now()
	s.sweepKeysLocked(now)
	if e, ok := s.keys[key]; ok {
		if !e.inFlight && s.expired(e, now) {
			delete(s.keys, key)
		} else {
			switch {
			case e.fingerprint != fp:
				return keyConflict, errorResponse(&apiError{
					Type: ErrTypeIdempotency, Code: CodeIdempotencyKeyReused, status: 422,
					Message: "this Idempotency-Key was already used with a different request",
				})
			case e.inFlight:
				return keyConflict, errorResponse(&apiError{
					Type: ErrTypeIdempotency, Code: CodeIdempotencyKeyInUse, status: 409,
					Message: "a request with this Idempotency-Key is still being processed; retry later",
				})
			default:
				r := e.resp
				r.replayed = true
				return keyReplay, r
			}
		}
	}
	s.keys[key] = &keyEntry{fingerprint: fp, inFlight: true}
	return keyProceed, response{}
}

// finishKeyLocked stores resp under key; called in the same critical section
// that records the charge or refund, so the ledger and the key store never
// disagree. s.mu must be held.
func (s *Server) finishKeyLocked(key string, resp response) {
	e, ok := s.keys[key]
	if !ok {
		return
	}
	e.inFlight = false
	e.resp = resp
	e.storedAt = s.now()
}

// releaseKeyLocked forgets a key whose request recorded nothing, so the
// merchant can retry it. s.mu must be held.
func (s *Server) releaseKeyLocked(key string) {
	if e, ok := s.keys[key]; ok && e.inFlight {
		delete(s.keys, key)
	}
}

// expired reports whether a stored key is past its retention.
func (s *Server) expired(e *keyEntry, now time.Time) bool {
	return !now.Before(e.storedAt.Add(s.cfg.KeyRetention))
}

// sweepKeysLocked drops every expired key at most once per
// keySweepInterval so long chaos runs do not grow memory without bound.
func (s *Server) sweepKeysLocked(now time.Time) {
	if now.Sub(s.lastSweep) < keySweepInterval && !now.Before(s.lastSweep) {
		return
	}
	s.lastSweep = now
	for k, e := range s.keys {
		if !e.inFlight && s.expired(e, now) {
			delete(s.keys, k)
		}
	}
}
