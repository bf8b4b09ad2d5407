package app_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4/database"
	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/broker"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/testkit"
)

// The API starts before its database and its broker: it listens at once,
// says it is alive and not ready, retries both (logging every retry), and
// becomes ready without a restart once they come, migrations applied. The
// database is this test's own with every migration reverted, behind a real
// fault proxy that is off at first; the broker is a NATS server the test
// starts later on the port of NATS_URL.
func TestStartupWaitsForTheDatabaseAndTheBroker(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	revertMigrations(t, cfg.DatabaseURL)
	// A real fault proxy in front of the database, off at first: a
	// database that is not up yet.
	db := testkit.StartFaultProxy(t, testkit.Upstream(t, cfg.DatabaseURL))
	db.Down()
	cfg.DatabaseURL = db.Through(t, cfg.DatabaseURL)
	cfg.AutoMigrate = true
	natsPort := freePort(t)
	// The server that comes later accepts only this token, as any
	// embedded one accepts only its own.
	const natsToken = "startuptesttoken"
	cfg.NATSURL = fmt.Sprintf("nats://%s@127.0.0.1:%d", natsToken, natsPort)
	var nsrv *broker.Embedded
	t.Cleanup(func() { // after the service's cleanup below
		if nsrv != nil {
			nsrv.Shutdown()
		}
	})
	logs := &testkit.Buffer{}
	logger := slog.New(slog.NewMultiHandler(slog.NewJSONHandler(logs, nil), testkit.Logger(t).Handler()))
	_, cfg.PSPURL = startSimulator(t, cfg, nil, logger, time.Now)

	a, err := app.New(cfg, logger, time.Now)
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started, done := make(chan error, 1), make(chan error, 1)
	go func() {
		err := a.Start(ctx)
		started <- err
		if err != nil {
			done <- nil
			return
		}
		done <- a.Serve(ctx)
	}()
	b := &testBundle{baseURL: "http://" + a.Addr().String(), client: &http.Client{Timeout: 10 * time.Second, Transport: newOpenAPITransport(t, nil)}}
	t.Cleanup(func() {
		b.client.CloseIdleConnections()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		a.Close()
	})
	notReady := func(waits string) bool {
		r := b.do(t, "GET", "/readyz", "", "", "")
		if r.status == http.StatusOK {
			t.Fatalf("/readyz = 200 while the service waits for %s", waits)
		}
		p := wantProblem(t, r, http.StatusServiceUnavailable, "service_unavailable")
		if r.header.Get("Retry-After") == "" {
			t.Fatalf("/readyz 503 without Retry-After")
		}
		return p["detail"] == "The service is starting: it waits for "+waits+"."
	}

	// Alive and not ready from the moment it listens; the API answers 503.
	if r := b.do(t, "GET", "/healthz", "", "", ""); r.status != http.StatusOK {
		t.Fatalf("/healthz while starting = %d %s", r.status, r.body)
	}
	if !notReady("the database and NATS") {
		t.Fatalf("/readyz does not say it waits for the database and NATS")
	}
	plain := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(plain.CloseIdleConnections)
	wantProblem(t, (&testBundle{baseURL: b.baseURL, client: plain}).do(t, "GET", "/v1/products", acme, "", ""),
		http.StatusServiceUnavailable, "service_unavailable")
	testkit.WaitFor(t, 30*time.Second, "a logged retry of the database and of NATS", func() bool {
		return logs.Contains(`"msg":"startup: waiting for a dependency","dependency":"database"`) &&
			logs.Contains(`"msg":"startup: waiting for a dependency","dependency":"nats"`)
	})

	// The database comes; the service still waits for the broker.
	db.Up(t)
	testkit.WaitFor(t, 30*time.Second, "/readyz to wait for NATS only", func() bool { return notReady("NATS") })

	// The broker comes: ready, without a restart, with the schema migrated.
	if nsrv, err = broker.StartEmbedded(t.TempDir(), logger, broker.WithPort(natsPort), broker.WithToken(natsToken)); err != nil {
		t.Fatalf("start nats: %v", err)
	}
	// Ready once the schema is migrated: on Citus, on a busy machine, that
	// took past 30s (distributing the tables).
	testkit.WaitFor(t, 2*time.Minute, "/readyz to answer 200", func() bool {
		return b.do(t, "GET", "/readyz", "", "", "").status == http.StatusOK
	})
	if err := <-started; err != nil {
		t.Fatalf("start: %v", err)
	}
	if r := b.do(t, "POST", "/v1/orders", acme, "first-after-startup", orderBody); r.status != http.StatusCreated {
		t.Fatalf("first order = %d %s", r.status, r.body)
	}
}

// TestStartupErrorsAreReportedAndCleanedUp starts the service with a
// dependency it cannot have. A taken HTTP_ADDR fails New at once; a
// dependency that never answers fails Start at StartupTimeout, one that
// refuses us for good (a role that does not exist) at once. Each error is one
// line that says what is wrong, nothing panics, and a failed start leaves no
// listener and no connection to the database behind.
func TestStartupErrorsAreReportedAndCleanedUp(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { taken.Close() })
	goneAddr := net.JoinHostPort("127.0.0.1", fmt.Sprint(freePort(t))) // nobody listens there

	for _, tc := range []struct {
		name    string
		set     func(*app.Config)
		inNew   bool          // New fails; otherwise Start
		within  time.Duration // the error comes before this
		want    []string
		notWant string
	}{
		{name: "HTTP_ADDR in use", inNew: true, within: 5 * time.Second,
			set:  func(c *app.Config) { c.HTTPAddr = taken.Addr().String() },
			want: []string{"listen on " + taken.Addr().String()}},
		{name: "NATS never answers", within: 30 * time.Second,
			set:  func(c *app.Config) { c.NATSURL = "nats://" + goneAddr; c.Tuning.StartupTimeout = time.Second },
			want: []string{"gave up after the startup timeout (tuning StartupTimeout, 1s)", "NATS (NATS_URL) never answered", "no servers available"}, notWant: "database"},
		{name: "nothing answers", within: 30 * time.Second,
			set: func(c *app.Config) {
				c.DatabaseURL = "postgres://oncepay@" + goneAddr + "/oncepay?sslmode=disable"
				c.NATSURL = "nats://" + goneAddr
				c.Tuning.StartupTimeout = time.Second
			},
			want: []string{"gave up after the startup timeout (tuning StartupTimeout, 1s)", "the database (DATABASE_URL) never answered", "; NATS (NATS_URL) never answered"}},
		{name: "the database refuses the role", within: 30 * time.Second, // not the minute of StartupTimeout
			set: func(c *app.Config) {
				u, err := url.Parse(c.DatabaseURL)
				if err != nil {
					t.Fatal(err)
				}
				u.User = url.User("nobody_here")
				c.DatabaseURL = u.String()
			},
			want: []string{"the database (DATABASE_URL) refused the connection", `role "nobody_here" does not exist`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t)
			dbURL := cfg.DatabaseURL
			tc.set(&cfg)
			_, cfg.PSPURL = startSimulator(t, cfg, nil, testkit.Logger(t), time.Now)
			begin := time.Now()
			a, err := app.New(cfg, testkit.Logger(t), time.Now)
			if err == nil {
				defer a.Close()
				if tc.inNew {
					t.Fatalf("New started with %s", tc.name)
				}
				err = a.Start(context.Background())
				if err == nil {
					t.Fatalf("Start started with %s", tc.name)
				}
				// The failed start closed its listener.
				if c, derr := net.DialTimeout("tcp", a.Addr().String(), time.Second); derr == nil {
					c.Close()
					t.Fatalf("a failed start still listens on %s", a.Addr())
				}
			} else if !tc.inNew {
				t.Fatalf("New: %v, want it to listen and leave the waiting to Start", err)
			}
			if took := time.Since(begin); took > tc.within {
				t.Fatalf("the error came after %v, want it within %v", took, tc.within)
			}
			if strings.Contains(err.Error(), "\n") || (tc.notWant != "" && strings.Contains(err.Error(), tc.notWant)) {
				t.Fatalf("error = %q, want one line that does not mention %q", err, tc.notWant)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error = %q, want it to say %q", err, w)
				}
			}
			conn, err := pgx.Connect(context.Background(), dbURL)
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

// revertMigrations takes the database of dbURL back to no schema at all.
func revertMigrations(t *testing.T, dbURL string) {
	t.Helper()
	m, err := postgres.NewMigrator(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	latest, err := postgres.LatestVersion()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Down(int(latest)); err != nil {
		t.Fatal(err)
	}
}

// freePort returns a loopback port that was free a moment ago and has
// nobody listening now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestStartupRetriesABrokerRequestLostOnTheWay: a JetStream request whose
// answer never comes (the link to NATS swallowed it, and came back) is
// retried within Start, each attempt bounded, instead of waited on until
// StartupTimeout. The test holds the migration lock so that Start, both
// dependencies answered, waits in its migrations; it turns the link into a
// black hole, lets the migrations go, and heals the link once Start says it
// retries. (Healing it once some bytes went in raced on a busy machine:
// pings and subscriptions alone could make up the count, and the request
// itself then went through after the heal.)
func TestStartupRetriesABrokerRequestLostOnTheWay(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.AutoMigrate = true // nothing to apply, but golang-migrate takes its lock
	cfg.Tuning.StartupTimeout = 40 * time.Second
	// The stream the black hole cut a request out of stays broken after it
	// healed: the client's pings find that out (two unanswered) and it
	// reconnects; then a retry is answered.
	cfg.Tuning.NATSPingInterval = 500 * time.Millisecond
	const natsToken = "lostrequesttoken"
	natsPort := freePort(t)
	logs := &testkit.Buffer{}
	logger := slog.New(slog.NewMultiHandler(slog.NewJSONHandler(logs, nil), testkit.Logger(t).Handler()))
	nsrv, err := broker.StartEmbedded(t.TempDir(), logger, broker.WithPort(natsPort), broker.WithToken(natsToken))
	if err != nil {
		t.Fatalf("start nats: %v", err)
	}
	t.Cleanup(nsrv.Shutdown)
	link := testkit.StartFaultProxy(t, fmt.Sprintf("127.0.0.1:%d", natsPort))
	cfg.NATSURL = fmt.Sprintf("nats://%s@%s", natsToken, link.Addr)
	_, cfg.PSPURL = startSimulator(t, cfg, nil, logger, time.Now)

	// Another process migrating: its lock holds Start in Migrate.
	u, err := url.Parse(cfg.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Scheme = "pgx5"
	other, err := database.Open(u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.Lock(); err != nil {
		t.Fatal(err)
	}

	a, err := app.New(cfg, logger, time.Now)
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	t.Cleanup(a.Close)
	started := make(chan error, 1)
	go func() { started <- a.Start(context.Background()) }()
	b := &testBundle{baseURL: "http://" + a.Addr().String(), client: &http.Client{Timeout: 10 * time.Second}}
	t.Cleanup(b.client.CloseIdleConnections)
	testkit.WaitFor(t, 30*time.Second, "Start to wait for its migrations, both dependencies answered", func() bool {
		r := b.do(t, "GET", "/readyz", "", "", "")
		return r.status == http.StatusServiceUnavailable && strings.Contains(string(r.body), "it waits for its migrations and setup")
	})

	// The link swallows everything until Start has given up on a request
	// and says it retries: an attempt is bounded, so that comes long
	// before StartupTimeout. Then the link heals, and the retry (on a new
	// connection, once the pings found the old one dead) is answered.
	const retrying = `"msg":"startup: waiting for a dependency","dependency":"nats"`
	waitsBefore := strings.Count(logs.String(), retrying)
	link.Blackhole(t)
	if err := other.Unlock(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "Start to give up on a broker request it got no answer to, and retry", func() bool {
		return strings.Count(logs.String(), retrying) > waitsBefore
	})
	link.Heal()

	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("start after a lost broker request: %v", err)
		}
	case <-time.After(cfg.Tuning.StartupTimeout + 10*time.Second):
		t.Fatal("Start did not return")
	}
}

// TestStartupRetriesASeedWhoseSessionWasEnded: an operator (or a failover)
// ending the API's database session while Start seeds the demo tenants is
// retried like a connection, not an exit. The test locks the tenants
// table, so the seed waits on it; it ends that waiting session
// (pg_terminate_backend) and lets the lock go.
func TestStartupRetriesASeedWhoseSessionWasEnded(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Tuning.DBLockTimeout = 30 * time.Second // the seed waits on the test's lock, not on lock_timeout
	logs := &testkit.Buffer{}
	logger := slog.New(slog.NewMultiHandler(slog.NewJSONHandler(logs, nil), testkit.Logger(t).Handler()))
	_, cfg.PSPURL = startSimulator(t, cfg, nil, logger, time.Now)

	ctx := context.Background()
	locker, err := pgx.Connect(ctx, cfg.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close(ctx)
	tx, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE tenants IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}

	a, err := app.New(cfg, logger, time.Now)
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	t.Cleanup(a.Close)
	started := make(chan error, 1)
	go func() { started <- a.Start(ctx) }()

	// Another session watches: pg_stat_activity is read once per
	// transaction, and the locker's stays open.
	watcher, err := pgx.Connect(ctx, cfg.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close(ctx)
	var pid int32
	testkit.WaitFor(t, 30*time.Second, "the seed to wait on the tenants lock", func() bool {
		return watcher.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = $1 AND wait_event_type = 'Lock'`, postgres.ApplicationName).Scan(&pid) == nil
	})
	var ended bool
	if err := watcher.QueryRow(ctx, `SELECT pg_terminate_backend($1::int)`, pid).Scan(&ended); err != nil || !ended {
		t.Fatalf("terminate the seed's session: %v %v", ended, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("start after the seed's session was ended: %v", err)
		}
	case <-time.After(cfg.Tuning.StartupTimeout + 10*time.Second):
		t.Fatal("Start did not return")
	}
	if !logs.Contains(`"msg":"startup: waiting for a dependency","dependency":"database"`) {
		t.Fatal("Start did not retry the seed: the test ended nothing")
	}
}
