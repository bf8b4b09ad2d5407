package orders_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/postgres"
)

// The lifecycle's transitions, every pair: exactly those of the table, and
// only forward (each to a later status in lifecycle order), so an order
// never stays put and never goes back.
func TestStatusMovesOnlyForward(t *testing.T) {
	t.Parallel()
	allowed := map[[2]orders.Status]bool{
		{orders.StatusAwaitingPayment, orders.StatusPaid}:        true,
		{orders.StatusAwaitingPayment, orders.StatusCancelled}:   true, // given up before it was paid; final
		{orders.StatusPaid, orders.StatusFulfilled}:              true,
		{orders.StatusPaid, orders.StatusPartiallyRefunded}:      true, // refunded before it shipped
		{orders.StatusPaid, orders.StatusRefunded}:               true,
		{orders.StatusFulfilled, orders.StatusPartiallyRefunded}: true,
		{orders.StatusFulfilled, orders.StatusRefunded}:          true,
		{orders.StatusPartiallyRefunded, orders.StatusRefunded}:  true,
	}
	all := orders.Statuses()
	for i, from := range all {
		if !from.Valid() {
			t.Errorf("%s is not Valid", from)
		}
		for j, to := range all {
			got := from.CanMoveTo(to)
			if got != allowed[[2]orders.Status{from, to}] {
				t.Errorf("%s -> %s: CanMoveTo = %v, want %v", from, to, got, !got)
			}
			if got && j <= i {
				t.Errorf("%s -> %s goes backwards or stays", from, to)
			}
		}
	}
	for from, tos := range orders.Transitions() {
		for _, to := range tos {
			if !from.Valid() || !to.Valid() {
				t.Errorf("transition %s -> %s names a status outside the lifecycle", from, to)
			}
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
			moved, err = b.svc.Advance(ctx, tx, b.acme.ID, o.ID, to)
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
