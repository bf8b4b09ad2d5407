package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"time"

	"github.com/oncepay/oncepay/internal/broker"
	"github.com/oncepay/oncepay/internal/httpapi"
	"github.com/oncepay/oncepay/internal/logging"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/retention"
	"github.com/oncepay/oncepay/internal/tenants"
)

// Tuning holds the service's tuning knobs: timings, bounds and batch sizes
// whose defaults were measured or reasoned out once and which a deployment
// does not normally change. DefaultTuning sets every field;
// docs/CONFIGURATION.md ("Tuning") lists each default with the measurement
// behind it. `api serve --tuning FILE` changes them without editing code (a
// JSON object of these fields, LoadTuning); tests set the fields directly.
// Config.Check refuses a value out of range, or one that contradicts
// another setting.
type Tuning struct {
	// ReadTimeout bounds reading one request, headers and body: a client
	// slower than this gets 408 request_timeout, and the connection is
	// closed. Must be positive.
	ReadTimeout time.Duration
	// BodyReadTimeout bounds the wait for the body of a request to /v1,
	// /webhooks or /demo from when its headers are in: the body is read
	// before the request takes an admission slot, so a slow body holds a
	// connection and never a slot, and a body later than this gets 408
	// request_timeout. Positive, at most ReadTimeout.
	BodyReadTimeout time.Duration
	// ShutdownTimeout bounds the graceful shutdown: in-flight requests get
	// this long to finish after SIGTERM, and then the background workers
	// this long again. Must be positive.
	ShutdownTimeout time.Duration
	// StartupTimeout bounds how long `api serve` waits for the database and
	// the broker to answer, retrying each with backoff, and then to become
	// ready; past it, it exits naming what never answered. Meanwhile
	// /healthz answers 200 and /readyz 503. Must be positive.
	StartupTimeout time.Duration
	// MaxInFlight bounds the requests of the tenants' API (/v1, /demo)
	// worked on at once: about twice DB_MAX_CONNS keeps the pool busy
	// without a queue in front of it. One more waits up to AdmissionWait for
	// a slot and then gets 503 overloaded with Retry-After, before its key
	// is checked or anything is done. Probes, /metrics and the operator's
	// endpoints are never shed.
	MaxInFlight int
	// WebhookMaxInFlight bounds the provider's deliveries (/webhooks)
	// worked on at once, in a pool of their own, so that neither the
	// tenants nor the provider (nor anyone posting to the webhook URL) can
	// take the other's slots.
	WebhookMaxInFlight int
	// TenantShare is the share of MaxInFlight one tenant holds at most while
	// another tenant has a request in flight (at least one slot; more than
	// 0, at most 1: 1 lets one tenant take every slot); alone, a tenant may
	// hold all but a twentieth, kept for another tenant's first request. A
	// tenant's request past its limit is shed at once with 503 overloaded.
	TenantShare float64
	// AdmissionWait is how long a request that finds its pool full
	// (MaxInFlight, WebhookMaxInFlight) waits for a slot (0: it is shed at
	// once). It counts against the request's deadline, WRITE_TIMEOUT, and
	// must be shorter.
	AdmissionWait time.Duration
	// MaxConnections bounds the connections the server holds open at once,
	// idle keep-alive ones included; at least MaxInFlight plus
	// WebhookMaxInFlight. Past it new connections wait in the kernel's
	// accept queue, and the connection that has waited longest for its
	// client is closed to make room (httpapi.ConnLimiter, ReclaimAfter): the
	// goroutines and memory of an overloaded server stay bounded by it, not
	// by the offered load.
	MaxConnections int
	// ReclaimAfter is how long a connection may wait for its client (for
	// the headers of its first request, for a request's body, or idle
	// between requests) before, at MaxConnections, it can be closed to make
	// room for a new one, those with a request unfinished first: connections
	// that never send a request do not hold the slots. Not negative (0: at
	// once), shorter than the 5s the server gives any request's headers.
	ReclaimAfter time.Duration
	// DBLockTimeout bounds every lock wait on the server (lock_timeout), and
	// so how long a concurrent duplicate request waits for the first one
	// before it gets 409 request_in_progress. Must be positive.
	DBLockTimeout time.Duration
	// AuthCacheTTL is how long a verified API key is cached (0: not at all):
	// a revoked key keeps working at most this long in a process that
	// cached it.
	AuthCacheTTL time.Duration
	// LogFlushInterval is how long a log line at info or debug is held
	// before it is written, with the others of that moment, in one write (0:
	// each line at once; at most 1s, which a crash may lose). Warnings and
	// errors go out at once.
	LogFlushInterval time.Duration
	// RecovererInterval is how often abandoned payment and refund attempts
	// are looked for and resumed (0: the recoverer does not run).
	RecovererInterval time.Duration
	// RecovererMaxAttempts is how many recoveries an attempt without an
	// outcome gets before it is held for an operator, an attention item of
	// reason recovery_exhausted. A client's retry does not count.
	RecovererMaxAttempts int
	// RecovererBackoff is the recoverer's wait after an attempt's first
	// recovery, doubled after each further one up to RecovererBackoffMax
	// (at least RecovererBackoff). A client's retry never waits for it.
	RecovererBackoff, RecovererBackoffMax time.Duration
	// WebhookWorkerInterval is the polling backstop of the webhook worker,
	// which each receipt otherwise wakes at once. Must be positive.
	WebhookWorkerInterval time.Duration
	// SweepBatch bounds the rows one delete statement of the retention
	// sweeper removes.
	SweepBatch int
	// SweepDutyCycle is the share of the time a sweep with a backlog spends
	// deleting; it pauses for the rest (more than 0, at most 1: 1 never
	// pauses).
	SweepDutyCycle float64
	// NATSPingInterval is how often the NATS client pings the server; two
	// unanswered pings mark the connection stale, and the client
	// reconnects, so a broker that accepts and never answers goes unnoticed
	// for two to three intervals. Must be positive.
	NATSPingInterval time.Duration
	// NATSDuplicateWindow is the event stream's duplicate window, keyed by
	// the event id: a publish of the same event within it is dropped by
	// JetStream, after it the consumers' inbox drops it. Must be positive.
	NATSDuplicateWindow time.Duration
	// OutboxPollInterval is the dispatcher's polling backstop of the
	// in-process wake-up and LISTEN/NOTIFY, and the cadence at which events
	// in backoff are retried. Must be positive.
	OutboxPollInterval time.Duration
	// OutboxPublishTimeout bounds the dispatcher's wait for a batch's
	// PubAcks; an event without its PubAck by then is a failed attempt,
	// retried with backoff. Must be positive.
	OutboxPublishTimeout time.Duration
	// OutboxLease is how long a dispatcher's claim keeps its rows; rows
	// whose mark did not commit (the dispatcher died, or the database
	// stopped answering after the PubAcks) are published again after it.
	// Must be longer than OutboxPublishTimeout.
	OutboxLease time.Duration
	// OutboxAtomicMin is the smallest claimed batch the dispatcher publishes
	// as one JetStream atomic batch, synced once on a server that syncs
	// every write (0: never, for a server that does not sync each write,
	// where an atomic batch only costs; at most outbox.MaxAtomicBatch).
	OutboxAtomicMin int
	// OutboxLinger is how long a dispatcher loop that a commit woke waits
	// for more commits before it claims, so that they share one batch (0:
	// at once; at most outbox.MaxLinger). It adds up to this much to each
	// event's way to the stream.
	OutboxLinger time.Duration
	// TrustTraceparent continues the trace of a request's traceparent, with
	// its sampling decision and its tracestate (bounded), when tracing is on.
	// Off (the default), a request starts a trace of its own with a link to
	// the client's: anyone can send a traceparent, and one whose flags say
	// "not sampled" would drop the spans of that client's requests. Turn it
	// on only when every request comes through a proxy or client that
	// decides traces for you and strips what outsiders send.
	TrustTraceparent bool
}

// DefaultTuning is the tuning the service runs with unless a tuning file
// (or a test) says otherwise.
func DefaultTuning() Tuning {
	return Tuning{
		ReadTimeout:           15 * time.Second,
		BodyReadTimeout:       httpapi.DefaultBodyReadTimeout,
		ShutdownTimeout:       15 * time.Second,
		StartupTimeout:        DefaultStartupTimeout,
		MaxInFlight:           httpapi.DefaultMaxInFlight,
		WebhookMaxInFlight:    httpapi.DefaultWebhookMaxInFlight,
		TenantShare:           httpapi.DefaultTenantShare,
		AdmissionWait:         httpapi.DefaultAdmissionWait,
		MaxConnections:        httpapi.DefaultMaxConnections,
		ReclaimAfter:          httpapi.DefaultReclaimAfter,
		DBLockTimeout:         2 * time.Second,
		AuthCacheTTL:          tenants.DefaultCacheTTL,
		LogFlushInterval:      logging.DefaultFlushInterval,
		RecovererInterval:     10 * time.Second,
		RecovererMaxAttempts:  operation.DefaultMaxRecoveries,
		RecovererBackoff:      operation.DefaultRecoveryBackoff,
		RecovererBackoffMax:   operation.DefaultMaxRecoveryBackoff,
		WebhookWorkerInterval: time.Second,
		SweepBatch:            retention.DefaultBatchSize,
		SweepDutyCycle:        retention.DefaultDutyCycle,
		NATSPingInterval:      broker.DefaultPingInterval,
		NATSDuplicateWindow:   2 * time.Minute,
		OutboxPollInterval:    outbox.DefaultPollInterval,
		OutboxPublishTimeout:  outbox.DefaultPublishTimeout,
		OutboxLease:           outbox.DefaultLease,
		OutboxAtomicMin:       outbox.DefaultAtomicMin,
		OutboxLinger:          outbox.DefaultLinger,
	}
}

// DefaultStartupTimeout is how long `api serve` waits for its database and
// its broker unless the tuning says otherwise: long enough for a database
// container's first initialisation, short enough that a wrong address is
// reported while someone still watches.
const DefaultStartupTimeout = 2 * time.Minute

// maxLogFlushInterval bounds LogFlushInterval: a crash loses the info lines
// of the last interval.
const maxLogFlushInterval = time.Second

// recoveryBound is the recoverer's bound of t.
func (t Tuning) recoveryBound() operation.RecoveryBound {
	return operation.RecoveryBound{MaxAttempts: t.RecovererMaxAttempts, Backoff: t.RecovererBackoff, MaxBackoff: t.RecovererBackoffMax}
}

// check refuses a field out of its range, and a field that contradicts
// another field of the tuning; each error is one line that names the field.
func (t Tuning) check() []error {
	var errs []error
	refuse := func(format string, args ...any) { errs = append(errs, fmt.Errorf("tuning "+format, args...)) }
	for _, p := range []struct {
		name string
		d    time.Duration
		why  string
	}{
		{"ReadTimeout", t.ReadTimeout, "without it a client that sends its request slowly holds the connection forever"},
		{"BodyReadTimeout", t.BodyReadTimeout, "without it a client that sends its body slowly holds the connection for the whole ReadTimeout"},
		{"ShutdownTimeout", t.ShutdownTimeout, "with none, SIGTERM would cut every request in flight"},
		{"StartupTimeout", t.StartupTimeout, "it is how long api serve waits for the database and the broker"},
		{"DBLockTimeout", t.DBLockTimeout, "without it a duplicate request waits for the first one as long as that takes"},
		{"WebhookWorkerInterval", t.WebhookWorkerInterval, "it is the webhook worker's backstop when a wake-up is lost"},
		{"NATSPingInterval", t.NATSPingInterval, "without pings a broker that stopped answering is never noticed"},
		{"NATSDuplicateWindow", t.NATSDuplicateWindow, "it is the stream's duplicate window"},
		{"OutboxPollInterval", t.OutboxPollInterval, "it is the dispatcher's backstop when a wake-up is lost"},
		{"OutboxPublishTimeout", t.OutboxPublishTimeout, "without it the dispatcher waits for a PubAck that never comes"},
		{"RecovererBackoff", t.RecovererBackoff, "the recoverer would resume an attempt again at once"},
	} {
		if p.d <= 0 {
			refuse("%s (%s) must be positive: %s", p.name, p.d, p.why)
		}
	}
	for _, p := range []struct {
		name string
		d    time.Duration
	}{
		{"AdmissionWait", t.AdmissionWait}, {"ReclaimAfter", t.ReclaimAfter}, {"AuthCacheTTL", t.AuthCacheTTL},
		{"LogFlushInterval", t.LogFlushInterval}, {"RecovererInterval", t.RecovererInterval}, {"OutboxLinger", t.OutboxLinger},
	} {
		if p.d < 0 {
			refuse("%s (%s) must not be negative", p.name, p.d)
		}
	}
	for _, p := range []struct {
		name      string
		n, lo, hi int
	}{
		{"MaxInFlight", t.MaxInFlight, 1, 100_000},
		{"WebhookMaxInFlight", t.WebhookMaxInFlight, 1, 100_000},
		{"MaxConnections", t.MaxConnections, 1, 1_000_000},
		{"RecovererMaxAttempts", t.RecovererMaxAttempts, 1, 1000},
		{"SweepBatch", t.SweepBatch, 1, 100_000},
		{"OutboxAtomicMin", t.OutboxAtomicMin, 0, outbox.MaxAtomicBatch},
	} {
		if p.n < p.lo || p.n > p.hi {
			refuse("%s (%d) must be from %d to %d", p.name, p.n, p.lo, p.hi)
		}
	}
	if !(t.TenantShare > 0 && t.TenantShare <= 1) {
		refuse("TenantShare (%g) must be more than 0 and at most 1", t.TenantShare)
	}
	if !(t.SweepDutyCycle > 0 && t.SweepDutyCycle <= 1) {
		refuse("SweepDutyCycle (%g) must be more than 0 and at most 1", t.SweepDutyCycle)
	}
	if t.LogFlushInterval > maxLogFlushInterval {
		refuse("LogFlushInterval (%s) must be at most %s: a crash loses the info lines of the last interval", t.LogFlushInterval, maxLogFlushInterval)
	}
	if t.OutboxLinger > outbox.MaxLinger {
		refuse("OutboxLinger (%s) must be at most %s: it delays every event's publish", t.OutboxLinger, outbox.MaxLinger)
	}
	if t.RecovererBackoffMax < t.RecovererBackoff {
		refuse("RecovererBackoffMax (%s) must be at least RecovererBackoff (%s)", t.RecovererBackoffMax, t.RecovererBackoff)
	}
	if t.MaxInFlight > 0 && t.WebhookMaxInFlight > 0 && t.MaxConnections > 0 && t.MaxConnections < t.MaxInFlight+t.WebhookMaxInFlight {
		refuse("MaxConnections (%d) must be at least MaxInFlight plus WebhookMaxInFlight (%d): the requests admitted at once each need a connection", t.MaxConnections, t.MaxInFlight+t.WebhookMaxInFlight)
	}
	if t.BodyReadTimeout > 0 && t.ReadTimeout > 0 && t.BodyReadTimeout > t.ReadTimeout {
		refuse("BodyReadTimeout (%s) must be at most ReadTimeout (%s), which bounds the whole request", t.BodyReadTimeout, t.ReadTimeout)
	}
	if t.ReclaimAfter >= readHeaderTimeout {
		refuse("ReclaimAfter (%s) must be shorter than %s: the server closes a connection without complete headers by then anyway", t.ReclaimAfter, readHeaderTimeout)
	}
	if t.OutboxPublishTimeout > 0 && t.OutboxLease <= t.OutboxPublishTimeout {
		refuse("OutboxLease (%s) must be longer than OutboxPublishTimeout (%s): another dispatcher would publish rows that are still being published", t.OutboxLease, t.OutboxPublishTimeout)
	}
	return errs
}

// LoadTuning reads a tuning file: a JSON object whose members are fields of
// Tuning, by their Go names, each overriding its default (DefaultTuning).
// Durations are Go duration strings ("250ms", "2s", "1m30s"), counts JSON
// integers, SweepDutyCycle a JSON number, switches true or false. It refuses a member Tuning does
// not have and a value of the wrong kind, each with one line that names the
// member; Config.Check then refuses a value out of range.
func LoadTuning(path string) (Tuning, error) {
	t := DefaultTuning()
	data, err := os.ReadFile(path) // #nosec G304 -- the operator names the file
	if err != nil {
		return t, fmt.Errorf("tuning file: %w", err)
	}
	if err := t.decode(data); err != nil {
		return t, fmt.Errorf("tuning file %s: %w", path, err)
	}
	return t, nil
}

var durationType = reflect.TypeFor[time.Duration]()

// decode sets the fields that data names, and reports every member it
// cannot set, one line each.
func (t *Tuning) decode(data []byte) error {
	var members map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&members); err != nil || members == nil {
		return errors.New("want a JSON object whose members are fields of app.Tuning, e.g. {\"OutboxLinger\": \"5ms\"}")
	}
	if dec.More() {
		return errors.New("want one JSON object, and nothing after it")
	}
	v := reflect.ValueOf(t).Elem()
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(members)) {
		raw := members[name]
		f, ok := v.Type().FieldByName(name)
		if !ok || !f.IsExported() {
			errs = append(errs, fmt.Errorf("unknown member %q: the members are the fields of app.Tuning (docs/CONFIGURATION.md, \"Tuning\")", name))
			continue
		}
		field := v.FieldByIndex(f.Index)
		switch {
		case f.Type == durationType:
			var s string
			d, err := time.Duration(0), json.Unmarshal(raw, &s)
			if err == nil {
				d, err = time.ParseDuration(s)
			}
			if err != nil || d < 0 {
				errs = append(errs, fmt.Errorf("%s: want a duration such as \"250ms\", \"2s\" or \"1m30s\", not %s", name, oneLine(string(raw))))
				continue
			}
			field.SetInt(int64(d))
		case f.Type.Kind() == reflect.Int:
			var n int
			if err := json.Unmarshal(raw, &n); err != nil {
				errs = append(errs, fmt.Errorf("%s: want an integer, not %s", name, oneLine(string(raw))))
				continue
			}
			field.SetInt(int64(n))
		case f.Type.Kind() == reflect.Bool:
			var b bool
			if err := json.Unmarshal(raw, &b); err != nil {
				errs = append(errs, fmt.Errorf("%s: want true or false, not %s", name, oneLine(string(raw))))
				continue
			}
			field.SetBool(b)
		case f.Type.Kind() == reflect.Float64:
			var x float64
			if err := json.Unmarshal(raw, &x); err != nil {
				errs = append(errs, fmt.Errorf("%s: want a number, not %s", name, oneLine(string(raw))))
				continue
			}
			field.SetFloat(x)
		default:
			errs = append(errs, fmt.Errorf("%s: a field of a kind a tuning file cannot set", name))
		}
	}
	return errors.Join(errs...)
}
