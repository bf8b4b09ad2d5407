package orders_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/postgres"
)

// The lifecycle's transitions, every pair: an order moves only forward, may
// skip a step (a refund before shipping), never stays put and never goes
// back.
func TestStatusMovesOnlyForward(t *testing.T) {
	t.Parallel()
	all := orders.Statuses()
	for i, from := range all {
		for j, to := range all {
			if got, want := from.CanMoveTo(to), i < j; got != want {
				t.Errorf("%s -> %s: CanMoveTo = %v, want %v", from, to, got, want)
			}
		}
		if !from.Valid() {
			t.Errorf("%s is not Valid", from)
		}
	}
	for _, bad := range []orders.Status{"", "shipped", "PAID"} {
		if bad.Valid() || len(bad.Predecessors()) != 0 || orders.StatusAwaitingPayment.CanMoveTo(bad) {
			t.Errorf("%q is treated as a status of the lifecycle", bad)
		}
	}
}

// Advance applies the lifecycle in the database: it moves an order forward
// from wherever it is, and leaves it alone when the move would go backwards
// or stay put, whoever asks.
func TestAdvanceOnlyMovesForward(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o, _ := b.create(t, b.acme, "life-1", `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":1}]}`)
	ctx := context.Background()
	advance := func(to orders.Status) bool {
		t.Helper()
		var moved bool
		if err := postgres.InTx(ctx, b.pool, func(tx pgx.Tx) error {
			var err error
			moved, err = b.svc.Advance(ctx, tx, o.ID, to)
			return err
		}); err != nil && to != orders.StatusAwaitingPayment {
			t.Fatalf("Advance to %s: %v", to, err)
		}
		return moved
	}
	for _, step := range []struct {
		to    orders.Status
		moved bool
		then  orders.Status
	}{
		{orders.StatusAwaitingPayment, false, orders.StatusAwaitingPayment}, // nothing moves to the start
		{orders.StatusPaid, true, orders.StatusPaid},
		{orders.StatusPaid, false, orders.StatusPaid}, // a repeat changes nothing
		{orders.StatusPartiallyRefunded, true, orders.StatusPartiallyRefunded},
		{orders.StatusFulfilled, false, orders.StatusPartiallyRefunded}, // a late shipment never overwrites a refund
		{orders.StatusRefunded, true, orders.StatusRefunded},
		{orders.StatusPaid, false, orders.StatusRefunded},
	} {
		if moved := advance(step.to); moved != step.moved {
			t.Fatalf("Advance to %s moved = %v, want %v", step.to, moved, step.moved)
		}
		got, err := b.svc.Get(ctx, b.acme.ID, o.ID)
		if err != nil || got.Status != step.then {
			t.Fatalf("after Advance to %s: %s, %v; want %s", step.to, got.Status, err, step.then)
		}
	}
	if r := b.do(t, b.acme, http.MethodGet, "/v1/orders/"+o.ID.String(), "", ""); r.Status != http.StatusOK {
		t.Fatalf("GET = %d", r.Status)
	}
}
