package app_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/testkit"
)

// TestStartupErrorsAreReportedAndCleanedUp starts the service with one
// dependency missing after the database pool is open. New must return the
// one error that says what is wrong, never panic, and leave no connection to
// the database behind.
func TestStartupErrorsAreReportedAndCleanedUp(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { taken.Close() })
	// A port that was free a moment ago and has nobody listening now.
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	goneAddr := gone.Addr().String()
	gone.Close()

	for _, tc := range []struct {
		name string
		set  func(*app.Config)
		want string
	}{
		{"HTTP_ADDR in use", func(c *app.Config) { c.HTTPAddr = taken.Addr().String() }, "listen on " + taken.Addr().String()},
		{"NATS unreachable", func(c *app.Config) { c.NATSURL = "nats://" + goneAddr }, "nats"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t)
			tc.set(&cfg)
			a, err := app.New(context.Background(), cfg, testkit.Logger(t), time.Now)
			if err == nil {
				a.Close()
				t.Fatalf("New started with %s", tc.name)
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Count(err.Error(), "\n") > 0 {
				t.Fatalf("error = %q, want one line containing %q", err, tc.want)
			}
			conn, err := pgx.Connect(context.Background(), cfg.DatabaseURL)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			// A backend ends a moment after its client closed the
			// connection: wait for it, boundedly. A connection the failed
			// start left open never ends.
			testkit.WaitFor(t, 5*time.Second, "the failed start's connections to end", func() bool {
				var open int
				if err := conn.QueryRow(context.Background(),
					`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'oncepay'`).Scan(&open); err != nil {
					t.Fatal(err)
				}
				return open == 0
			})
		})
	}
}
