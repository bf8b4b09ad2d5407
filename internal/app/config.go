package app

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/oncepay/oncepay/internal/httpapi"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/retention"
	"github.com/oncepay/oncepay/internal/webhooks"
)

// Config is the process configuration: what a deployment decides, read
// from environment variables (docs/CONFIGURATION.md lists them), and the
// tuning knobs (Tuning), which have measured defaults and change only
// through a tuning file. Every field has a default that makes `make run`
// work, except DatabaseURL and, for `api serve`, PSPURL.
type Config struct {
	// DatabaseURL is the PostgreSQL connection URL (DATABASE_URL, required).
	// A connect_timeout in it bounds opening one connection (default
	// postgres.DefaultConnectTimeout, 5s).
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
	// DBMaxConns bounds the connection pool (DB_MAX_CONNS, default 20).
	DBMaxConns int32
	// WriteTimeout bounds the work of one request, and of one round of a
	// background worker against the database; a started write runs to its
	// end even when the client disconnects (WRITE_TIMEOUT, default 10s;
	// must be positive). A database or provider that accepts and never
	// answers costs a request this long and gets a 503, never a hung
	// connection.
	WriteTimeout time.Duration
	// IdempotencyLease protects a pending claim of a multi-phase operation
	// (IDEMPOTENCY_LEASE, default idempotency.DefaultLease, 30s). It must be
	// longer than WriteTimeout: a lease that ends while its attempt still
	// runs lets a retry or the recoverer take the attempt over.
	IdempotencyLease time.Duration

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
	// comma-separated, several during a rotation (PSP_WEBHOOK_SECRETS, each
	// member trimmed and none empty; default the demo secret
	// DemoWebhookSecret, which `api serve` accepts in demo mode only, in
	// any position and spelling, see CheckServe).
	PSPWebhookSecrets []string

	// Retention is how long each kind of record is kept. Each operation's
	// comes from the registry (Operations); RETENTION_MONEY lengthens that
	// of the operations that move money (those that cover the settlement
	// horizon), never below the horizon. The mechanisms' tables keep theirs
	// (retention.DefaultPolicy), which the fixed horizons decide.
	Retention retention.Policy
	// SweepInterval is how often expired records are deleted (SWEEP_INTERVAL,
	// default 1m; 0: no sweeper in this process, for a deployment that runs
	// `api sweep --once` on a schedule instead).
	SweepInterval time.Duration

	// NATSURL is the NATS server with JetStream (NATS_URL). Empty runs a
	// nats-server inside the process on a random loopback port; set it
	// whenever more than one API process runs.
	NATSURL string
	// NATSStoreDir holds the embedded server's JetStream files
	// (NATS_STORE_DIR, default .data/nats).
	NATSStoreDir string
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
	// FulfillmentConsumer runs the fulfillment consumer in this process
	// (FULFILLMENT_CONSUMER, default true).
	FulfillmentConsumer bool
	// AdminToken is the bearer token of /admin/outbox/... and
	// /admin/attention... (ADMIN_TOKEN; empty: the admin routes answer 404).
	// It must be at least httpapi.MinAdminTokenLen characters (Check).
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

	// Tuning holds the knobs with measured defaults (DefaultTuning).
	Tuning Tuning
}

// horizons are how long after the fact each source may send the same intent
// again (docs/CONTRACT.md). They are facts about the world the service
// lives in (clients, the broker, the provider, settlement), not settings:
// every retention is checked against them.
var horizons = retention.DefaultHorizons()

// streamMaxAge is how long the event stream keeps events: the queue
// redelivery horizon, which the inbox retention covers, so a message the
// broker may still redeliver is always one a consumer can recognise.
var streamMaxAge = horizons.QueueRedelivery

// DefaultRetention is the retention policy of docs/CONTRACT.md: the
// mechanisms' defaults and each registered operation's own.
func DefaultRetention() retention.Policy {
	p := retention.DefaultPolicy()
	p.Idempotency = idempotencyPolicy(Operations())
	return p
}

// DemoWebhookSecret is the webhook secret of the demo. It is public (it is
// in this repository), so anyone could sign a webhook with it: `api serve`
// accepts it in demo mode only and otherwise refuses to start until
// PSP_WEBHOOK_SECRETS names secrets of your own.
const DemoWebhookSecret = "whsec_b25jZXBheS1kZW1vLXdlYmhvb2stc2VjcmV0" // #nosec G101 -- public by design; api serve refuses it outside demo mode (CheckServe)

// ConfigFromEnv reads the configuration from the environment, with the
// default tuning. It refuses a variable it cannot read or whose value is out
// of its range, every such variable at once, so a misconfigured deployment is
// fixed in one round; the rules between settings are Check's.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	r := envReader{getenv: getenv}
	c := Config{
		DatabaseURL:      getenv("DATABASE_URL"),
		HTTPAddr:         r.str("HTTP_ADDR", "127.0.0.1:8080"),
		DemoMode:         r.boolean("DEMO_MODE", false),
		AutoMigrate:      r.boolean("AUTO_MIGRATE", true),
		LogLevel:         r.level("LOG_LEVEL", slog.LevelInfo),
		DBMaxConns:       int32(r.integer("DB_MAX_CONNS", 20, 1, 1000)), // #nosec G115 -- r.integer bounds it to 1..1000
		WriteTimeout:     r.duration("WRITE_TIMEOUT", 10*time.Second),
		IdempotencyLease: r.duration("IDEMPOTENCY_LEASE", idempotency.DefaultLease),

		PSPURL:            getenv("PSP_URL"),
		PSPAPIKey:         getenv("PSP_API_KEY"),
		PSPTimeout:        r.duration("PSP_TIMEOUT", payments.DefaultTimeout),
		PSPWebhookSecrets: r.secrets("PSP_WEBHOOK_SECRETS", DemoWebhookSecret),
		SweepInterval:     r.duration("SWEEP_INTERVAL", time.Minute),

		NATSURL:             getenv("NATS_URL"),
		NATSStoreDir:        r.str("NATS_STORE_DIR", ".data/nats"),
		NATSStreamReplicas:  r.integer("NATS_STREAM_REPLICAS", 1, 1, 5),
		OutboxDispatcher:    r.boolean("OUTBOX_DISPATCHER", true),
		FulfillmentConsumer: r.boolean("FULFILLMENT_CONSUMER", true),
		AdminToken:          getenv("ADMIN_TOKEN"),
		Tuning:              DefaultTuning(),
	}
	c.TracesEndpoint = r.tracesEndpoint()
	c.Retention = DefaultRetention()
	if money := r.duration("RETENTION_MONEY", horizons.Settlement); money < horizons.Settlement {
		r.errs = append(r.errs, fmt.Errorf("RETENTION_MONEY=%q: want at least %s, the settlement horizon: a payment or refund is referred back to that long, and its record must recognise the retry",
			getenv("RETENTION_MONEY"), days(horizons.Settlement)))
	} else {
		for _, op := range Operations() {
			if slices.Contains(op.Covers, retention.HorizonSettlement) {
				c.Retention.Idempotency[op.Name] = money
			}
		}
	}
	if c.DatabaseURL == "" {
		r.errs = append(r.errs, errors.New("DATABASE_URL is required (`make run` starts a private PostgreSQL and sets it)"))
	}
	return c, errors.Join(r.errs...)
}

// Check refuses every combination of settings that is unsafe, environment
// variables and tuning fields alike, each with one line that names them:
// the tuning's ranges, timeouts that must nest, a retention that does not
// cover its horizons. New runs it once per start of the service.
func (c Config) Check() error {
	errs := c.Tuning.check()
	for _, p := range []struct {
		name string
		d    time.Duration
		why  string
	}{
		{"WRITE_TIMEOUT", c.WriteTimeout, "it bounds every request and worker round; without it a dependency that never answers holds them forever"},
		{"PSP_TIMEOUT", c.PSPTimeout, "without it a provider that accepts and never answers holds the payment until WRITE_TIMEOUT, with no time left to release its claim"},
	} {
		if p.d <= 0 {
			errs = append(errs, fmt.Errorf("%s (%s) must be positive: %s", p.name, p.d, p.why))
		}
	}
	if c.PSPTimeout > 0 && c.WriteTimeout > 0 && c.PSPTimeout >= c.WriteTimeout {
		errs = append(errs, fmt.Errorf("PSP_TIMEOUT (%s) must be shorter than WRITE_TIMEOUT (%s): a timed-out payment needs time to release its claim", c.PSPTimeout, c.WriteTimeout))
	}
	if c.IdempotencyLease <= c.WriteTimeout {
		errs = append(errs, fmt.Errorf("IDEMPOTENCY_LEASE (%s) must be longer than WRITE_TIMEOUT (%s): a retry or the recoverer would take over an attempt that is still running", c.IdempotencyLease, c.WriteTimeout))
	}
	if c.WriteTimeout > 0 && c.Tuning.AdmissionWait >= c.WriteTimeout {
		errs = append(errs, fmt.Errorf("tuning AdmissionWait (%s) must be shorter than WRITE_TIMEOUT (%s): the wait for a slot counts against the request's deadline, which would end it first", c.Tuning.AdmissionWait, c.WriteTimeout))
	}
	if n := utf8.RuneCountInString(c.AdminToken); n > 0 && n < httpapi.MinAdminTokenLen {
		errs = append(errs, fmt.Errorf("ADMIN_TOKEN is %d characters, want at least %d (such as the output of `openssl rand -hex 32`): it opens the operator's endpoints of every tenant", n, httpapi.MinAdminTokenLen))
	}
	if c.NATSURL == "" && c.NATSStreamReplicas > 1 {
		errs = append(errs, fmt.Errorf("NATS_STREAM_REPLICAS (%d) needs NATS_URL naming a cluster: the embedded broker is one server, which holds one replica", c.NATSStreamReplicas))
	}
	if err := c.checkRetention(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkRetention refuses a retention shorter than a horizon it must cover
// (retention.Check): the one check before anything deletes a record, in
// Check for the service and in NewSweeper for `api sweep`.
func (c Config) checkRetention() error {
	return retention.Check(c.Retention, horizons, covers(Operations()))
}

// CheckServe reports what `api serve` needs beyond what every command
// does: a payment provider to talk to, and, outside demo mode, webhook
// secrets nobody else knows. The other commands never call it.
func CheckServe(c Config) error {
	var errs []error
	if c.PSPURL == "" {
		errs = append(errs, errors.New("PSP_URL is required: the payment provider's URL (`make run` starts the payment simulator and sets it)"))
	}
	if !c.DemoMode && slices.ContainsFunc(c.PSPWebhookSecrets, isDemoSecret) {
		errs = append(errs, errors.New("PSP_WEBHOOK_SECRETS must name your provider's webhook secrets: the demo secret is public, so anyone could sign a webhook with it (it is accepted with DEMO_MODE=true only)"))
	}
	return errors.Join(errs...)
}

// isDemoSecret reports whether s stands for the demo secret's key, however
// it is spelt: the verifier accepts every spelling of a key alike.
func isDemoSecret(s string) bool {
	demo, _ := webhooks.ParseSecret(DemoWebhookSecret) // a constant that decodes
	k, err := webhooks.ParseSecret(s)
	return err == nil && bytes.Equal(k, demo)
}

// days renders a duration in whole days when it is whole days.
func days(d time.Duration) string {
	if d > 0 && d%retention.Day == 0 {
		return fmt.Sprintf("%dd", d/retention.Day)
	}
	return d.String()
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

// secrets reads a comma-separated list of secrets (def alone when the
// variable is unset): each member trimmed of spaces, and none empty, since
// an empty member is a typo that would otherwise pass unnoticed. The error
// names the member by its place, never by its value: the value is a secret.
func (r *envReader) secrets(name, def string) []string {
	v := r.getenv(name)
	if v == "" {
		return []string{def}
	}
	members := strings.Split(v, ",")
	for i, m := range members {
		members[i] = strings.TrimSpace(m)
		if members[i] == "" {
			r.errs = append(r.errs, fmt.Errorf("%s: member %d of %d is empty: want whsec_ secrets separated by commas", name, i+1, len(members)))
			return nil
		}
	}
	return members
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
