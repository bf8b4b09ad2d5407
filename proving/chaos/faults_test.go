package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/testdb"
	"github.com/oncepay/oncepay/internal/testkit"
)

// A trap's try that fails (in a cluster run, the observer's own connection
// to a worker terminated by another fault) is not the end of the step: the
// trap is tried again until its time is up. Here the first try fails and
// the step's context ends after a few hundred milliseconds; many tries
// must have run by then.
func TestATrapIsTriedAgainAfterAFailedTry(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE SEQUENCE trap_tries`); err != nil {
		t.Fatal(err)
	}
	// The first try divides by zero; every later one locks nothing.
	flaky := trap{lock: `SELECT 1 WHERE 1 / (nextval('trap_tries') - 1) < 0 AND $1::text <> ''`}
	e := &executor{db: pool, tenants: []string{"tenant"}}
	stepCtx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	victim, held, err := e.spring(stepCtx, flaky)
	if victim != -1 || held {
		t.Fatalf("spring = %d, %v: nothing could be caught or held", victim, held)
	}
	if err == nil {
		t.Fatal("spring ended without saying that nothing was caught")
	}
	var tries int
	if err := pool.QueryRow(ctx, `SELECT last_value FROM trap_tries`).Scan(&tries); err != nil {
		t.Fatal(err)
	}
	if tries < 3 {
		t.Fatalf("the trap was tried %d times; a failed try ended the step (%v)", tries, err)
	}
}

// A pg_backend_terminated step that meets the database away (a
// postgres_outage or a kill, timed independently of the steps) waits for it
// and terminates the APIs' connections once it is back: the fault is
// injected, not skipped. Here the step's connection goes through a proxy
// that is down until the step has failed once.
func TestATerminateStepWaitsForTheDatabaseToBeBack(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t)
	ctx := context.Background()
	// An API's connection, named as the stack names them.
	cfg := pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = "oncepay-api-7"
	api, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close(ctx)

	proxy := testkit.StartFaultProxy(t, testkit.Upstream(t, pool.Config().ConnString()))
	db, err := pgxpool.New(ctx, proxy.Through(t, pool.Config().ConnString()))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	proxy.Down()
	failed := make(chan struct{})
	var once sync.Once
	back := make(chan struct{})
	go func() {
		defer close(back)
		<-failed
		proxy.Up(t)
	}()
	tries := 0
	n, err := terminateBackends(ctx, 30*time.Second, func(ctx context.Context) (n int, err error) {
		tries++
		err = db.QueryRow(ctx, terminateAPIBackends).Scan(&n)
		if err != nil {
			once.Do(func() { close(failed) })
		}
		return n, err
	})
	<-back
	if err != nil || n != 1 {
		t.Fatalf("terminateBackends = %d, %v after %d tries, want the API's one connection terminated once the database was back", n, err, tries)
	}
	if tries < 2 {
		t.Fatalf("terminated after %d tries: the database was never away", tries)
	}
	if err := api.Ping(ctx); err == nil {
		t.Fatal("the API's connection still answers after it was terminated")
	}
}

// With the database away for longer than the step may wait, the step says
// why; with nothing to terminate, it says nothing was.
func TestATerminateStepGivesUpWithinItsBound(t *testing.T) {
	t.Parallel()
	refused := errors.New("connection refused")
	if n, err := terminateBackends(context.Background(), 300*time.Millisecond, func(context.Context) (int, error) { return 0, refused }); n != 0 || !errors.Is(err, refused) {
		t.Fatalf("database away: %d, %v, want 0 and the connection's error", n, err)
	}
	if n, err := terminateBackends(context.Background(), 300*time.Millisecond, func(context.Context) (int, error) { return 0, nil }); n != 0 || err != nil {
		t.Fatalf("nothing to terminate: %d, %v, want 0 and no error", n, err)
	}
}

// A trap that catches nothing in its window (no dispatcher batch between
// publish and mark at that moment: on a busy machine the moment may not
// come) is not an error of the step: the step records why the fault was
// not placed and the run goes on. Here nothing is in flight at all.
func TestATrapThatCatchesNothingIsRecordedNotPlaced(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t)
	var logged []string
	faults := &faultCounts{}
	e := &executor{db: pool, tenants: []string{"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"}, faults: faults, trapWithin: 300 * time.Millisecond,
		logf: func(format string, args ...any) { logged = append(logged, fmt.Sprintf(format, args...)) }}
	if err := e.killDispatcher(context.Background(), time.Second); err != nil {
		t.Fatalf("killDispatcher: %v, want no error: a fault not placed in time is no failure of the step", err)
	}
	if err := e.killRecorder(context.Background(), time.Second); err != nil {
		t.Fatalf("killRecorder: %v, want no error", err)
	}
	got := faults.unplacedSnapshot()
	if !strings.Contains(got[DispatcherKilled], "no dispatcher batch caught between publish and mark within 300ms") ||
		!strings.Contains(got[RecorderKilled], "no API caught recording a provider outcome within 300ms") {
		t.Fatalf("not placed: %q", got)
	}
	if n := faults.snapshot(); n[DispatcherKilled]+n[MarkBlocked]+n[RecorderKilled] != 0 {
		t.Fatalf("faults counted without a victim: %v", n)
	}
	if len(logged) != 2 || !strings.Contains(logged[0], "dispatcher_killed_between_publish_and_mark not placed") {
		t.Fatalf("logged %q, want one line per fault not placed", logged)
	}
}
