package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/testdb"
	"github.com/oncepay/oncepay/internal/testkit"
)

// The operations of the service, as the stores of its features name them.
const (
	opOrders   idempotency.Operation = "orders.create"
	opPayments idempotency.Operation = "payments.create"
	opRefunds  idempotency.Operation = "refunds.create"
)

// policy is the service's retention per operation.
func policy() idempotency.Policy {
	return idempotency.Policy{opOrders: 7 * 24 * time.Hour, opPayments: 45 * 24 * time.Hour, opRefunds: 45 * 24 * time.Hour}
}

type storeBundle struct {
	pool    *pgxpool.Pool
	store   *idempotency.Store
	clock   *testkit.Clock
	tenantA uuid.UUID
	tenantB uuid.UUID
}

const lease = 30 * time.Second

// chargeRequested is a recovery point of a multi-phase operation.
const chargeRequested idempotency.RecoveryPoint = "charge_requested"

func setupStore(t *testing.T) *storeBundle {
	t.Helper()
	pool := testdb.Pool(t)
	b := &storeBundle{pool: pool, clock: testkit.StoppedClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))}
	b.store = idempotency.NewStore(policy(), b.clock.Now, idempotency.WithLease(lease))
	for _, id := range []*uuid.UUID{&b.tenantA, &b.tenantB} {
		*id = uuid.New()
		if _, err := pool.Exec(context.Background(), `INSERT INTO tenants (id, slug, name, created_at) VALUES ($1, $2, 'T', now())`, *id, id.String()); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func (b *storeBundle) request(t *testing.T, tenant uuid.UUID, op idempotency.Operation, key, body string) idempotency.Request {
	return idempotency.Request{TenantID: tenant, Operation: op, Key: idempotency.Key(key), Fingerprint: fp(t, op, nil, body), RequestID: "req-" + key}
}

// execute runs the single-transaction flow: claim, then finish with resp.
// It returns the claim as Begin made it.
func (b *storeBundle) execute(t *testing.T, r idempotency.Request, resp idempotency.Response) (*idempotency.Claim, error) {
	t.Helper()
	var claim *idempotency.Claim
	err := postgres.InTx(context.Background(), b.pool, func(tx pgx.Tx) error {
		var err error
		claim, err = b.store.Begin(context.Background(), tx, r)
		if err != nil || claim.Kind == idempotency.ClaimReplay {
			return err
		}
		return finish(context.Background(), tx, claim, resp)
	})
	return claim, err
}

func created(body string) idempotency.Response {
	return idempotency.Response{Status: http.StatusCreated, ContentType: "application/json", Location: "/x/1", Body: []byte(body)}
}

func TestBeginClaimsThenReplays(t *testing.T) {
	t.Parallel()
	b := setupStore(t)
	r := b.request(t, b.tenantA, opOrders, "k", `{"a":1}`)
	first, err := b.execute(t, r, created(`{"id":1}`))
	if err != nil || first.Kind != idempotency.ClaimFresh || first.RecoveryPoint != idempotency.PointFinished {
		t.Fatalf("first Begin = %+v, %v; want a fresh claim", first, err)
	}
	second, err := b.execute(t, r, created(`{"id":2}`))
	if err != nil || second.Kind != idempotency.ClaimReplay {
		t.Fatalf("second Begin = %+v, %v; want a replay", second, err)
	}
	rep := second.Stored
	if rep.Status != http.StatusCreated || string(rep.Body) != `{"id":1}` || rep.Location != "/x/1" || rep.ContentType != "application/json" || !rep.Replayed {
		t.Fatalf("replay = %+v", rep)
	}
	if want := b.clock.Now().Add(7 * 24 * time.Hour); !rep.ExpiresAt.Equal(want) {
		t.Fatalf("ExpiresAt = %v, want %v (orders.create retention)", rep.ExpiresAt, want)
	}
	looked, err := b.store.Peek(context.Background(), b.pool, r)
	if err != nil || looked == nil || string(looked.Body) != `{"id":1}` {
		t.Fatalf("Peek = %+v, %v", looked, err)
	}
}

func TestMoneyOperationsKeepRecords45Days(t *testing.T) {
	t.Parallel()
	b := setupStore(t)
	for _, op := range []idempotency.Operation{opPayments, opRefunds} {
		r := b.request(t, b.tenantA, op, "money", `{}`)
		if _, err := b.execute(t, r, created(`{}`)); err != nil {
			t.Fatal(err)
		}
		resp, err := b.store.Peek(context.Background(), b.pool, r)
		if err != nil || resp == nil {
			t.Fatalf("Peek: %v", err)
		}
		if want := b.clock.Now().Add(45 * 24 * time.Hour); !resp.ExpiresAt.Equal(want) {
			t.Fatalf("%s ExpiresAt = %v, want %v", op, resp.ExpiresAt, want)
		}
	}
}

func TestBeginRefusesAnotherPayload(t *testing.T) {
	t.Parallel()
	b := setupStore(t)
	if _, err := b.execute(t, b.request(t, b.tenantA, opOrders, "k", `{"a":1}`), created(`{}`)); err != nil {
		t.Fatal(err)
	}
	other := b.request(t, b.tenantA, opOrders, "k", `{"a":2}`)
	if _, err := b.execute(t, other, created(`{}`)); problem.CodeOf(err) != problem.IdempotencyKeyReused {
		t.Fatalf("Begin with another payload: %v, want idempotency_key_reused", err)
	}
	if _, err := b.store.Peek(context.Background(), b.pool, other); problem.CodeOf(err) != problem.IdempotencyKeyReused {
		t.Fatalf("Peek with another payload: %v, want idempotency_key_reused", err)
	}
}

// Rule 2: tenant and operation are part of the key's scope.
func TestKeyScope(t *testing.T) {
	t.Parallel()
	b := setupStore(t)
	for _, r := range []idempotency.Request{
		b.request(t, b.tenantA, opOrders, "same", `{"a":1}`),
		b.request(t, b.tenantB, opOrders, "same", `{"a":2}`),
		b.request(t, b.tenantA, opPayments, "same", `{"a":3}`),
		b.request(t, b.tenantA, opRefunds, "same", `{"a":4}`),
	} {
		c, err := b.execute(t, r, created(`{}`))
		if err != nil || c.Kind != idempotency.ClaimFresh {
			t.Fatalf("%s/%s: Begin = %+v, %v; want an independent fresh claim", r.TenantID, r.Operation, c, err)
		}
	}
}

// Without WithLease a claim is leased for DefaultLease, 30 seconds (the
// IDEMPOTENCY_LEASE default docs/CONFIGURATION.md names); WithLease changes it, and a
// lease that is not positive keeps the default.
func TestStoreLeaseDefaultAndOption(t *testing.T) {
	t.Parallel()
	b := setupStore(t)
	ctx := context.Background()
	for i, c := range []struct {
		opts []idempotency.StoreOption
		want time.Duration
	}{
		{nil, 30 * time.Second},
		{[]idempotency.StoreOption{idempotency.WithLease(0)}, 30 * time.Second},
		{[]idempotency.StoreOption{idempotency.WithLease(time.Minute)}, time.Minute},
	} {
		store := idempotency.NewStore(policy(), b.clock.Now, c.opts...)
		key := fmt.Sprintf("lease-%d", i)
		err := postgres.InTx(ctx, b.pool, func(tx pgx.Tx) error {
			_, err := store.Begin(ctx, tx, b.request(t, b.tenantA, opPayments, key, `{}`))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		var lockedUntil time.Time
		if err := b.pool.QueryRow(ctx, `SELECT locked_until FROM api_idempotency WHERE idempotency_key = $1`, key).Scan(&lockedUntil); err != nil {
			t.Fatal(err)
		}
		if got := lockedUntil.Sub(b.clock.Now()); got != c.want {
			t.Errorf("case %d: a fresh claim is leased for %v, want %v", i, got, c.want)
		}
	}
}

// A pending claim (a multi-phase operation between its phases) is protected
// by its lease; after the lease the claim is taken over where it stopped.
func TestPendingClaimLeaseAndTakeOver(t *testing.T) {
	t.Parallel()
	b := setupStore(t)
	ctx := context.Background()
	r := b.request(t, b.tenantA, opPayments, "phased", `{}`)
	err := postgres.InTx(ctx, b.pool, func(tx pgx.Tx) error {
		c, err := b.store.Begin(ctx, tx, r)
		if err != nil {
			return err
		}
		return checkpoint(ctx, tx, c, chargeRequested)
	})
	if err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(lease - time.Second)
	_, err = b.execute(t, r, created(`{}`))
	var pe *problem.Error
	if !errors.As(err, &pe) || pe.Code != problem.RequestInProgress || pe.RetryAfter <= 0 || pe.RetryAfter > lease {
		t.Fatalf("Begin within the lease: %v, want request_in_progress with Retry-After", err)
	}
	if resp, err := b.store.Peek(ctx, b.pool, r); err != nil || resp != nil {
		t.Fatalf("Peek of a pending record = %+v, %v; want nothing to replay", resp, err)
	}
	b.clock.Advance(2 * time.Second)
	var taken *idempotency.Claim
	err = postgres.InTx(ctx, b.pool, func(tx pgx.Tx) error {
		taken, err = b.store.Begin(ctx, tx, r)
		return err
	})
	if err != nil || taken.Kind != idempotency.ClaimResumed || taken.RecoveryPoint != chargeRequested {
		t.Fatalf("Begin after the lease = %+v, %v; want a resumed claim at charge_requested", taken, err)
	}
	// The take-over renewed the lease: a third attempt now waits again.
	if _, err := b.execute(t, r, created(`{}`)); problem.CodeOf(err) != problem.RequestInProgress {
		t.Fatalf("Begin right after a take-over: %v, want request_in_progress", err)
	}
}

// Business failures are final and replayed; 5xx outcomes are never stored.
func TestFinishStates(t *testing.T) {
	t.Parallel()
	b := setupStore(t)
	ctx := context.Background()
	declined := b.request(t, b.tenantA, opPayments, "declined", `{}`)
	if _, err := b.execute(t, declined, idempotency.Response{Status: http.StatusPaymentRequired, ContentType: problem.ContentType, Body: []byte(`{"code":"card_declined"}`)}); err != nil {
		t.Fatal(err)
	}
	var state string
	if err := b.pool.QueryRow(ctx, `SELECT state FROM api_idempotency WHERE idempotency_key = 'declined'`).Scan(&state); err != nil || idempotency.State(state) != idempotency.StateFailed {
		t.Fatalf("state = %q, %v; want failed", state, err)
	}
	rep, err := b.store.Peek(ctx, b.pool, declined)
	if err != nil || rep == nil || rep.Status != http.StatusPaymentRequired {
		t.Fatalf("declined replay = %+v, %v", rep, err)
	}
	broken := b.request(t, b.tenantA, opPayments, "broken", `{}`)
	if _, err := b.execute(t, broken, idempotency.Response{Status: http.StatusServiceUnavailable, Body: []byte(`{}`)}); err == nil {
		t.Fatal("Finish stored a 503")
	}
	if n := countRows(t, b.pool, `SELECT count(*) FROM api_idempotency WHERE idempotency_key = 'broken'`); n != 0 {
		t.Fatalf("a 5xx left %d records; the key must stay free", n)
	}
}

// Rule 3: N concurrent transactions with one key: exactly one executes, the
// others replay its outcome or are told to retry. No check-then-act.
func TestConcurrentBeginExecutesOnce(t *testing.T) {
	t.Parallel()
	b := setupStore(t)
	r := b.request(t, b.tenantA, opOrders, "race", `{}`)
	const n = 24
	var executed, replayed, busy atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			err := postgres.InTx(context.Background(), b.pool, func(tx pgx.Tx) error {
				c, err := b.store.Begin(context.Background(), tx, r)
				if err != nil {
					return err
				}
				if c.Kind == idempotency.ClaimReplay {
					replayed.Add(1)
					return nil
				}
				executed.Add(1)
				// Hold the claim a moment so the others really wait on it.
				if _, err := tx.Exec(context.Background(), `SELECT pg_sleep(0.05)`); err != nil {
					return err
				}
				return finish(context.Background(), tx, c, created(`{}`))
			})
			switch {
			case err == nil:
			case problem.CodeOf(err) == problem.RequestInProgress:
				busy.Add(1)
			default:
				t.Errorf("Begin: %v", err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if executed.Load() != 1 || executed.Load()+replayed.Load()+busy.Load() != n {
		t.Fatalf("executed %d, replayed %d, busy %d; want exactly one execution", executed.Load(), replayed.Load(), busy.Load())
	}
}

func countRows(t *testing.T, pool *pgxpool.Pool, q string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// claim begins r in a transaction of its own and commits it (or rolls it
// back with rollback), returning the claim.
func (b *storeBundle) claim(t *testing.T, r idempotency.Request, rollback bool) *idempotency.Claim {
	t.Helper()
	ctx := context.Background()
	var c *idempotency.Claim
	errRollback := errors.New("roll back")
	err := postgres.InTx(ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		if c, err = b.store.Begin(ctx, tx, r); err != nil {
			return err
		}
		if err := checkpoint(ctx, tx, c, chargeRequested); err != nil {
			return err
		}
		if rollback {
			return errRollback
		}
		return nil
	})
	if err != nil && !(rollback && errors.Is(err, errRollback)) {
		t.Fatalf("claim %s: %v", r.Key, err)
	}
	return c
}

func (b *storeBundle) release(t *testing.T, c *idempotency.Claim) bool {
	t.Helper()
	var released bool
	err := postgres.InTx(context.Background(), b.pool, func(tx pgx.Tx) error {
		var err error
		released, err = c.Release(context.Background(), tx)
		return err
	})
	if err != nil {
		t.Fatalf("Release: %v", err)
	}
	return released
}

// Release gives back the claim's own lease, and never another owner's: a
// lease ended by somebody who no longer holds it would let a third request
// resume an attempt whose owner may be at the provider right now.
func TestReleaseEndsOnlyItsOwnLease(t *testing.T) {
	t.Parallel()
	b := setupStore(t)
	wantBusy := func(t *testing.T, r idempotency.Request, why string) {
		t.Helper()
		if _, err := b.execute(t, r, created(`{}`)); problem.CodeOf(err) != problem.RequestInProgress {
			t.Fatalf("%s: Begin = %v, want request_in_progress", why, err)
		}
	}

	t.Run("own lease", func(t *testing.T) {
		r := b.request(t, b.tenantA, opPayments, "own", `{}`)
		c := b.claim(t, r, false)
		if !b.release(t, c) {
			t.Fatal("Release of the claim's own lease = false")
		}
		var resumed *idempotency.Claim
		err := postgres.InTx(context.Background(), b.pool, func(tx pgx.Tx) error {
			var err error
			resumed, err = b.store.Begin(context.Background(), tx, r)
			return err
		})
		if err != nil || resumed.Kind != idempotency.ClaimResumed || resumed.RecoveryPoint != chargeRequested {
			t.Fatalf("Begin right after Release = %+v, %v; want the attempt resumed at once", resumed, err)
		}
	})

	t.Run("taken over after the lease", func(t *testing.T) {
		r := b.request(t, b.tenantA, opPayments, "taken", `{}`)
		stale := b.claim(t, r, false)
		b.clock.Advance(lease + time.Second)
		if owner := b.claim(t, r, false); owner.Kind != idempotency.ClaimResumed {
			t.Fatal("the second claim did not take the first one over")
		}
		if b.release(t, stale) {
			t.Fatal("Release by the former owner ended the new owner's lease")
		}
		wantBusy(t, r, "after a stale Release")
	})

	t.Run("never committed", func(t *testing.T) {
		// Two attempts of one key at the same instant: the first one's
		// transaction rolls back, the second then claims the key.
		first := b.request(t, b.tenantA, opPayments, "rolled-back", `{}`)
		first.RequestID = "attempt-1"
		second := first
		second.RequestID = "attempt-2"
		lost := b.claim(t, first, true)
		if owner := b.claim(t, second, false); owner.Kind == idempotency.ClaimResumed {
			t.Fatal("the second attempt resumed a claim that never committed")
		}
		if b.release(t, lost) {
			t.Fatal("Release of a claim that never committed ended another attempt's lease")
		}
		wantBusy(t, first, "after Release of a rolled-back claim")
	})
}

// The Retry-After of request_in_progress: short while the owner has only just
// taken the lease (it is most likely about to finish), then what is left of
// the lease, since a held lease cannot be taken over earlier and an owner
// that holds it this long is slow or dead. A client that kept coming back
// every two seconds would use up its attempts before the lease ends.
func TestInProgressRetryAfterFollowsTheLease(t *testing.T) {
	t.Parallel()
	b := setupStore(t)
	r := b.request(t, b.tenantA, opPayments, "held", `{}`)
	claimedAt := b.clock.Now()
	b.claim(t, r, false)
	for _, tc := range []struct {
		at   time.Duration // since the claim
		want time.Duration
	}{
		{500 * time.Millisecond, 2 * time.Second},
		{1900 * time.Millisecond, 2 * time.Second},
		{5 * time.Second, lease - 5*time.Second},
		{lease - 1500*time.Millisecond, 2 * time.Second}, // 1.5 s left, rounded up
	} {
		b.clock.Advance(claimedAt.Add(tc.at).Sub(b.clock.Now()))
		_, err := b.execute(t, r, created(`{}`))
		var pe *problem.Error
		if !errors.As(err, &pe) || pe.Code != problem.RequestInProgress || pe.RetryAfter != tc.want {
			t.Fatalf("%v into the lease: %v, want request_in_progress with Retry-After %v", tc.at, err, tc.want)
		}
	}
}

// A final record is never overwritten. A claim whose record was finished
// meanwhile (by a retry or the recoverer that took it over) finds the
// stored outcome when it locks the record again; an update it queues
// without that lock is refused (ErrNotLocked), and one that slips past it
// (a lock of an earlier transaction never used up) finds no pending record
// (ErrNotPending). The stored outcome stays the first one.
func TestFinishOnlyFinishesAPendingRecord(t *testing.T) {
	t.Parallel()
	b := setupStore(t)
	ctx := context.Background()
	r := b.request(t, b.tenantA, opPayments, "twice", `{}`)
	var stale *idempotency.Claim
	if err := postgres.InTx(ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		stale, err = b.store.Begin(ctx, tx, r) // its lock is left unused
		return err
	}); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(lease + time.Second)
	var owner *idempotency.Claim
	err := postgres.InTx(ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		if owner, err = b.store.Begin(ctx, tx, r); err != nil {
			return err
		}
		return finish(ctx, tx, owner, created(`{"by":"owner"}`))
	})
	if err != nil || owner.Kind != idempotency.ClaimResumed {
		t.Fatalf("take-over and finish: %+v, %v", owner, err)
	}
	err = postgres.InTx(ctx, b.pool, func(tx pgx.Tx) error { return finish(ctx, tx, stale, created(`{"by":"stale"}`)) })
	if !errors.Is(err, idempotency.ErrNotPending) {
		t.Fatalf("Finish of a finished record with a stale lock = %v, want ErrNotPending", err)
	}
	err = postgres.InTx(ctx, b.pool, func(tx pgx.Tx) error {
		stored, err := stale.Reacquire(ctx, tx)
		if err != nil || stored == nil || string(stored.Body) != `{"by":"owner"}` {
			t.Errorf("Reacquire of a finished record = %+v, %v; want the owner's outcome", stored, err)
		}
		return finish(ctx, tx, stale, created(`{"by":"stale"}`))
	})
	if !errors.Is(err, idempotency.ErrNotLocked) {
		t.Fatalf("Finish of a finished record after Reacquire = %v, want ErrNotLocked", err)
	}
	resp, err := b.store.Peek(ctx, b.pool, r)
	if err != nil || resp == nil || string(resp.Body) != `{"by":"owner"}` {
		t.Fatalf("stored outcome = %+v, %v; want the owner's", resp, err)
	}
}

// A record's update (Checkpoint, Finish) needs the transaction's own lock
// of it, pending: the claim's, or Reacquire's. One update uses the lock up,
// and another is refused until Reacquire locks the record again; the
// update may be queued blind into a pipeline after the lock was read.
func TestUpdatesNeedTheTransactionsLock(t *testing.T) {
	t.Parallel()
	b := setupStore(t)
	ctx := context.Background()
	r := b.request(t, b.tenantA, opPayments, "locked", `{}`)
	err := postgres.InTx(ctx, b.pool, func(tx pgx.Tx) error {
		claim, err := b.store.Begin(ctx, tx, r)
		if err != nil {
			return err
		}
		if err := checkpoint(ctx, tx, claim, chargeRequested); err != nil {
			t.Errorf("Checkpoint after the claim: %v", err)
		}
		if _, _, err := claim.Finish(ctx, tx, created(`{}`), nil); !errors.Is(err, idempotency.ErrNotLocked) {
			t.Errorf("a second update of the claim's lock: %v, want ErrNotLocked", err)
		}
		if stored, err := claim.Reacquire(ctx, tx); err != nil || stored != nil {
			t.Errorf("Reacquire = %+v, %v", stored, err)
		}
		// Queued blind after the lock, read after the pipeline was sent.
		p := postgres.NewPipeline(tx)
		_, done, err := claim.Finish(ctx, p, created(`{"queued":true}`), nil)
		if err != nil {
			return err
		}
		p.Send(ctx)
		return errors.Join(done(), p.Close())
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := b.store.Peek(ctx, b.pool, r); err != nil || resp == nil || string(resp.Body) != `{"queued":true}` {
		t.Fatalf("stored outcome = %+v, %v; want the queued finish's", resp, err)
	}
}

// finish stores resp as c's final outcome in tx, at once.
func finish(ctx context.Context, tx pgx.Tx, c *idempotency.Claim, resp idempotency.Response) error {
	_, done, err := c.Finish(ctx, tx, resp, nil)
	if err != nil {
		return err
	}
	return done()
}

// checkpoint records point on c's record in tx, at once.
func checkpoint(ctx context.Context, tx pgx.Tx, c *idempotency.Claim, point idempotency.RecoveryPoint) error {
	done, err := c.Checkpoint(ctx, tx, point, nil)
	if err != nil {
		return err
	}
	return done()
}
