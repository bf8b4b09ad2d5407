package app_test

import (
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/app"
)

// Every timeout that bounds a wait for a dependency has a default, and zero
// or less is refused, with one line that names the variable or the tuning
// field and says why: a zero would mean "wait forever" (or, for some, "do
// not wait at all").
func TestTimeoutsAreBoundedAndValidated(t *testing.T) {
	t.Parallel()
	c, err := app.ConfigFromEnv(func(k string) string { return map[string]string{"DATABASE_URL": "postgres://x"}[k] })
	if err != nil {
		t.Fatal(err)
	}
	tn := c.Tuning
	for name, got := range map[string][2]time.Duration{
		"WRITE_TIMEOUT":        {c.WriteTimeout, 10 * time.Second},
		"PSP_TIMEOUT":          {c.PSPTimeout, 5 * time.Second},
		"IDEMPOTENCY_LEASE":    {c.IdempotencyLease, 30 * time.Second},
		"DBLockTimeout":        {tn.DBLockTimeout, 2 * time.Second},
		"ReadTimeout":          {tn.ReadTimeout, 15 * time.Second},
		"ShutdownTimeout":      {tn.ShutdownTimeout, 15 * time.Second},
		"StartupTimeout":       {tn.StartupTimeout, 2 * time.Minute},
		"NATSPingInterval":     {tn.NATSPingInterval, 10 * time.Second},
		"OutboxPublishTimeout": {tn.OutboxPublishTimeout, 10 * time.Second},
		"OutboxLease":          {tn.OutboxLease, 30 * time.Second},
	} {
		if got[0] != got[1] {
			t.Errorf("%s defaults to %s, want %s", name, got[0], got[1])
		}
	}

	// The variables: zero is refused by Check (api serve's New).
	for _, name := range []string{"WRITE_TIMEOUT", "PSP_TIMEOUT"} {
		c, err := app.ConfigFromEnv(func(k string) string {
			return map[string]string{"DATABASE_URL": "postgres://x", name: "0s"}[k]
		})
		if err != nil {
			t.Fatalf("%s=0s: ConfigFromEnv: %v", name, err)
		}
		wantLine(t, c.Check(), name+" (0s) must be positive: ")
	}
	// The tuning fields, as a tuning file or a test would set them.
	for name, zero := range map[string]func(*app.Tuning){
		"DBLockTimeout":         func(t *app.Tuning) { t.DBLockTimeout = 0 },
		"ReadTimeout":           func(t *app.Tuning) { t.ReadTimeout = 0 },
		"BodyReadTimeout":       func(t *app.Tuning) { t.BodyReadTimeout = 0 },
		"ShutdownTimeout":       func(t *app.Tuning) { t.ShutdownTimeout = 0 },
		"StartupTimeout":        func(t *app.Tuning) { t.StartupTimeout = 0 },
		"NATSPingInterval":      func(t *app.Tuning) { t.NATSPingInterval = 0 },
		"NATSDuplicateWindow":   func(t *app.Tuning) { t.NATSDuplicateWindow = 0 },
		"OutboxPublishTimeout":  func(t *app.Tuning) { t.OutboxPublishTimeout = 0 },
		"OutboxPollInterval":    func(t *app.Tuning) { t.OutboxPollInterval = 0 },
		"WebhookWorkerInterval": func(t *app.Tuning) { t.WebhookWorkerInterval = 0 },
		"RecovererBackoff":      func(t *app.Tuning) { t.RecovererBackoff = 0 },
	} {
		c := c
		zero(&c.Tuning)
		wantLine(t, c.Check(), "tuning "+name+" (0s) must be positive: ")
	}
}

// wantLine fails unless err has a line that starts with prefix.
func wantLine(t *testing.T, err error, prefix string) {
	t.Helper()
	if err == nil {
		t.Errorf("accepted; want a line %q...", prefix)
		return
	}
	for _, l := range strings.Split(err.Error(), "\n") {
		if strings.HasPrefix(l, prefix) {
			return
		}
	}
	t.Errorf("refused with %q, want one line %q...", err, prefix)
}
