package app_test

import (
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/retention"
)

// check is what api serve refuses for env: the variables ConfigFromEnv
// cannot read and, once they read, the rules of Config.Check.
func check(env map[string]string) (app.Config, error) {
	c, err := app.ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil {
		return c, err
	}
	return c, c.Check()
}

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": "postgres://x", "DEMO_MODE": "true", "WRITE_TIMEOUT": "20s", "LOG_LEVEL": "debug"}
	c, err := check(env)
	if err != nil {
		t.Fatal(err)
	}
	if !c.DemoMode || c.WriteTimeout != 20*time.Second || c.LogLevel != slog.LevelDebug || c.HTTPAddr != "127.0.0.1:8080" || !c.AutoMigrate {
		t.Fatalf("config = %+v", c)
	}
	// An operator token of 32 characters is long enough; none turns the
	// operator's endpoints off.
	if _, err := check(map[string]string{"DATABASE_URL": "postgres://x", "ADMIN_TOKEN": strings.Repeat("x", 32)}); err != nil {
		t.Fatalf("a 32-character ADMIN_TOKEN: %v", err)
	}
	// Defaults: demo mode is off unless asked for, the tuning is the
	// default one, and so is the retention.
	c, err = check(map[string]string{"DATABASE_URL": "postgres://x"})
	if err != nil || c.DemoMode || c.Tuning != app.DefaultTuning() || c.Tuning.StartupTimeout != app.DefaultStartupTimeout ||
		!maps.Equal(c.Retention.Idempotency, app.DefaultRetention().Idempotency) {
		t.Fatalf("default config = %+v, %v", c, err)
	}
	// Every bad variable is reported at once, each on a line of its own.
	bad := map[string]string{"DEMO_MODE": "maybe", "DB_MAX_CONNS": "0", "WRITE_TIMEOUT": "soon", "LOG_LEVEL": "loud", "RETENTION_MONEY": "5m", "NATS_STREAM_REPLICAS": "9"}
	_, err = app.ConfigFromEnv(func(k string) string { return bad[k] })
	for _, name := range []string{"DATABASE_URL", "DEMO_MODE", "DB_MAX_CONNS", "WRITE_TIMEOUT", "LOG_LEVEL", "RETENTION_MONEY", "NATS_STREAM_REPLICAS"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Fatalf("error %v does not name %s", err, name)
		}
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != 7 {
		t.Fatalf("%d lines for 7 bad variables: %v", n, err)
	}
}

// The retention of money operations is one variable, which may lengthen
// what the settlement horizon requires and never shorten it; the other
// operations keep the registry's.
func TestRetentionMoney(t *testing.T) {
	t.Parallel()
	c, err := check(map[string]string{"DATABASE_URL": "postgres://x", "RETENTION_MONEY": "90d"})
	if err != nil {
		t.Fatal(err)
	}
	for op, want := range map[idempotency.Operation]time.Duration{
		"payments.create": 90 * retention.Day, "refunds.create": 90 * retention.Day, "orders.create": 7 * retention.Day,
	} {
		if got := c.Retention.Idempotency[op]; got != want {
			t.Errorf("retention of %s = %v, want %v", op, got, want)
		}
	}
	_, err = check(map[string]string{"DATABASE_URL": "postgres://x", "RETENTION_MONEY": "44d"})
	if err == nil || err.Error() != `RETENTION_MONEY="44d": want at least 45d, the settlement horizon: a payment or refund is referred back to that long, and its record must recognise the retry` {
		t.Fatalf("a money retention below the settlement horizon: %v", err)
	}
}

// Config.Check is the one check of a start, and a policy that does not
// cover its horizons is refused there, whichever way it was built (the
// tests build theirs by hand), with the operation and the numbers.
func TestCheckRefusesAShortRetention(t *testing.T) {
	t.Parallel()
	c, err := app.ConfigFromEnv(func(k string) string { return map[string]string{"DATABASE_URL": "postgres://x"}[k] })
	if err != nil {
		t.Fatal(err)
	}
	c.Retention = app.DefaultRetention()
	c.Retention.Idempotency["payments.create"] = 30 * retention.Day
	err = c.Check()
	if err == nil || err.Error() != "retention of payments.create (30d) is shorter than the settlement horizon (45d) it must cover" {
		t.Fatalf("short retention: %v", err)
	}
}

// Each rule between settings refuses the combination that breaks it, with
// one line naming both, whether the settings are variables or tuning
// fields; and the defaults pass every rule.
func TestCheckRefusesUnsafeCombinations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		env    map[string]string
		tuning func(*app.Tuning)
		want   string
	}{
		{"a lease as long as a write", map[string]string{"IDEMPOTENCY_LEASE": "10s", "WRITE_TIMEOUT": "10s"}, nil,
			"IDEMPOTENCY_LEASE (10s) must be longer than WRITE_TIMEOUT (10s): a retry or the recoverer would take over an attempt that is still running"},
		{"a provider call as long as a write", map[string]string{"PSP_TIMEOUT": "10s", "WRITE_TIMEOUT": "10s"}, nil,
			"PSP_TIMEOUT (10s) must be shorter than WRITE_TIMEOUT (10s): a timed-out payment needs time to release its claim"},
		{"stream replicas without a cluster", map[string]string{"NATS_STREAM_REPLICAS": "3"}, nil,
			"NATS_STREAM_REPLICAS (3) needs NATS_URL naming a cluster: the embedded broker is one server, which holds one replica"},
		{"an admission wait as long as the request's deadline", map[string]string{"WRITE_TIMEOUT": "10s"}, func(t *app.Tuning) { t.AdmissionWait = 10 * time.Second },
			"tuning AdmissionWait (10s) must be shorter than WRITE_TIMEOUT (10s): the wait for a slot counts against the request's deadline, which would end it first"},
		{"fewer connections than admission slots", nil, func(t *app.Tuning) { t.MaxInFlight, t.WebhookMaxInFlight, t.MaxConnections = 40, 10, 49 },
			"tuning MaxConnections (49) must be at least MaxInFlight plus WebhookMaxInFlight (50): the requests admitted at once each need a connection"},
		{"a body read longer than the whole request's", nil, func(t *app.Tuning) { t.ReadTimeout, t.BodyReadTimeout = time.Second, 2*time.Second },
			"tuning BodyReadTimeout (2s) must be at most ReadTimeout (1s), which bounds the whole request"},
		{"an outbox lease as long as the publish timeout", nil, func(t *app.Tuning) { t.OutboxLease, t.OutboxPublishTimeout = 5*time.Second, 5*time.Second },
			"tuning OutboxLease (5s) must be longer than OutboxPublishTimeout (5s): another dispatcher would publish rows that are still being published"},
		{"a backoff cap below the backoff", nil, func(t *app.Tuning) { t.RecovererBackoff, t.RecovererBackoffMax = time.Minute, 30*time.Second },
			"tuning RecovererBackoffMax (30s) must be at least RecovererBackoff (1m0s)"},
		{"an operator token shorter than 32 characters", map[string]string{"ADMIN_TOKEN": strings.Repeat("x", 31)}, nil,
			"ADMIN_TOKEN is 31 characters, want at least 32 (such as the output of `openssl rand -hex 32`): it opens the operator's endpoints of every tenant"},
	} {
		env := map[string]string{"DATABASE_URL": "postgres://x"}
		maps.Copy(env, tc.env)
		c, err := app.ConfigFromEnv(func(k string) string { return env[k] })
		if err != nil {
			t.Fatalf("%s: ConfigFromEnv: %v", tc.name, err)
		}
		if tc.tuning != nil {
			tc.tuning(&c.Tuning)
		}
		if err := c.Check(); err == nil || err.Error() != tc.want {
			t.Errorf("%s: Check = %v, want exactly %q", tc.name, err, tc.want)
		}
	}
}

// api serve needs a provider, and outside demo mode webhook secrets of its
// own: the demo secret is in this repository, so anyone could sign a
// charge.succeeded with it.
func TestCheckServe(t *testing.T) {
	t.Parallel()
	const own = "whsec_b3duLXNlY3JldC1vZi10aGUtb3BlcmF0b3I="
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // "" for no error
	}{
		{"no provider", map[string]string{"PSP_WEBHOOK_SECRETS": own}, "PSP_URL is required"},
		{"default secret outside demo mode", map[string]string{"PSP_URL": "http://psp"}, "PSP_WEBHOOK_SECRETS must name"},
		{"demo secret in a rotation outside demo mode", map[string]string{"PSP_URL": "http://psp", "PSP_WEBHOOK_SECRETS": own + "," + app.DemoWebhookSecret}, "PSP_WEBHOOK_SECRETS must name"},
		{"demo secret after a comma and a space", map[string]string{"PSP_URL": "http://psp", "PSP_WEBHOOK_SECRETS": own + ", " + app.DemoWebhookSecret}, "PSP_WEBHOOK_SECRETS must name"},
		{"demo secret with a trailing space", map[string]string{"PSP_URL": "http://psp", "PSP_WEBHOOK_SECRETS": app.DemoWebhookSecret + " "}, "PSP_WEBHOOK_SECRETS must name"},
		{"demo secret spelt across a line break", map[string]string{"PSP_URL": "http://psp", "PSP_WEBHOOK_SECRETS": app.DemoWebhookSecret[:20] + "\n" + app.DemoWebhookSecret[20:]}, "PSP_WEBHOOK_SECRETS must name"},
		{"own secrets with spaces around them", map[string]string{"PSP_URL": "http://psp", "PSP_WEBHOOK_SECRETS": " " + own + " , " + own + "\t"}, ""},
		{"default secret in demo mode", map[string]string{"PSP_URL": "http://psp", "DEMO_MODE": "true"}, ""},
		{"own secret", map[string]string{"PSP_URL": "http://psp", "PSP_WEBHOOK_SECRETS": own}, ""},
	} {
		env := map[string]string{"DATABASE_URL": "postgres://x"}
		for k, v := range tc.env {
			env[k] = v
		}
		c, err := app.ConfigFromEnv(func(k string) string { return env[k] })
		if err != nil {
			t.Fatalf("%s: ConfigFromEnv: %v", tc.name, err)
		}
		for _, s := range c.PSPWebhookSecrets {
			if s != strings.TrimSpace(s) {
				t.Errorf("%s: secret %q kept its spaces", tc.name, s)
			}
		}
		err = app.CheckServe(c)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: CheckServe = %v, want nil", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n")):
			t.Errorf("%s: CheckServe = %v, want one line with %q", tc.name, err, tc.want)
		}
	}
}

// A list of secrets with an empty member is a typo (",," or a trailing
// comma): refused in one line that says which member, and never quotes the
// secrets.
func TestWebhookSecretsRefuseAnEmptyMember(t *testing.T) {
	t.Parallel()
	const own = "whsec_b3duLXNlY3JldC1vZi10aGUtb3BlcmF0b3I="
	for value, want := range map[string]string{
		own + ",," + own: "PSP_WEBHOOK_SECRETS: member 2 of 3 is empty: want whsec_ secrets separated by commas",
		own + ", ":       "PSP_WEBHOOK_SECRETS: member 2 of 2 is empty: want whsec_ secrets separated by commas",
		" ":              "PSP_WEBHOOK_SECRETS: member 1 of 1 is empty: want whsec_ secrets separated by commas",
	} {
		_, err := app.ConfigFromEnv(func(k string) string {
			return map[string]string{"DATABASE_URL": "postgres://x", "PSP_WEBHOOK_SECRETS": value}[k]
		})
		if err == nil || err.Error() != want {
			t.Errorf("PSP_WEBHOOK_SECRETS=%q: %v, want exactly %q", value, err, want)
		}
	}
}

// Tracing is off unless OpenTelemetry's standard variables name an OTLP
// endpoint, and the switches that turn it off win.
func TestConfigTracesEndpoint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		want string
		err  string
	}{
		{env: nil, want: ""},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, want: "http://127.0.0.1:4318/v1/traces"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318/"}, want: "http://jaeger:4318/v1/traces"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://b/otlp/traces"}, want: "https://b/otlp/traces"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_SDK_DISABLED": "true"}, want: ""},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_TRACES_EXPORTER": "none"}, want: ""},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_TRACES_EXPORTER": "zipkin"}, err: "OTEL_TRACES_EXPORTER"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, err: "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "a:4318"}, err: "OTEL_EXPORTER_OTLP_ENDPOINT"},
	} {
		env := map[string]string{"DATABASE_URL": "postgres://x"}
		for k, v := range tc.env {
			env[k] = v
		}
		c, err := app.ConfigFromEnv(func(k string) string { return env[k] })
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%v: error %v, want one naming %s", tc.env, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%v: %v", tc.env, err)
		case tc.err == "" && c.TracesEndpoint != tc.want:
			t.Errorf("%v: TracesEndpoint %q, want %q", tc.env, c.TracesEndpoint, tc.want)
		}
	}
}

// NATS_STREAM_REPLICAS is the event stream's replica count: 1 by default,
// up to 5 (JetStream's most), and more than 1 only with NATS_URL: the
// embedded broker is a single server.
func TestConfigStreamReplicas(t *testing.T) {
	t.Parallel()
	const cluster = "nats://tok@127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224"
	for _, tc := range []struct {
		name, natsURL, replicas string
		want                    int
		err                     string // "" for none
	}{
		{"default", "", "", 1, ""},
		{"default on a cluster", cluster, "", 1, ""},
		{"one, embedded", "", "1", 1, ""},
		{"three on a cluster", cluster, "3", 3, ""},
		{"five on a cluster", cluster, "5", 5, ""},
		{"three, embedded", "", "3", 0, "NATS_STREAM_REPLICAS (3) needs NATS_URL naming a cluster: the embedded broker is one server, which holds one replica"},
		{"zero", cluster, "0", 0, `NATS_STREAM_REPLICAS="0": want an integer from 1 to 5`},
		{"six", cluster, "6", 0, `NATS_STREAM_REPLICAS="6": want an integer from 1 to 5`},
		{"six, embedded: one line", "", "6", 0, `NATS_STREAM_REPLICAS="6": want an integer from 1 to 5`},
		{"not a number", cluster, "three", 0, `NATS_STREAM_REPLICAS="three": want an integer from 1 to 5`},
	} {
		c, err := check(map[string]string{"DATABASE_URL": "postgres://x", "NATS_URL": tc.natsURL, "NATS_STREAM_REPLICAS": tc.replicas})
		if tc.err == "" {
			if err != nil || c.NATSStreamReplicas != tc.want {
				t.Errorf("%s: replicas %d, %v; want %d", tc.name, c.NATSStreamReplicas, err, tc.want)
			}
			continue
		}
		if err == nil || err.Error() != tc.err {
			t.Errorf("%s: %v, want exactly %q", tc.name, err, tc.err)
		}
	}
}
