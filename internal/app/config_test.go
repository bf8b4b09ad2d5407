package app_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/app"
)

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": "postgres://x", "DEMO_MODE": "true", "DB_LOCK_TIMEOUT": "500ms", "LOG_LEVEL": "debug"}
	c, err := app.ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if !c.DemoMode || c.DBLockTimeout != 500*time.Millisecond || c.LogLevel != slog.LevelDebug || c.HTTPAddr != "127.0.0.1:8080" || !c.AutoMigrate {
		t.Fatalf("config = %+v", c)
	}
	// Defaults: demo mode is off unless asked for.
	c, err = app.ConfigFromEnv(func(k string) string { return map[string]string{"DATABASE_URL": "postgres://x"}[k] })
	if err != nil || c.DemoMode || c.ReadTimeout != 15*time.Second || c.StartupTimeout != app.DefaultStartupTimeout {
		t.Fatalf("default config = %+v, %v", c, err)
	}
	// Without a startup deadline api serve would wait for a wrong address
	// forever.
	noStartup := map[string]string{"DATABASE_URL": "postgres://x", "STARTUP_TIMEOUT": "0s"}
	if _, err = app.ConfigFromEnv(func(k string) string { return noStartup[k] }); err == nil || !strings.Contains(err.Error(), "STARTUP_TIMEOUT (0s) must be positive") {
		t.Fatalf("no startup timeout: %v", err)
	}
	// Without a read timeout a slow client holds its connection forever.
	noRead := map[string]string{"DATABASE_URL": "postgres://x", "READ_TIMEOUT": "0s"}
	if _, err = app.ConfigFromEnv(func(k string) string { return noRead[k] }); err == nil || !strings.Contains(err.Error(), "READ_TIMEOUT (0s) must be positive") {
		t.Fatalf("no read timeout: %v", err)
	}
	// Rule 5 at startup: a retention shorter than the horizon it covers is
	// refused, with the horizon and the numbers.
	short := map[string]string{"DATABASE_URL": "postgres://x", "RETENTION_PAYMENTS_CREATE": "5m", "HORIZON_SETTLEMENT": "60d"}
	_, err = app.ConfigFromEnv(func(k string) string { return short[k] })
	if err == nil || !strings.Contains(err.Error(), "retention of payments.create (5m) is shorter than the settlement horizon (60d)") ||
		!strings.Contains(err.Error(), "retention of refunds.create (45d) is shorter than the settlement horizon (60d)") {
		t.Fatalf("short retention: %v", err)
	}
	// A lease no longer than a write would let a retry take over a live
	// attempt.
	lease := map[string]string{"DATABASE_URL": "postgres://x", "IDEMPOTENCY_LEASE": "10s", "WRITE_TIMEOUT": "10s"}
	_, err = app.ConfigFromEnv(func(k string) string { return lease[k] })
	if err == nil || !strings.Contains(err.Error(), "IDEMPOTENCY_LEASE (10s) must be longer than WRITE_TIMEOUT (10s)") {
		t.Fatalf("lease as long as a write: %v", err)
	}
	// Every bad variable is reported at once.
	bad := map[string]string{"DEMO_MODE": "maybe", "DB_MAX_CONNS": "0", "WRITE_TIMEOUT": "soon", "LOG_LEVEL": "loud", "SWEEP_DUTY_CYCLE": "0",
		"LOG_FLUSH_INTERVAL": "5s", "OUTBOX_ATOMIC_MIN": "1001", "OUTBOX_LINGER": "2s"}
	_, err = app.ConfigFromEnv(func(k string) string { return bad[k] })
	for _, name := range []string{"DATABASE_URL", "DEMO_MODE", "DB_MAX_CONNS", "WRITE_TIMEOUT", "LOG_LEVEL", "SWEEP_DUTY_CYCLE", "LOG_FLUSH_INTERVAL", "OUTBOX_ATOMIC_MIN", "OUTBOX_LINGER"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Fatalf("error %v does not name %s", err, name)
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
		err = app.CheckServe(c)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: CheckServe = %v, want nil", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n")):
			t.Errorf("%s: CheckServe = %v, want one line with %q", tc.name, err, tc.want)
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
		env := map[string]string{"DATABASE_URL": "postgres://x", "NATS_URL": tc.natsURL, "NATS_STREAM_REPLICAS": tc.replicas}
		c, err := app.ConfigFromEnv(func(k string) string { return env[k] })
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
