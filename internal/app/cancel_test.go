package app_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/oncepay/oncepay/proving/pspsim"
)

func (b *testBundle) cancel(t *testing.T, orderID, key string) response {
	t.Helper()
	return b.do(t, "POST", "/v1/orders/"+orderID+"/cancel", acme, key, "")
}

// The race a cancel must not lose: a payment whose outcome is unknown (the
// provider charged and the answer was lost) is at the provider, so a cancel
// of its order is refused, and the payment's retry under its first key
// finishes it. Never a charge on a cancelled order.
func TestCancelRefusedWhileAPaymentIsAtTheProvider(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orderID, _ := b.order(t, "o1")
	b.faults(t, pspsim.Faults{DropNext: 1})
	first := b.pay(t, orderID, "pay-1", "pm_card_ok")
	wantProblem(t, first, http.StatusServiceUnavailable, "payment_provider_unavailable")

	refused := b.cancel(t, orderID, "cancel-1")
	wantProblem(t, refused, http.StatusConflict, "order_not_cancellable")

	retry := b.pay(t, orderID, "pay-1", "pm_card_ok")
	if retry.status != http.StatusCreated {
		t.Fatalf("the payment's retry = %d %s, want 201", retry.status, retry.body)
	}
	if n := b.allCharges(); n != 1 {
		t.Fatalf("provider charges = %d, want 1", n)
	}
	if n := b.count(t, `SELECT count(*) FROM orders WHERE id = $1 AND status IN ('paid', 'fulfilled')`, orderID); n != 1 {
		t.Fatalf("order %s is not paid after the refused cancel and the payment's retry", orderID)
	}
	again := b.cancel(t, orderID, "cancel-1")
	if again.status != http.StatusConflict || !bytes.Equal(again.body, refused.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the refused cancel's retry = %d %s, want its stored refusal", again.status, again.body)
	}
}

// A cancelled order is never paid: a payment under a new key is refused
// before the provider hears of it, and the refusal is stored.
func TestPayOfACancelledOrderIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orderID, _ := b.order(t, "o1")
	if r := b.cancel(t, orderID, "cancel-1"); r.status != http.StatusOK || r.json(t)["status"] != "cancelled" {
		t.Fatalf("cancel = %d %s, want 200 and a cancelled order", r.status, r.body)
	}
	refused := b.pay(t, orderID, "pay-1", "pm_card_ok")
	wantProblem(t, refused, http.StatusConflict, "order_not_payable")
	if again := b.pay(t, orderID, "pay-1", "pm_card_ok"); again.status != http.StatusConflict || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the refused payment's retry = %d %s, want its stored refusal", again.status, again.body)
	}
	if n := b.allCharges(); n != 0 {
		t.Fatalf("provider charges = %d for a cancelled order, want 0", n)
	}
	if n := b.count(t, `SELECT count(*) FROM payments WHERE order_id = $1`, orderID); n != 0 {
		t.Fatalf("%d payments of a cancelled order", n)
	}
}
