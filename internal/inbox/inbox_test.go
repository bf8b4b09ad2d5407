package inbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/testdb"
)

// tenant owns the messages of these tests (the inbox has no foreign key to
// tenants: any id will do).
var tenant = uuid.MustParse("0192f1c6-0000-7000-8000-00000000a11e")

func TestClaimFirstThenDuplicate(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t)
	ctx := context.Background()
	for i, want := range []bool{true, false, false} {
		var first bool
		err := postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
			var err error
			first, err = inbox.Claim(ctx, tx, tenant, "fulfillment", "msg-1")
			return err
		})
		if err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		if first != want {
			t.Fatalf("claim %d: first = %t, want %t", i, first, want)
		}
	}
	// Another subscriber has its own record of the same message.
	var first bool
	err := postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
		var err error
		first, err = inbox.Claim(ctx, tx, tenant, "mailer", "msg-1")
		return err
	})
	if err != nil || !first {
		t.Fatalf("claim by another subscriber: first = %t, err = %v; want true, nil", first, err)
	}
	got, err := inbox.ProcessedBy(ctx, pool, tenant, []string{"msg-1", "msg-2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got["msg-1"]) != 2 || len(got["msg-2"]) != 0 {
		t.Fatalf("ProcessedBy = %+v, want two subscribers for msg-1 and none for msg-2", got)
	}
}

// A claim whose transaction rolls back leaves no trace: the effect did not
// happen, so the redelivery must do it.
func TestClaimRolledBackIsNotProcessed(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t)
	ctx := context.Background()
	boom := errors.New("effect failed")
	err := postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := inbox.Claim(ctx, tx, tenant, "fulfillment", "msg-1"); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want %v", err, boom)
	}
	var first bool
	err = postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
		var err error
		first, err = inbox.Claim(ctx, tx, tenant, "fulfillment", "msg-1")
		return err
	})
	if err != nil || !first {
		t.Fatalf("claim after rollback: first = %t, err = %v; want true, nil", first, err)
	}
}

// Concurrent deliveries of one message: the primary key lets exactly one
// transaction be first (rule 3), however many race.
func TestClaimRace(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t)
	ctx := context.Background()
	const n = 16
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		firsts int
	)
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			err := postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
				first, err := inbox.Claim(ctx, tx, tenant, "fulfillment", "msg-race")
				if first {
					mu.Lock()
					firsts++
					mu.Unlock()
				}
				return err
			})
			if err != nil {
				t.Errorf("claim: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	if firsts != 1 {
		t.Fatalf("%d claims were first, want 1", firsts)
	}
}

func TestClaimRefusesEmptyIDs(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := inbox.Claim(ctx, tx, tenant, "", "x"); err == nil {
		t.Fatal("empty subscriber accepted")
	}
	if _, err := inbox.Claim(ctx, tx, tenant, "x", ""); err == nil {
		t.Fatal("empty message id accepted")
	}
}
