package app

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oncepay/oncepay/internal/broker"
	"github.com/oncepay/oncepay/internal/httpapi"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/logging"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/retention"
	"github.com/oncepay/oncepay/internal/tenants"
)

// Config is the process configuration, read from environment variables
// (docs/CONFIGURATION.md lists them). Every field has a default that makes `make run` work.
type Config struct {
	// DatabaseURL is the PostgreSQL connection URL (DATABASE_URL, required).
	DatabaseURL string
	// HTTPAddr is where the API listens (HTTP_ADDR, default 127.0.0.1:8080).
	HTTPAddr string
	// DemoMode seeds the demo tenants acme and globex with their well-known
	// keys (DEMO_MODE, default false: never on unless asked for).
	DemoMode bool
	// AutoMigrate applies pending migrations at start (AUTO_MIGRATE, default true).
	AutoMigrate bool
	// LogLevel is debug, info, warn or error (LOG_LEVEL, default info).
	LogLevel slog.Level
	// LogFlushInterval is how long api serve holds a log line at info or
	// debug before it writes it, with the others of that moment, in one
	// write (LOG_FLUSH_INTERVAL, default logging.DefaultFlushInterval,
	// 100ms; at most 1s; 0 writes each line at once). Warnings and errors
	// go out at once.
	LogFlushInterval time.Duration
	// DBMaxConns bounds the connection pool (DB_MAX_CONNS, default 20).
	DBMaxConns int32
	// DBLockTimeout bounds every lock wait, and so how long a concurrent
	// duplicate request waits for the first one before it gets 409
	// request_in_progress (DB_LOCK_TIMEOUT, default 2s; must be positive).
	DBLockTimeout time.Duration
	// DBConnectTimeout bounds opening one database connection: dial, TLS,
	// startup and authentication (DB_CONNECT_TIMEOUT, default
	// postgres.DefaultConnectTimeout, 5s; must be positive). A
	// connect_timeout in DATABASE_URL wins over it.
	DBConnectTimeout time.Duration
	// ReadTimeout bounds reading one request, headers and body: a client
	// slower than this gets 408 request_timeout, and the connection is
	// closed (READ_TIMEOUT, default 15s).
	ReadTimeout time.Duration
	// WriteTimeout bounds the work of one request, and of one round of a
	// background worker against the database; a started write runs to its
	// end even when the client disconnects (WRITE_TIMEOUT, default 10s). A
	// database or provider that accepts and never answers costs a request
	// this long and gets a 503, never a hung connection.
	WriteTimeout time.Duration
	// IdempotencyLease protects a pending claim of a multi-phase operation
	// (IDEMPOTENCY_LEASE, default idempotency.DefaultLease, 30s). It must be longer than WriteTimeout:
	// a lease that ends while its attempt still runs lets a retry or the
	// recoverer take the attempt over.
	IdempotencyLease time.Duration
	// AuthCacheTTL is how long a verified API key is cached (AUTH_CACHE_TTL,
	// default tenants.DefaultCacheTTL, 30s; 0 disables).
	AuthCacheTTL time.Duration
	// ShutdownTimeout bounds the graceful shutdown: in-flight requests and
	// the background workers get this long to finish after SIGTERM
	// (SHUTDOWN_TIMEOUT, default 15s; must be positive).
	ShutdownTimeout time.Duration
	// StartupTimeout bounds how long `api serve` waits for the database and
	// the broker to answer, retrying each with backoff, and then to become
	// ready; past it, it exits naming what never answered (STARTUP_TIMEOUT,
	// default 2m). Meanwhile /healthz answers 200 and /readyz 503.
	StartupTimeout time.Duration
	// MaxInFlight bounds the requests of /v1, /webhooks and /demo worked on
	// at once (MAX_IN_FLIGHT, default httpapi.DefaultMaxInFlight, 40: about twice DB_MAX_CONNS); one
	// more waits up to AdmissionWait for a slot (ADMISSION_WAIT, default
	// httpapi.DefaultAdmissionWait, 100ms; shorter than WriteTimeout, the
	// request's deadline it counts against) and then gets 503 overloaded with
	// Retry-After, before anything is read or done. Probes, /metrics and the
	// operator's endpoints are never shed.
	MaxInFlight   int
	AdmissionWait time.Duration
	// MaxConnections bounds the connections the server holds open at once
	// (MAX_CONNECTIONS, default httpapi.DefaultMaxConnections, 4096; at least
	// MaxInFlight). Past it new connections wait in the kernel's accept
	// queue, and an idle keep-alive connection is closed to make room
	// (httpapi.ConnLimiter): the goroutines and memory of an overloaded
	// server stay bounded by it, not by the offered load.
	MaxConnections int

	// PSPURL is the payment provider's base URL (PSP_URL; `api serve`
	// refuses to start without it, see CheckServe). The service never runs a
	// provider itself: `make run` starts the simulator (proving/pspsim) as
	// its own process and sets it.
	PSPURL string
	// PSPAPIKey is sent to the provider as a bearer token (PSP_API_KEY).
	PSPAPIKey string
	// PSPTimeout bounds one provider call; past it the outcome is unknown
	// (PSP_TIMEOUT, default payments.DefaultTimeout, 5s). It must be
	// positive, and stay below WriteTimeout, so a timed out attempt still
	// has time to release its claim for the retry.
	PSPTimeout time.Duration
	// PSPWebhookSecrets verify the provider's webhooks, whsec_ secrets,
	// comma-separated, several during a rotation (PSP_WEBHOOK_SECRETS,
	// default the demo secret DemoWebhookSecret, which `api serve` accepts
	// in demo mode only, see CheckServe).
	PSPWebhookSecrets []string
	// RecovererInterval is how often abandoned payment attempts are resumed
	// (RECOVERER_INTERVAL, default 10s; 0 disables the recoverer).
	RecovererInterval time.Duration
	// RecovererMaxAttempts is how many recoveries an attempt without an
	// outcome gets before it is held for an operator, an attention item of
	// reason recovery_exhausted (RECOVERER_MAX_ATTEMPTS, default
	// operation.DefaultMaxRecoveries, 10). A client's retry does not count.
	RecovererMaxAttempts int
	// RecovererBackoff is the recoverer's wait after an attempt's first
	// recovery, doubled after each further one up to RecovererBackoffMax
	// (RECOVERER_BACKOFF, default 30s; RECOVERER_BACKOFF_MAX, default 15m).
	// A client's retry never waits for it.
	RecovererBackoff, RecovererBackoffMax time.Duration
	// WebhookWorkerInterval is the polling backstop of the webhook worker,
	// which is otherwise woken by each receipt (WEBHOOK_WORKER_INTERVAL,
	// default 1s).
	WebhookWorkerInterval time.Duration

	// Horizons declare how long after the fact each source may send the same
	// intent again (HORIZON_CLIENT_RETRY 1d, HORIZON_QUEUE_REDELIVERY 7d,
	// HORIZON_WEBHOOK_REDELIVERY 3d, HORIZON_OPERATOR_REPLAY 30d,
	// HORIZON_SETTLEMENT 45d).
	Horizons retention.Horizons
	// Retention is how long each kind of record is kept: per operation of
	// the registry (Operations: RETENTION_ORDERS_CREATE 7d,
	// RETENTION_PAYMENTS_CREATE 45d, RETENTION_REFUNDS_CREATE 45d), and
	// RETENTION_PROCESSED_MESSAGES 42d, RETENTION_WEBHOOK_RECEIPTS 7d,
	// RETENTION_PUBLISHED_EVENTS 35d. A retention shorter than a horizon it
	// must cover refuses to start.
	Retention retention.Policy
	// SweepInterval is how often expired records are deleted (SWEEP_INTERVAL,
	// default 1m; 0 disables the in-process sweeper).
	SweepInterval time.Duration
	// SweepBatch bounds the rows one delete statement removes (SWEEP_BATCH,
	// default retention.DefaultBatchSize, 250).
	SweepBatch int
	// SweepDutyCycle is the share of the time a sweep with a backlog spends
	// deleting; it pauses for the rest (SWEEP_DUTY_CYCLE, default 0.0625;
	// 1 never pauses).
	SweepDutyCycle float64

	// NATSURL is the NATS server with JetStream (NATS_URL). Empty runs a
	// nats-server inside the process on a random loopback port; set it
	// whenever more than one API process runs.
	NATSURL string
	// NATSPingInterval is how often the NATS client pings the server; two
	// unanswered pings mark the connection stale, and the client
	// reconnects. It bounds how long a broker that accepts and never
	// answers goes unnoticed, to about two to three intervals
	// (NATS_PING_INTERVAL, default broker.DefaultPingInterval, 10s; must be
	// positive).
	NATSPingInterval time.Duration
	// NATSStoreDir holds the embedded server's JetStream files
	// (NATS_STORE_DIR, default .data/nats).
	NATSStoreDir string
	// NATSDuplicateWindow is the event stream's duplicate window, keyed by
	// the event id (NATS_DUPLICATE_WINDOW, default 2m).
	NATSDuplicateWindow time.Duration
	// NATSStreamMaxAge is how long the stream keeps events
	// (NATS_STREAM_MAX_AGE, default 7d); the inbox retention must cover it.
	NATSStreamMaxAge time.Duration
	// NATSStreamReplicas is the event stream's replica count
	// (NATS_STREAM_REPLICAS, default 1; 1 to 5, and only 1 with the
	// embedded broker). Use 3 when NATS_URL names a three-server cluster:
	// the stream survives the loss of any one server. broker.EnsureStreams
	// raises an existing stream to it and refuses to start rather than
	// lower it.
	NATSStreamReplicas int
	// OutboxDispatcher runs the outbox dispatcher in this process
	// (OUTBOX_DISPATCHER, default true; any number of processes may).
	OutboxDispatcher bool
	// OutboxPollInterval is the dispatcher's polling backstop of
	// LISTEN/NOTIFY (OUTBOX_POLL_INTERVAL, default outbox.DefaultPollInterval,
	// 1s).
	OutboxPollInterval time.Duration
	// OutboxPublishTimeout bounds the dispatcher's wait for a batch's
	// PubAcks; an event without its PubAck by then is a failed attempt,
	// retried with backoff (OUTBOX_PUBLISH_TIMEOUT, default
	// outbox.DefaultPublishTimeout, 10s; must be positive).
	OutboxPublishTimeout time.Duration
	// OutboxLease is how long a dispatcher's claim keeps its rows; rows
	// whose mark did not commit (the dispatcher died, or the database
	// stopped answering after the PubAcks) are published again after it
	// (OUTBOX_LEASE, default outbox.DefaultLease, 30s; must be longer than
	// OUTBOX_PUBLISH_TIMEOUT).
	OutboxLease time.Duration
	// OutboxMaxAttempts is after how many failed publishes an event is
	// stuck until an operator retries it (OUTBOX_MAX_ATTEMPTS, default
	// outbox.DefaultMaxAttempts, 10).
	OutboxMaxAttempts int
	// OutboxAtomicMin is the smallest claimed batch the dispatcher
	// publishes as one JetStream atomic batch, synced once on a server
	// that syncs every write (OUTBOX_ATOMIC_MIN, default
	// outbox.DefaultAtomicMin, 32; 0: never, for a server that does not
	// sync each write, where an atomic batch only costs).
	OutboxAtomicMin int
	// OutboxLinger is how long a dispatcher loop that a commit woke waits
	// for more commits before it claims, so that they share one batch
	// (OUTBOX_LINGER, default outbox.DefaultLinger, 5ms; 0: at once; at
	// most outbox.MaxLinger, 1s).
	OutboxLinger time.Duration
	// FulfillmentConsumer runs the fulfillment consumer in this process
	// (FULFILLMENT_CONSUMER, default true).
	FulfillmentConsumer bool
	// AdminToken is the bearer token of /admin/outbox/... and
	// /admin/attention... (ADMIN_TOKEN; empty: the admin routes answer 404).
	AdminToken string

	// TracesEndpoint is where traces are exported, with OTLP over HTTP: the
	// full URL of the collector's traces path, from
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, or from
	// OTEL_EXPORTER_OTLP_ENDPOINT with /v1/traces appended (OpenTelemetry's
	// standard variables). Empty, the default, turns tracing off: no span is
	// started and nothing is stored or sent for one (so do
	// OTEL_SDK_DISABLED=true and OTEL_TRACES_EXPORTER=none). The SDK reads
	// the other standard OTEL_* variables itself (tracing.NewProvider).
	TracesEndpoint string
}

// DefaultRetention is the retention policy of docs/CONTRACT.md: the
// mechanisms' defaults and each registered operation's own.
func DefaultRetention() retention.Policy {
	p := retention.DefaultPolicy()
	p.Idempotency = idempotencyPolicy(Operations())
	return p
}

// DefaultStartupTimeout is how long `api serve` waits for its database and
// its broker unless STARTUP_TIMEOUT says otherwise: long enough for a
// database container's first initialisation, short enough that a wrong
// address is reported while someone still watches.
const DefaultStartupTimeout = 2 * time.Minute

// DemoWebhookSecret is the webhook secret of the demo. It is public (it is
// in this repository), so anyone could sign a webhook with it: `api serve`
// accepts it in demo mode only and otherwise refuses to start until
// PSP_WEBHOOK_SECRETS names secrets of your own.
const DemoWebhookSecret = "whsec_b25jZXBheS1kZW1vLXdlYmhvb2stc2VjcmV0" // #nosec G101 -- public by design; api serve refuses it outside demo mode (CheckServe)

// ConfigFromEnv reads the configuration. It reports every bad variable at
// once, so a misconfigured deployment is fixed in one round.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	r := envReader{getenv: getenv}
	c := Config{
		DatabaseURL:      getenv("DATABASE_URL"),
		HTTPAddr:         r.str("HTTP_ADDR", "127.0.0.1:8080"),
		DemoMode:         r.boolean("DEMO_MODE", false),
		AutoMigrate:      r.boolean("AUTO_MIGRATE", true),
		LogLevel:         r.level("LOG_LEVEL", slog.LevelInfo),
		LogFlushInterval: r.duration("LOG_FLUSH_INTERVAL", logging.DefaultFlushInterval),
		DBMaxConns:       int32(r.integer("DB_MAX_CONNS", 20, 1, 1000)), // #nosec G115 -- r.integer bounds it to 1..1000
		DBLockTimeout:    r.duration("DB_LOCK_TIMEOUT", 2*time.Second),
		DBConnectTimeout: r.duration("DB_CONNECT_TIMEOUT", postgres.DefaultConnectTimeout),
		ReadTimeout:      r.duration("READ_TIMEOUT", 15*time.Second),
		WriteTimeout:     r.duration("WRITE_TIMEOUT", 10*time.Second),
		IdempotencyLease: r.duration("IDEMPOTENCY_LEASE", idempotency.DefaultLease),
		AuthCacheTTL:     r.duration("AUTH_CACHE_TTL", tenants.DefaultCacheTTL),
		ShutdownTimeout:  r.duration("SHUTDOWN_TIMEOUT", 15*time.Second),
		StartupTimeout:   r.duration("STARTUP_TIMEOUT", DefaultStartupTimeout),
		MaxInFlight:      r.integer("MAX_IN_FLIGHT", httpapi.DefaultMaxInFlight, 1, 100_000),
		AdmissionWait:    r.duration("ADMISSION_WAIT", httpapi.DefaultAdmissionWait),
		MaxConnections:   r.integer("MAX_CONNECTIONS", httpapi.DefaultMaxConnections, 1, 1_000_000),

		PSPURL:                getenv("PSP_URL"),
		PSPAPIKey:             getenv("PSP_API_KEY"),
		PSPTimeout:            r.duration("PSP_TIMEOUT", payments.DefaultTimeout),
		PSPWebhookSecrets:     strings.Split(r.str("PSP_WEBHOOK_SECRETS", DemoWebhookSecret), ","),
		RecovererInterval:     r.duration("RECOVERER_INTERVAL", 10*time.Second),
		RecovererMaxAttempts:  r.integer("RECOVERER_MAX_ATTEMPTS", operation.DefaultMaxRecoveries, 1, 1000),
		RecovererBackoff:      r.duration("RECOVERER_BACKOFF", operation.DefaultRecoveryBackoff),
		RecovererBackoffMax:   r.duration("RECOVERER_BACKOFF_MAX", operation.DefaultMaxRecoveryBackoff),
		WebhookWorkerInterval: r.duration("WEBHOOK_WORKER_INTERVAL", time.Second),
		SweepInterval:         r.duration("SWEEP_INTERVAL", time.Minute),
		SweepBatch:            r.integer("SWEEP_BATCH", retention.DefaultBatchSize, 1, 100_000),
		SweepDutyCycle:        r.fraction("SWEEP_DUTY_CYCLE", retention.DefaultDutyCycle),

		NATSURL:              getenv("NATS_URL"),
		NATSPingInterval:     r.duration("NATS_PING_INTERVAL", broker.DefaultPingInterval),
		NATSStoreDir:         r.str("NATS_STORE_DIR", ".data/nats"),
		NATSDuplicateWindow:  r.duration("NATS_DUPLICATE_WINDOW", 2*time.Minute),
		NATSStreamMaxAge:     r.duration("NATS_STREAM_MAX_AGE", 7*24*time.Hour),
		NATSStreamReplicas:   r.integer("NATS_STREAM_REPLICAS", 1, 1, 5),
		OutboxDispatcher:     r.boolean("OUTBOX_DISPATCHER", true),
		OutboxPollInterval:   r.duration("OUTBOX_POLL_INTERVAL", outbox.DefaultPollInterval),
		OutboxPublishTimeout: r.duration("OUTBOX_PUBLISH_TIMEOUT", outbox.DefaultPublishTimeout),
		OutboxLease:          r.duration("OUTBOX_LEASE", outbox.DefaultLease),
		OutboxMaxAttempts:    r.integer("OUTBOX_MAX_ATTEMPTS", outbox.DefaultMaxAttempts, 1, 1000),
		OutboxAtomicMin:      r.integer("OUTBOX_ATOMIC_MIN", outbox.DefaultAtomicMin, 0, outbox.MaxAtomicBatch),
		OutboxLinger:         r.duration("OUTBOX_LINGER", outbox.DefaultLinger),
		FulfillmentConsumer:  r.boolean("FULFILLMENT_CONSUMER", true),
		AdminToken:           getenv("ADMIN_TOKEN"),
	}
	c.TracesEndpoint = r.tracesEndpoint()
	h, p, ops := retention.DefaultHorizons(), retention.DefaultPolicy(), Operations()
	c.Horizons = retention.Horizons{
		ClientRetry:       r.duration("HORIZON_CLIENT_RETRY", h.ClientRetry),
		QueueRedelivery:   r.duration("HORIZON_QUEUE_REDELIVERY", h.QueueRedelivery),
		WebhookRedelivery: r.duration("HORIZON_WEBHOOK_REDELIVERY", h.WebhookRedelivery),
		OperatorReplay:    r.duration("HORIZON_OPERATOR_REPLAY", h.OperatorReplay),
		Settlement:        r.duration("HORIZON_SETTLEMENT", h.Settlement),
	}
	c.Retention = retention.Policy{
		Idempotency:       make(idempotency.Policy, len(ops)),
		ProcessedMessages: r.duration("RETENTION_PROCESSED_MESSAGES", p.ProcessedMessages),
		WebhookReceipts:   r.duration("RETENTION_WEBHOOK_RECEIPTS", p.WebhookReceipts),
		PublishedEvents:   r.duration("RETENTION_PUBLISHED_EVENTS", p.PublishedEvents),
	}
	for _, op := range ops {
		c.Retention.Idempotency[op.Name] = r.duration(op.RetentionVariable(), op.Retention)
	}
	if c.RecovererBackoffMax < c.RecovererBackoff {
		r.errs = append(r.errs, fmt.Errorf("RECOVERER_BACKOFF_MAX (%s) must be at least RECOVERER_BACKOFF (%s)", c.RecovererBackoffMax, c.RecovererBackoff))
	}
	for _, b := range []struct {
		name string
		d    time.Duration
		why  string
	}{
		{"READ_TIMEOUT", c.ReadTimeout, "without it a client that sends its request slowly holds the connection forever"},
		{"WRITE_TIMEOUT", c.WriteTimeout, "it bounds every request and worker round; without it a dependency that never answers holds them forever"},
		{"DB_LOCK_TIMEOUT", c.DBLockTimeout, "without it a duplicate request waits for the first one as long as that takes"},
		{"DB_CONNECT_TIMEOUT", c.DBConnectTimeout, "without it a database that accepts and never answers holds every new connection"},
		{"PSP_TIMEOUT", c.PSPTimeout, "without it a provider that accepts and never answers holds the payment until WRITE_TIMEOUT, with no time left to release its claim"},
		{"SHUTDOWN_TIMEOUT", c.ShutdownTimeout, "with none, SIGTERM would cut every request in flight"},
		{"STARTUP_TIMEOUT", c.StartupTimeout, "it is how long api serve waits for the database and the broker"},
		{"NATS_PING_INTERVAL", c.NATSPingInterval, "without pings a broker that stopped answering is never noticed"},
		{"OUTBOX_PUBLISH_TIMEOUT", c.OutboxPublishTimeout, "without it the dispatcher waits for a PubAck that never comes"},
	} {
		if b.d <= 0 {
			r.errs = append(r.errs, fmt.Errorf("%s (%s) must be positive: %s", b.name, b.d, b.why))
		}
	}
	if c.OutboxLinger > outbox.MaxLinger {
		r.errs = append(r.errs, fmt.Errorf("OUTBOX_LINGER (%s) must be at most %s: it delays every event's publish", c.OutboxLinger, outbox.MaxLinger))
	}
	if c.LogFlushInterval > time.Second {
		r.errs = append(r.errs, fmt.Errorf("LOG_FLUSH_INTERVAL (%s) must be at most 1s: a crash loses the info lines of the last interval", c.LogFlushInterval))
	}
	if c.PSPTimeout > 0 && c.WriteTimeout > 0 && c.PSPTimeout >= c.WriteTimeout {
		r.errs = append(r.errs, fmt.Errorf("PSP_TIMEOUT (%s) must be shorter than WRITE_TIMEOUT (%s): a timed-out payment needs time to release its claim", c.PSPTimeout, c.WriteTimeout))
	}
	if c.WriteTimeout > 0 && c.AdmissionWait >= c.WriteTimeout {
		r.errs = append(r.errs, fmt.Errorf("ADMISSION_WAIT (%s) must be shorter than WRITE_TIMEOUT (%s): the wait for a slot counts against the request's deadline, which would end it first", c.AdmissionWait, c.WriteTimeout))
	}
	if c.MaxConnections > 0 && c.MaxConnections < c.MaxInFlight {
		r.errs = append(r.errs, fmt.Errorf("MAX_CONNECTIONS (%d) must be at least MAX_IN_FLIGHT (%d): the requests admitted at once each need a connection", c.MaxConnections, c.MaxInFlight))
	}
	if c.OutboxLease <= c.OutboxPublishTimeout {
		r.errs = append(r.errs, fmt.Errorf("OUTBOX_LEASE (%s) must be longer than OUTBOX_PUBLISH_TIMEOUT (%s): another dispatcher would publish rows that are still being published", c.OutboxLease, c.OutboxPublishTimeout))
	}
	if c.IdempotencyLease <= c.WriteTimeout {
		r.errs = append(r.errs, fmt.Errorf("IDEMPOTENCY_LEASE (%s) must be longer than WRITE_TIMEOUT (%s): a retry or the recoverer would take over an attempt that is still running", c.IdempotencyLease, c.WriteTimeout))
	}
	if err := retention.Check(c.Retention, c.Horizons, covers(ops)); err != nil {
		r.errs = append(r.errs, err)
	}
	if c.NATSStreamMaxAge > c.Horizons.QueueRedelivery {
		r.errs = append(r.errs, fmt.Errorf("NATS_STREAM_MAX_AGE (%s) is longer than the queue redelivery horizon (%s) the inbox retention covers",
			c.NATSStreamMaxAge, c.Horizons.QueueRedelivery))
	}
	if c.NATSURL == "" && c.NATSStreamReplicas > 1 && c.NATSStreamReplicas <= 5 {
		r.errs = append(r.errs, fmt.Errorf("NATS_STREAM_REPLICAS (%d) needs NATS_URL naming a cluster: the embedded broker is one server, which holds one replica", c.NATSStreamReplicas))
	}
	if c.DatabaseURL == "" {
		r.errs = append(r.errs, errors.New("DATABASE_URL is required (`make run` starts a private PostgreSQL and sets it)"))
	}
	return c, errors.Join(r.errs...)
}

// CheckServe reports what `api serve` needs beyond what every command
// does: a payment provider to talk to, and, outside demo mode, webhook
// secrets nobody else knows. The other commands never call it.
func CheckServe(c Config) error {
	var errs []error
	if c.PSPURL == "" {
		errs = append(errs, errors.New("PSP_URL is required: the payment provider's URL (`make run` starts the payment simulator and sets it)"))
	}
	if !c.DemoMode && slices.Contains(c.PSPWebhookSecrets, DemoWebhookSecret) {
		errs = append(errs, errors.New("PSP_WEBHOOK_SECRETS must name your provider's webhook secrets: the demo secret is public, so anyone could sign a webhook with it (it is accepted with DEMO_MODE=true only)"))
	}
	return errors.Join(errs...)
}

type envReader struct {
	getenv func(string) string
	errs   []error
}

func (r *envReader) str(name, def string) string {
	if v := r.getenv(name); v != "" {
		return v
	}
	return def
}

func (r *envReader) boolean(name string, def bool) bool {
	v := r.getenv(name)
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s=%q: want true or false", name, v))
	}
	return b
}

func (r *envReader) integer(name string, def, lo, hi int) int {
	v := r.getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		r.errs = append(r.errs, fmt.Errorf("%s=%q: want an integer from %d to %d", name, v, lo, hi))
	}
	return n
}

// fraction reads a number in (0, 1].
func (r *envReader) fraction(name string, def float64) float64 {
	v := r.getenv(name)
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0 && f <= 1) {
		r.errs = append(r.errs, fmt.Errorf("%s=%q: want a number greater than 0 and at most 1", name, v))
	}
	return f
}

// duration reads a Go duration, or whole days as "45d".
func (r *envReader) duration(name string, def time.Duration) time.Duration {
	v := r.getenv(name)
	if v == "" {
		return def
	}
	var d time.Duration
	var err error
	if n, ok := strings.CutSuffix(v, "d"); ok {
		var days int
		days, err = strconv.Atoi(n)
		d = time.Duration(days) * 24 * time.Hour
	} else {
		d, err = time.ParseDuration(v)
	}
	if err != nil || d < 0 {
		r.errs = append(r.errs, fmt.Errorf("%s=%q: want a duration such as 2s, 45m or 45d", name, v))
	}
	return d
}

// tracesEndpoint reads OpenTelemetry's standard variables for the OTLP trace
// exporter. Only OTLP over HTTP (http/protobuf, the specification's default)
// is built in.
func (r *envReader) tracesEndpoint() string {
	if strings.EqualFold(r.getenv("OTEL_SDK_DISABLED"), "true") {
		return ""
	}
	switch exp := r.getenv("OTEL_TRACES_EXPORTER"); exp {
	case "", "otlp":
	case "none":
		return ""
	default:
		r.errs = append(r.errs, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: want otlp or none", exp))
		return ""
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := r.getenv(name); p != "" && p != "http/protobuf" {
			r.errs = append(r.errs, fmt.Errorf("%s=%q: only http/protobuf (OTLP over HTTP) is built in", name, p))
			return ""
		}
	}
	name, endpoint := "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", r.getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		name, endpoint = "OTEL_EXPORTER_OTLP_ENDPOINT", r.getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
		if endpoint == "" {
			return ""
		}
		endpoint = strings.TrimRight(endpoint, "/") + "/v1/traces"
	}
	if u, err := url.Parse(endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		r.errs = append(r.errs, fmt.Errorf("%s=%q: want an http:// or https:// URL", name, r.getenv(name)))
		return ""
	}
	return endpoint
}

func (r *envReader) level(name string, def slog.Level) slog.Level {
	v := r.getenv(name)
	if v == "" {
		return def
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(v))); err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s=%q: want debug, info, warn or error", name, v))
	}
	return l
}
