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
	if err != nil || c.DemoMode {
		t.Fatalf("default config = %+v, %v", c, err)
	}
	// Every bad variable is reported at once.
	bad := map[string]string{"DEMO_MODE": "maybe", "DB_MAX_CONNS": "0", "WRITE_TIMEOUT": "soon", "LOG_LEVEL": "loud"}
	_, err = app.ConfigFromEnv(func(k string) string { return bad[k] })
	for _, name := range []string{"DATABASE_URL", "DEMO_MODE", "DB_MAX_CONNS", "WRITE_TIMEOUT", "LOG_LEVEL"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Fatalf("error %v does not name %s", err, name)
		}
	}
}
