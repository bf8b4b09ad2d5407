package app_test

import (
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/app"
)

// Every timeout that bounds a wait for a dependency has a default, and zero
// or less is refused, with one line that names the variable and says why:
// a zero would mean "wait forever" (or, for some, "do not wait at all").
func TestTimeoutsAreBoundedAndValidated(t *testing.T) {
	t.Parallel()
	c, err := app.ConfigFromEnv(func(k string) string { return map[string]string{"DATABASE_URL": "postgres://x"}[k] })
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]time.Duration{
		"DB_LOCK_TIMEOUT":        c.DBLockTimeout,
		"DB_CONNECT_TIMEOUT":     c.DBConnectTimeout,
		"READ_TIMEOUT":           c.ReadTimeout,
		"WRITE_TIMEOUT":          c.WriteTimeout,
		"PSP_TIMEOUT":            c.PSPTimeout,
		"SHUTDOWN_TIMEOUT":       c.ShutdownTimeout,
		"STARTUP_TIMEOUT":        c.StartupTimeout,
		"NATS_PING_INTERVAL":     c.NATSPingInterval,
		"OUTBOX_PUBLISH_TIMEOUT": c.OutboxPublishTimeout,
		"OUTBOX_LEASE":           c.OutboxLease,
	} {
		want := map[string]time.Duration{
			"DB_LOCK_TIMEOUT": 2 * time.Second, "DB_CONNECT_TIMEOUT": 5 * time.Second, "READ_TIMEOUT": 15 * time.Second,
			"WRITE_TIMEOUT": 10 * time.Second, "PSP_TIMEOUT": 5 * time.Second, "SHUTDOWN_TIMEOUT": 15 * time.Second,
			"STARTUP_TIMEOUT": 2 * time.Minute, "NATS_PING_INTERVAL": 10 * time.Second, "OUTBOX_PUBLISH_TIMEOUT": 10 * time.Second, "OUTBOX_LEASE": 30 * time.Second,
		}[name]
		if got != want {
			t.Errorf("%s defaults to %s, want %s", name, got, want)
		}
	}

	for _, name := range []string{
		"DB_LOCK_TIMEOUT", "DB_CONNECT_TIMEOUT", "READ_TIMEOUT", "WRITE_TIMEOUT", "PSP_TIMEOUT",
		"SHUTDOWN_TIMEOUT", "STARTUP_TIMEOUT", "NATS_PING_INTERVAL", "OUTBOX_PUBLISH_TIMEOUT",
	} {
		env := map[string]string{"DATABASE_URL": "postgres://x", name: "0s"}
		_, err := app.ConfigFromEnv(func(k string) string { return env[k] })
		if err == nil {
			t.Errorf("%s=0s accepted", name)
			continue
		}
		var line string
		for _, l := range strings.Split(err.Error(), "\n") {
			if strings.HasPrefix(l, name+" (0s) must be positive: ") {
				line = l
			}
		}
		if line == "" {
			t.Errorf("%s=0s refused with %q, want one line %q", name, err, name+" (0s) must be positive: ...")
		}
	}

	env := map[string]string{"DATABASE_URL": "postgres://x", "OUTBOX_LEASE": "5s", "OUTBOX_PUBLISH_TIMEOUT": "5s"}
	if _, err := app.ConfigFromEnv(func(k string) string { return env[k] }); err == nil ||
		!strings.Contains(err.Error(), "OUTBOX_LEASE (5s) must be longer than OUTBOX_PUBLISH_TIMEOUT (5s)") {
		t.Errorf("a lease as long as the publish timeout: %v", err)
	}

	// The wait for an admission slot runs on the request's deadline
	// (WRITE_TIMEOUT): as long, and the deadline would end it first.
	env = map[string]string{"DATABASE_URL": "postgres://x", "ADMISSION_WAIT": "10s", "WRITE_TIMEOUT": "10s"}
	if _, err := app.ConfigFromEnv(func(k string) string { return env[k] }); err == nil ||
		!strings.Contains(err.Error(), "ADMISSION_WAIT (10s) must be shorter than WRITE_TIMEOUT (10s)") {
		t.Errorf("an admission wait as long as the request's deadline: %v", err)
	}

	// Every admitted request needs a connection: fewer connections than
	// admission slots and the slots could never all be used.
	env = map[string]string{"DATABASE_URL": "postgres://x", "MAX_IN_FLIGHT": "40", "MAX_CONNECTIONS": "39"}
	if _, err := app.ConfigFromEnv(func(k string) string { return env[k] }); err == nil ||
		!strings.Contains(err.Error(), "MAX_CONNECTIONS (39) must be at least MAX_IN_FLIGHT (40)") {
		t.Errorf("fewer connections than admission slots: %v", err)
	}
	env = map[string]string{"DATABASE_URL": "postgres://x", "MAX_CONNECTIONS": "0"}
	if _, err := app.ConfigFromEnv(func(k string) string { return env[k] }); err == nil ||
		!strings.Contains(err.Error(), "MAX_CONNECTIONS") {
		t.Errorf("no connections at all: %v", err)
	}
}
