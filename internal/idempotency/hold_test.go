package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/problem"
)

// claimExpired runs ClaimExpired for opPayments with backoff, tenant by
// tenant like the recoverer.
func (b *storeBundle) claimExpired(t *testing.T, backoff func(int) time.Duration) []*idempotency.Claim {
	t.Helper()
	ops := []idempotency.Operation{opPayments}
	tenants, err := b.store.ExpiredTenants(context.Background(), b.pool, ops, 10)
	if err != nil {
		t.Fatal(err)
	}
	var claims []*idempotency.Claim
	for _, tenant := range tenants {
		if err := postgres.InTx(context.Background(), b.pool, func(tx pgx.Tx) error {
			got, err := b.store.ClaimExpired(context.Background(), tx, tenant, ops, 10, backoff)
			claims = append(claims, got...)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	return claims
}

// The recoverer's take-overs are counted and spaced by its backoff, which a
// client's take-over (Begin) ignores and does not count. A held record is
// nobody's: Begin answers awaiting_operator, ClaimExpired skips it, a
// checkpoint or finish of it changes nothing; Unhold makes it due at once
// with its count from zero. Inspect shows all of it.
func TestHoldBackoffAndUnhold(t *testing.T) {
	t.Parallel()
	b := setupStore(t)
	ctx := context.Background()
	r := b.request(t, b.tenantA, opPayments, "held", `{}`)
	b.release(t, b.claim(t, r, false))
	b.clock.Advance(time.Second) // the released lease is in the past
	backoff := func(n int) time.Duration { return time.Duration(n) * time.Minute }

	claims := b.claimExpired(t, backoff)
	if len(claims) != 1 || claims[0].Recovery != 1 {
		t.Fatalf("first take-over = %+v, want one claim, recovery 1", claims)
	}
	b.release(t, claims[0])
	b.clock.Advance(time.Second)
	if got := b.claimExpired(t, backoff); len(got) != 0 {
		t.Fatalf("take-over within the backoff = %d claims, want none", len(got))
	}
	rec, err := b.store.Inspect(ctx, b.pool, b.tenantA, opPayments, "held")
	if err != nil || rec.Recoveries != 1 || rec.NextRecoveryAt == nil || !rec.NextRecoveryAt.Equal(b.clock.Now().UTC().Add(time.Minute-time.Second)) {
		t.Fatalf("Inspect = %+v, %v; want 1 recovery, the next one a minute on", rec, err)
	}
	// A client is not held back, and not counted.
	client := b.claim(t, r, false)
	if client.Kind != idempotency.ClaimResumed || client.Recovery != 0 {
		t.Fatalf("client's take-over = %+v, want a resumed claim that is no recovery", client)
	}

	var heldAt time.Time
	if err := postgres.InTx(ctx, b.pool, func(tx pgx.Tx) error {
		var ok bool
		heldAt, ok, err = client.Hold(ctx, tx)
		if err == nil && !ok {
			err = errors.New("not held")
		}
		return err
	}); err != nil {
		t.Fatalf("Hold: %v", err)
	}
	if _, err := b.execute(t, r, created(`{}`)); problem.CodeOf(err) != problem.AwaitingOperator {
		t.Fatalf("Begin of a held record: %v, want awaiting_operator", err)
	}
	b.clock.Advance(time.Hour)
	if got := b.claimExpired(t, backoff); len(got) != 0 {
		t.Fatalf("ClaimExpired of a held record = %d claims, want none", len(got))
	}
	if err := postgres.InTx(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := client.Reacquire(ctx, tx); problem.CodeOf(err) != problem.AwaitingOperator {
			t.Errorf("Reacquire of a held record: %v, want awaiting_operator", err)
		}
		return finish(ctx, tx, client, created(`{}`))
	}); !errors.Is(err, idempotency.ErrNotLocked) {
		t.Fatalf("Finish of a held record: %v, want ErrNotLocked", err)
	}
	rec, err = b.store.Inspect(ctx, b.pool, b.tenantA, opPayments, "held")
	if err != nil || rec.State != idempotency.StatePending || rec.HeldAt == nil || !rec.HeldAt.Equal(heldAt) || rec.LockedUntil != nil {
		t.Fatalf("Inspect of the held record = %+v, %v", rec, err)
	}

	unhold := func() bool {
		var ok bool
		if err := postgres.InTx(ctx, b.pool, func(tx pgx.Tx) error {
			var err error
			ok, err = b.store.Unhold(ctx, tx, b.tenantA, opPayments, "held")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !unhold() || unhold() {
		t.Fatal("Unhold: want true once, then false")
	}
	b.clock.Advance(time.Second)
	claims = b.claimExpired(t, backoff)
	if len(claims) != 1 || claims[0].Recovery != 1 {
		t.Fatalf("take-over after the release = %+v, want one claim, its recoveries counted from zero", claims)
	}
	if _, err := b.store.Inspect(ctx, b.pool, b.tenantB, opPayments, "held"); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("Inspect in another tenant: %v, want ErrNotFound", err)
	}
}
