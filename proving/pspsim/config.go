package pspsim

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Defaults applied by New when the corresponding Config field is zero, so a
// zero Config behaves like a well-mannered Stripe-like provider.
const (
	// DefaultKeyRetention mirrors Stripe, which forgets idempotency keys after
	// 24 hours; it is deliberately much shorter than the merchant's horizon.
	DefaultKeyRetention = 24 * time.Hour
	// DefaultWebhookBackoffBase is the delay before the first webhook retry.
	DefaultWebhookBackoffBase = time.Second
	// DefaultWebhookBackoffMax caps the exponential webhook retry delay.
	DefaultWebhookBackoffMax = time.Minute
	// DefaultWebhookMaxAttempts bounds how often one delivery is tried before
	// the simulator gives up on it.
	DefaultWebhookMaxAttempts = 10
	// DefaultWebhookBatchWindow is how long the delivery worker collects new
	// events before reversing their order when reordering is enabled.
	DefaultWebhookBatchWindow = 100 * time.Millisecond
	// DefaultWebhookTimeout bounds one webhook HTTP attempt so a stuck
	// receiver cannot stall the delivery worker.
	DefaultWebhookTimeout = 10 * time.Second
)

// maxWebhookDuplicates bounds Faults.WebhookDuplicates so a typo cannot make
// the simulator flood the merchant.
const maxWebhookDuplicates = 100

// Sentinel errors, so callers can tell configuration mistakes apart with
// errors.Is.
var (
	// ErrInvalidConfig reports a Config that New cannot run with.
	ErrInvalidConfig = errors.New("invalid pspsim config")
	// ErrInvalidWebhookSecret reports a webhook secret that is not of the form
	// "whsec_<base64>".
	ErrInvalidWebhookSecret = errors.New("invalid webhook secret")
	// ErrInvalidFaults reports fault settings outside their allowed ranges.
	ErrInvalidFaults = errors.New("invalid fault settings")
	// ErrAlreadyRunning reports a second concurrent call to Server.Run; one
	// delivery worker per Server keeps webhook ordering deterministic.
	ErrAlreadyRunning = errors.New("pspsim server already running")
)

// Config configures a Server. The zero value is a valid configuration: no API
// key, 24h key retention, no webhooks and no faults.
type Config struct {
	// APIKey, when non-empty, must be presented as "Authorization: Bearer
	// <APIKey>" on every /v1/* and /admin/* request (401 otherwise), so the
	// merchant's client proves it sends credentials like it would to a real
	// provider, and nobody without the key can change the faults. Only
	// /healthz never requires it.
	APIKey string

	// KeyRetention is how long the provider remembers an idempotency key
	// after its response was stored; afterwards the same key is treated as
	// new. Zero or negative means DefaultKeyRetention. Measured on the clock
	// passed to New, so tests can expire keys without waiting.
	KeyRetention time.Duration

	// WebhookURL is the merchant endpoint that receives events; empty
	// disables webhooks until Server.SetWebhookURL names one (no events are
	// even queued meanwhile).
	WebhookURL string

	// WebhookSecrets are the signing secrets, each "whsec_<base64 of the
	// secret bytes>". The first is the current one; with several, every
	// delivery carries one signature per secret (space-separated) so the
	// merchant can rotate secrets without losing events. Required when
	// WebhookURL is set, and before SetWebhookURL.
	WebhookSecrets []string

	// WebhookBackoffBase is the delay before the first retry of a failed
	// delivery; each later retry doubles it. Zero means
	// DefaultWebhookBackoffBase.
	WebhookBackoffBase time.Duration

	// WebhookBackoffMax caps the retry delay. Zero means
	// DefaultWebhookBackoffMax.
	WebhookBackoffMax time.Duration

	// WebhookMaxAttempts is the number of attempts (first try included)
	// after which a delivery is abandoned. Zero means
	// DefaultWebhookMaxAttempts.
	WebhookMaxAttempts int

	// WebhookBatchWindow is how long the worker waits, after the first new
	// event arrives, before releasing the batch in reverse order when
	// Faults.WebhookReorder is on. Zero means DefaultWebhookBatchWindow.
	WebhookBatchWindow time.Duration

	// WebhookTimeout bounds a single delivery attempt. Zero means
	// DefaultWebhookTimeout.
	WebhookTimeout time.Duration

	// WebhookClient sends webhooks; nil means a client of the Server's own
	// (a clone of http.DefaultTransport, idle connections closed when Run
	// returns). WebhookTimeout bounds each attempt either way.
	WebhookClient *http.Client

	// Seed seeds the math/rand/v2 source used for every random fault, so a
	// chaos run with the same seed and the same request sequence replays the
	// same faults.
	Seed uint64

	// Faults are the fault-injection settings in force at start. They can be
	// read and replaced at runtime through GET/PUT /admin/faults.
	Faults Faults
}

// Faults are the fault-injection settings. They exist so tests and the demo
// can make the provider misbehave in the ways real providers do: slowly,
// with outages before charging, and with lost answers after charging.
//
// The one-shot counters are consumed in the order FailNext, DropNext,
// TimeoutNext by POSTs to /v1/charges and /v1/refunds that pass request
// validation; they decrement as they are used and take precedence over the
// random rates.
type Faults struct {
	// LatencyMS delays every validated POST before it is processed, while its
	// idempotency key is held (so a concurrent retry sees 409). The charge
	// still happens if the client gives up during the delay, like a real
	// provider that does not notice the caller left.
	LatencyMS int `json:"latency_ms"`
	// FailRate is the probability of answering 503 before charging: nothing
	// is recorded and the key is not stored.
	FailRate float64 `json:"fail_rate"`
	// DropRate is the probability of charging (recording the charge or refund
	// and storing the idempotent response) and then closing the TCP
	// connection without answering.
	DropRate float64 `json:"drop_rate"`
	// DeclineRate is the probability that a pm_card_ok charge is declined
	// anyway with card_declined.
	DeclineRate float64 `json:"decline_rate"`
	// FailNext makes the next N POSTs answer 503 before charging.
	FailNext int `json:"fail_next"`
	// DropNext makes the next N POSTs charge and then drop the connection.
	DropNext int `json:"drop_next"`
	// TimeoutNext makes the next N POSTs charge and then hang until the
	// client gives up (its request context ends), then drop the connection.
	TimeoutNext int `json:"timeout_next"`
	// WebhookDuplicates delivers each event this many extra times, with the
	// same webhook-id, to prove the merchant deduplicates.
	WebhookDuplicates int `json:"webhook_duplicates"`
	// WebhookReorder delivers the events queued within one batch window in
	// reverse order, to prove the merchant does not rely on event order.
	WebhookReorder bool `json:"webhook_reorder"`
}

// Validate reports whether the settings are usable, so a bad PUT
// /admin/faults is refused instead of silently misbehaving.
func (f Faults) Validate() error {
	rates := []struct {
		name string
		v    float64
	}{{"fail_rate", f.FailRate}, {"drop_rate", f.DropRate}, {"decline_rate", f.DeclineRate}}
	for _, r := range rates {
		if math.IsNaN(r.v) || r.v < 0 || r.v > 1 {
			return fmt.Errorf("%w: %s %v is outside [0,1]", ErrInvalidFaults, r.name, r.v)
		}
	}
	counts := []struct {
		name string
		v    int
	}{
		{"latency_ms", f.LatencyMS}, {"fail_next", f.FailNext}, {"drop_next", f.DropNext},
		{"timeout_next", f.TimeoutNext}, {"webhook_duplicates", f.WebhookDuplicates},
	}
	for _, c := range counts {
		if c.v < 0 {
			return fmt.Errorf("%w: %s %d is negative", ErrInvalidFaults, c.name, c.v)
		}
	}
	if f.WebhookDuplicates > maxWebhookDuplicates {
		return fmt.Errorf("%w: webhook_duplicates %d exceeds %d", ErrInvalidFaults, f.WebhookDuplicates, maxWebhookDuplicates)
	}
	return nil
}

// withDefaults returns cfg with zero durations and counts replaced by the
// package defaults.
func (cfg Config) withDefaults() Config {
	if cfg.KeyRetention <= 0 {
		cfg.KeyRetention = DefaultKeyRetention
	}
	if cfg.WebhookBackoffBase <= 0 {
		cfg.WebhookBackoffBase = DefaultWebhookBackoffBase
	}
	if cfg.WebhookBackoffMax <= 0 {
		cfg.WebhookBackoffMax = DefaultWebhookBackoffMax
	}
	if cfg.WebhookMaxAttempts <= 0 {
		cfg.WebhookMaxAttempts = DefaultWebhookMaxAttempts
	}
	if cfg.WebhookBatchWindow <= 0 {
		cfg.WebhookBatchWindow = DefaultWebhookBatchWindow
	}
	if cfg.WebhookTimeout <= 0 {
		cfg.WebhookTimeout = DefaultWebhookTimeout
	}
	return cfg
}

// validate checks the parts of cfg that defaults cannot fix and decodes the
// webhook secrets.
func (cfg Config) validate() ([][]byte, error) {
	if err := cfg.Faults.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	secrets := make([][]byte, 0, len(cfg.WebhookSecrets))
	for i, s := range cfg.WebhookSecrets {
		b, err := ParseWebhookSecret(s)
		if err != nil {
			return nil, fmt.Errorf("%w: webhook secret %d: %w", ErrInvalidConfig, i, err)
		}
		secrets = append(secrets, b)
	}
	if cfg.WebhookURL != "" {
		if err := checkWebhookURL(cfg.WebhookURL, len(secrets)); err != nil {
			return nil, err
		}
	}
	return secrets, nil
}

// checkWebhookURL reports whether raw can receive webhooks signed with that
// many secrets: an absolute http(s) URL, and at least one secret.
func checkWebhookURL(raw string, secrets int) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%w: parse webhook URL: %w", ErrInvalidConfig, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w: webhook URL %q must be absolute http(s)", ErrInvalidConfig, raw)
	}
	if secrets == 0 {
		return fmt.Errorf("%w: webhook URL set without a webhook secret", ErrInvalidConfig)
	}
	return nil
}

// ParseWebhookSecret decodes a Standard Webhooks secret "whsec_<base64>"
// into the HMAC key bytes. It is exported so the merchant's verifier and
// tests can share the exact same secret format.
func ParseWebhookSecret(s string) ([]byte, error) {
	raw, ok := strings.CutPrefix(strings.TrimSpace(s), "whsec_")
	if !ok {
		return nil, fmt.Errorf("%w: missing whsec_ prefix", ErrInvalidWebhookSecret)
	}
	b, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: decode base64: %w", ErrInvalidWebhookSecret, err)
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty secret", ErrInvalidWebhookSecret)
	}
	return b, nil
}
