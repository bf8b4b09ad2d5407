package webhooks

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The Standard Webhooks headers of a delivery.
const (
	// HeaderID carries the delivery id: the same for every retry and
	// duplicate of one event, and the key receipts are deduplicated by.
	HeaderID = "webhook-id"
	// HeaderTimestamp carries the unix time (seconds) of the attempt.
	HeaderTimestamp = "webhook-timestamp"
	// HeaderSignature carries space-separated "v1,<base64>" signatures,
	// one per secret the provider signs with.
	HeaderSignature = "webhook-signature"
)

// DefaultTolerance is how far a delivery's timestamp may be from our clock,
// either way, unless WithTolerance says otherwise.
const DefaultTolerance = 5 * time.Minute

// maxSignatures bounds the signatures of one delivery that are checked.
const maxSignatures = 32

// ErrUnverified is wrapped by every error Verify returns: the delivery is not
// provably from the provider, or not recent.
var ErrUnverified = errors.New("webhook not verified")

// Verifier checks Standard Webhooks signatures. It is safe for concurrent
// use.
type Verifier struct {
	keys      [][]byte
	tolerance time.Duration
	now       func() time.Time
}

// VerifierOption configures a Verifier.
type VerifierOption func(*Verifier)

// WithTolerance accepts deliveries stamped within d of now, either way
// (default DefaultTolerance, 5 minutes; zero keeps the default, and
// NewVerifier refuses a negative d).
func WithTolerance(d time.Duration) VerifierOption {
	return func(v *Verifier) {
		if d != 0 {
			v.tolerance = d
		}
	}
}

// NewVerifier returns a Verifier that accepts a delivery signed with any of
// secrets, each "whsec_<base64 of the key>" (several while a secret rotates),
// and stamped within DefaultTolerance of now unless WithTolerance says
// otherwise. now is time.Now when nil. It fails without a secret, on a
// secret it cannot decode, and on a negative tolerance.
func NewVerifier(secrets []string, now func() time.Time, opts ...VerifierOption) (*Verifier, error) {
	if now == nil {
		now = time.Now
	}
	v := &Verifier{tolerance: DefaultTolerance, now: now}
	for _, o := range opts {
		o(v)
	}
	if len(secrets) == 0 {
		return nil, errors.New("webhook verifier: at least one secret is required")
	}
	if v.tolerance < 0 {
		return nil, fmt.Errorf("webhook verifier: tolerance %v is negative", v.tolerance)
	}
	keys := make([][]byte, 0, len(secrets))
	for i, s := range secrets {
		k, err := ParseSecret(s)
		if err != nil {
			// The secret itself is never part of the error.
			return nil, fmt.Errorf("webhook verifier: secret %d: %w", i+1, err)
		}
		keys = append(keys, k)
	}
	v.keys = keys
	return v, nil
}

// ParseSecret decodes a secret "whsec_<base64>" into the HMAC key it
// stands for. Two spellings of one key (base64 skips line breaks) give the
// same bytes, so a secret is compared by its key, never by its spelling.
func ParseSecret(s string) ([]byte, error) {
	raw, ok := strings.CutPrefix(strings.TrimSpace(s), "whsec_")
	if !ok {
		return nil, errors.New("want whsec_<base64>")
	}
	k, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return nil, fmt.Errorf("decode base64: %w", err)
	}
	if len(k) == 0 {
		return nil, errors.New("empty key")
	}
	return k, nil
}

// Verify checks that body with header h was signed by one of the secrets
// and that its timestamp is within the tolerance. Every error wraps
// ErrUnverified and names the reason, never a secret.
func (v *Verifier) Verify(h http.Header, body []byte) error {
	id, ts, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || ts == "" || sigs == "" {
		return fmt.Errorf("%w: missing %s, %s or %s header", ErrUnverified, HeaderID, HeaderTimestamp, HeaderSignature)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s is not unix seconds", ErrUnverified, HeaderTimestamp)
	}
	now := v.now()
	stamp := time.Unix(sec, 0)
	if stamp.Before(now.Add(-v.tolerance)) {
		return fmt.Errorf("%w: timestamp %d is older than %v", ErrUnverified, sec, v.tolerance)
	}
	if stamp.After(now.Add(v.tolerance)) {
		return fmt.Errorf("%w: timestamp %d is more than %v in the future", ErrUnverified, sec, v.tolerance)
	}

	fields := strings.Fields(sigs)
	if len(fields) > maxSignatures {
		return fmt.Errorf("%w: more than %d signatures", ErrUnverified, maxSignatures)
	}
	want := make([][]byte, len(v.keys))
	for i, k := range v.keys {
		mac := hmac.New(sha256.New, k)
		mac.Write([]byte(id))
		mac.Write([]byte{'.'})
		mac.Write([]byte(ts))
		mac.Write([]byte{'.'})
		mac.Write(body)
		want[i] = mac.Sum(nil)
	}
	for _, f := range fields {
		version, value, ok := strings.Cut(f, ",")
		if !ok || version != "v1" {
			continue // another scheme; a later entry may still match
		}
		got, err := base64.StdEncoding.DecodeString(value)
		if err != nil {
			continue
		}
		for _, w := range want {
			if hmac.Equal(got, w) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: no v1 signature matches a configured secret", ErrUnverified)
}
