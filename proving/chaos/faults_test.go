package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/testdb"
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
