package testkit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/tenants"
	"github.com/oncepay/oncepay/internal/testkit"
)

func TestClockIsRealTimePlusItsOffset(t *testing.T) {
	t.Parallel()
	c := testkit.NewClock()
	before := time.Now()
	got := c.Now()
	if got.Before(before) || got.After(time.Now()) {
		t.Fatalf("Now = %v, want real time (between %v and now)", got, before)
	}
	c.Advance(time.Hour)
	c.Advance(30 * time.Minute)
	before = time.Now()
	got = c.Now()
	if lo, hi := before.Add(90*time.Minute), time.Now().Add(90*time.Minute); got.Before(lo) || got.After(hi) {
		t.Fatalf("Now after advancing 1h30m = %v, want between %v and %v", got, lo, hi)
	}
}

func TestStoppedClockMovesOnlyWhenAdvanced(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	c := testkit.StoppedClock(at)
	if got := c.Now(); !got.Equal(at) {
		t.Fatalf("Now = %v, want %v", got, at)
	}
	c.Advance(time.Second)
	if got, want := c.Now(), at.Add(time.Second); !got.Equal(want) {
		t.Fatalf("Now after 1s = %v, want %v", got, want)
	}
}

// The code under test reads the clock from its own goroutines while the
// test moves it (run with -race).
func TestClockIsSafeForConcurrentUse(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	c := testkit.StoppedClock(at)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				c.Advance(time.Second)
				_ = c.Now()
			}
		})
	}
	wg.Wait()
	if got, want := c.Now(), at.Add(800*time.Second); !got.Equal(want) {
		t.Fatalf("Now = %v, want %v: an advance was lost", got, want)
	}
}

func TestClockNeverRunsBackwards(t *testing.T) {
	t.Parallel()
	c := testkit.NewClock()
	defer func() {
		if recover() == nil {
			t.Fatal("Advance(-1s) did not panic")
		}
	}()
	c.Advance(-time.Second)
}

// fatalRecorder is a testing.TB whose Fatalf records the message and ends
// the goroutine, as the real one does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls fn with r on a goroutine of its own (Fatalf ends it) and
// reports whether fn returned normally.
func (r *fatalRecorder) run(fn func(testing.TB)) (returned bool) {
	done := make(chan bool)
	go func() {
		ok := false
		defer func() { done <- ok }()
		fn(r)
		ok = true
	}()
	return <-done
}

func TestWaitForPollsUntilTheConditionHolds(t *testing.T) {
	t.Parallel()
	calls := 0
	r := &fatalRecorder{TB: t}
	returned := r.run(func(tb testing.TB) {
		testkit.WaitFor(tb, 10*time.Second, "the third call", func() bool {
			calls++
			return calls == 3
		})
	})
	if !returned || calls != 3 {
		t.Fatalf("WaitFor returned = %v after %d calls (failure %q), want true after 3", returned, calls, r.msg)
	}
}

func TestWaitForFailsNamingWhatItWaitedFor(t *testing.T) {
	t.Parallel()
	r := &fatalRecorder{TB: t}
	start := time.Now()
	returned := r.run(func(tb testing.TB) {
		testkit.WaitFor(tb, 50*time.Millisecond, "the event to be published", func() bool { return false })
	})
	if returned {
		t.Fatal("WaitFor returned although the condition never held")
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Fatalf("WaitFor gave up after %v, before its 50ms deadline", waited)
	}
	if want := "timed out after 50ms waiting for the event to be published"; r.msg != want {
		t.Fatalf("failure = %q, want %q", r.msg, want)
	}
}

// logRecorder is a testing.TB that records log lines and keeps the
// cleanups for the test to run.
type logRecorder struct {
	testing.TB
	lines    []string
	cleanups []func()
}

func (r *logRecorder) Log(args ...any)  { r.lines = append(r.lines, fmt.Sprint(args...)) }
func (r *logRecorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }

// A line logged after the test ended (a goroutine of the code under test
// outliving it by a moment) is dropped: the testing package panics on it.
func TestLoggerGoesQuietAfterTheTest(t *testing.T) {
	t.Parallel()
	r := &logRecorder{TB: t}
	logger := testkit.Logger(r)
	logger.Info("below the level")
	logger.Warn("during the test", "n", 1)
	if len(r.lines) != 1 || !strings.Contains(r.lines[0], `msg="during the test" n=1`) {
		t.Fatalf("test log = %q, want the one warning", r.lines)
	}
	for _, f := range slices.Backward(r.cleanups) {
		f()
	}
	logger.Error("after the test")
	if len(r.lines) != 1 {
		t.Fatalf("test log = %q: a line logged after the test reached it", r.lines)
	}
}

func TestNewTenantHasAWorkingKey(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	a, b := testkit.NewTenant(t, pool), testkit.NewTenant(t, pool)
	if a.ID == b.ID || a.Slug == b.Slug || a.APIKey == b.APIKey {
		t.Fatalf("two tenants share an id, slug or key: %+v, %+v", a, b)
	}
	svc := tenants.NewService(pool, time.Now, tenants.WithCacheTTL(0))
	for _, tn := range []testkit.Tenant{a, b} {
		got, err := svc.Authenticate(context.Background(), tn.APIKey)
		if err != nil || got != tn.Tenant {
			t.Fatalf("Authenticate(key of %s) = %+v, %v; want %+v", tn.Slug, got, err, tn.Tenant)
		}
	}
}

func TestSeedDemoReturnsTheDemoTenants(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	first := testkit.SeedDemo(t, pool)
	again := testkit.SeedDemo(t, pool)
	for _, d := range tenants.DemoTenants() {
		tn, ok := first[d.Slug]
		if !ok || tn.APIKey != d.APIKey || tn.Name != d.Name {
			t.Fatalf("demo tenant %s = %+v, %v; want key %s and name %q", d.Slug, tn, ok, d.APIKey, d.Name)
		}
		if again[d.Slug] != tn {
			t.Fatalf("seeding again: %s = %+v, want %+v", d.Slug, again[d.Slug], tn)
		}
	}
	if len(first) != len(tenants.DemoTenants()) {
		t.Fatalf("SeedDemo returned %d tenants, want %d", len(first), len(tenants.DemoTenants()))
	}
}

func TestAnotherPoolIsAnotherProcessOnTheSameDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testkit.Pool(t)
	other := testkit.AnotherPool(t, pool)
	tn := testkit.NewTenant(t, pool)
	var slug string
	if err := other.QueryRow(ctx, `SELECT slug FROM tenants WHERE id = $1`, tn.ID).Scan(&slug); err != nil || slug != tn.Slug {
		t.Fatalf("the other pool reads slug %q, %v; want %q", slug, err, tn.Slug)
	}
	// Hold a connection of each: two pools never share one.
	c1, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Release()
	c2, err := other.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Release()
	if c1.Conn().PgConn().PID() == c2.Conn().PgConn().PID() {
		t.Fatal("both pools use the same server process")
	}
	if got, want := other.Config().MaxConns, pool.Config().MaxConns; got != want {
		t.Fatalf("the other pool has %d connections, want %d like the first", got, want)
	}
}

// The kit and the other test-only packages are imported by tests only: no
// program of the module links them.
func TestNoBinaryLinksTheKit(t *testing.T) {
	t.Parallel()
	goCmd := func(args ...string) []string {
		t.Helper()
		out, err := exec.Command("go", args...).Output()
		if err != nil {
			t.Fatalf("go %s: %v", strings.Join(args, " "), err)
		}
		return strings.Fields(string(out))
	}
	mains := goCmd("list", "-f", `{{if eq .Name "main"}}{{.ImportPath}}{{end}}`, "github.com/oncepay/oncepay/...")
	if len(mains) == 0 {
		t.Fatal("go list found no programs in the module")
	}
	deps := goCmd(append([]string{"list", "-deps"}, mains...)...)
	for _, dep := range deps {
		for _, testOnly := range []string{
			"github.com/oncepay/oncepay/internal/testkit",
			"github.com/oncepay/oncepay/internal/testdb",
			"github.com/oncepay/oncepay/internal/broker/brokertest",
		} {
			if dep == testOnly {
				t.Errorf("a program links %s; only tests may import it", dep)
			}
		}
	}
}

func TestWantProblemChecksStatusTypeAndCode(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pe := problem.Validation(problem.FieldError{Field: "items[0].sku", Message: "unknown SKU"})
		if r.URL.Path == "/plain" {
			w.Header().Set("Content-Type", "application/json")
		} else {
			w.Header().Set("Content-Type", problem.ContentType)
		}
		w.WriteHeader(problem.Status(pe.Code))
		_, _ = w.Write(pe.JSON())
	}))
	t.Cleanup(srv.Close)
	get := func(path string) testkit.Response {
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		return testkit.Do(t, srv.Client(), req)
	}

	p := testkit.WantProblem(t, get("/"), http.StatusUnprocessableEntity, problem.ValidationFailed)
	if len(p.Errors) != 1 || p.Errors[0].Field != "items[0].sku" || p.Type != "urn:oncepay:problem:validation_failed" {
		t.Fatalf("problem = %+v", p)
	}
	for _, tc := range []struct {
		path   string
		status int
		code   problem.Code
		want   string
	}{
		{"/", http.StatusConflict, problem.ValidationFailed, "status = 422, want 409"},
		{"/", http.StatusUnprocessableEntity, problem.IdempotencyKeyReused, `problem code "validation_failed", status 422; want "idempotency_key_reused", 422`},
		{"/plain", http.StatusUnprocessableEntity, problem.ValidationFailed, `Content-Type = "application/json"`},
	} {
		r := &fatalRecorder{TB: t}
		res := get(tc.path)
		if r.run(func(tb testing.TB) { testkit.WantProblem(tb, res, tc.status, tc.code) }) || !strings.Contains(r.msg, tc.want) {
			t.Errorf("WantProblem(%s, %d, %s) failure = %q, want it to say %q", tc.path, tc.status, tc.code, r.msg, tc.want)
		}
	}
}
