package client

import (
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// NewIdempotencyKey returns a fresh random key (a UUIDv4 from crypto/rand).
// Make one per business intent and keep it while the intent may still be
// retried, e.g. in the caller's own database beside the order it pays.
func NewIdempotencyKey() string {
	var u [16]byte
	_, _ = rand.Read(u[:])  // crypto/rand.Read never fails (it crashes the program instead)
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // variant RFC 9562
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// MaxKeyLen is the longest idempotency key the API accepts.
const MaxKeyLen = 255

// errKeyInvalid is what WithIdempotencyKey's key fails with; checked here,
// before sending, a bad key costs no round trip and no 400.
var errKeyInvalid = errors.New("oncepay: an idempotency key is 1 to 255 visible ASCII characters")

func validKey(k string) bool {
	if len(k) == 0 || len(k) > MaxKeyLen {
		return false
	}
	for i := range len(k) {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// parseRetryAfter reads a Retry-After header: delay seconds, or an HTTP-date
// (RFC 9110). Anything else, or a time in the past, is no delay. The delay
// is the server's, however long, so that a caller told to come back later
// is told when; only a number of seconds no time.Duration holds is cut to
// the longest one that does.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		return time.Duration(min(secs, int64(math.MaxInt64/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// maxRetryAfter is the longest Retry-After the client waits on its own
// (docs/CONTRACT.md, "Retry-After"; the web UI keeps the same bound). A
// longer one (a maintenance window, say) is the caller's to schedule: the
// call returns the *Error with its RetryAfter instead of blocking the
// caller, and the key in Meta resumes the intent then.
const maxRetryAfter = time.Minute

// backoff returns the wait before the attempt after attempt number attempt
// (1-based) failed. Without Retry-After it is "equal jitter": half of the
// capped exponential step plus a random part of the other half, so waits grow
// and duplicates of many clients spread out. With Retry-After the server's
// delay is the floor, and up to base is added so that clients told the same
// delay do not all return in the same instant. r is a random number in [0, 1).
func backoff(attempt int, base, ceiling, retryAfter time.Duration, r float64) time.Duration {
	if retryAfter > 0 {
		return retryAfter + time.Duration(r*float64(base))
	}
	step := base
	for i := 1; i < attempt && step < ceiling; i++ {
		step *= 2
	}
	step = min(step, ceiling)
	return step/2 + time.Duration(r*float64(step-step/2))
}
