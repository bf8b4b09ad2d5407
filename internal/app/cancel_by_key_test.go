package app_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/proving/pspsim"
)

// cancelByKey sends POST /v1/payments/cancel-by-key under cancelKey: give up
// on the payment of orderID asked for under payKey.
func (b *testBundle) cancelByKey(t *testing.T, cancelKey, orderID, payKey string) response {
	t.Helper()
	return b.do(t, "POST", "/v1/payments/cancel-by-key", acme, cancelKey, fmt.Sprintf(`{"order_id":%q,"idempotency_key":%q}`, orderID, payKey))
}

// wantCancel checks a cancel's answer and returns its body.
func wantCancel(t *testing.T, r response, status int, outcome string) map[string]any {
	t.Helper()
	if r.status != status {
		t.Fatalf("cancel = %d %s, want %d", r.status, r.body, status)
	}
	m := r.json(t)
	if m["outcome"] != outcome {
		t.Fatalf("cancel's outcome = %v, want %s: %s", m["outcome"], outcome, r.body)
	}
	return m
}

// refunds counts the provider's refunds.
func (b *testBundle) refunds() int { return len(b.psp.Ledger("").Refunds) }

// A client gives up before its payment request arrived (it is still in the
// network): the cancel leaves a tombstone under the key, so the request,
// when it comes, whatever its body, is refused and never reaches the
// provider. The order itself can still be paid under a new key.
func TestCancelByKeyBeforeThePaymentArrives(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orderID, _ := b.order(t, "o1")

	first := b.cancelByKey(t, "cancel-1", orderID, "pay-1")
	wantCancel(t, first, http.StatusOK, "prevented")
	again := b.cancelByKey(t, "cancel-1", orderID, "pay-1")
	if again.status != first.status || !bytes.Equal(again.body, first.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("cancel's retry = %d %s, want the first answer replayed", again.status, again.body)
	}

	wantProblem(t, b.pay(t, orderID, "pay-1", "pm_card_ok"), http.StatusConflict, "payment_cancelled")
	wantProblem(t, b.pay(t, orderID, "pay-1", "pm_card_other"), http.StatusConflict, "payment_cancelled") // whatever the body
	if n := b.allCharges(); n != 0 {
		t.Fatalf("provider charges = %d, want 0: the cancelled request ran", n)
	}
	st := wantKey(t, b.lookupKey(t, acme, "payments.create", "pay-1"), "cancelled")
	if resp, _ := st["response"].(map[string]any); resp["status"] != float64(http.StatusConflict) {
		t.Fatalf("cancelled key's response = %v, want status 409", st["response"])
	}
	wantCancel(t, b.cancelByKey(t, "cancel-2", orderID, "pay-1"), http.StatusOK, "prevented")

	if r := b.pay(t, orderID, "pay-2", "pm_card_ok"); r.status != http.StatusCreated {
		t.Fatalf("pay under a new key = %d %s, want 201", r.status, r.body)
	}
}

// A payment that succeeded is undone by a full refund under a key derived
// from the payment: the cancel starts it, the Recoverer finishes it with the
// refund's own steps, once however often it is asked.
func TestCancelByKeyOfASucceededPaymentRefundsIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orderID, _ := b.order(t, "o1")
	paid := b.pay(t, orderID, "pay-1", "pm_card_ok")
	if paid.status != http.StatusCreated {
		t.Fatalf("pay = %d %s", paid.status, paid.body)
	}
	got := wantCancel(t, b.cancelByKey(t, "cancel-1", orderID, "pay-1"), http.StatusAccepted, "refund_started")
	refundID, _ := got["refund_id"].(string)
	if refundID == "" || got["payment_id"] != paid.json(t)["id"] {
		t.Fatalf("cancel = %v, want the payment and its refund", got)
	}
	again := wantCancel(t, b.cancelByKey(t, "cancel-2", orderID, "pay-1"), http.StatusAccepted, "refund_started")
	if again["refund_id"] != refundID {
		t.Fatalf("a second cancel started refund %v, want the same %s", again["refund_id"], refundID)
	}

	ctx := context.Background()
	if n, err := b.app.Recoverer().RecoverOnce(ctx, 10); err != nil || n != 1 {
		t.Fatalf("RecoverOnce = %d, %v; want the refund finished", n, err)
	}
	if r := b.do(t, "GET", "/v1/refunds/"+refundID, acme, "", "").json(t); r["status"] != "succeeded" {
		t.Fatalf("refund = %v, want succeeded", r)
	}
	if s := b.do(t, "GET", "/v1/orders/"+orderID, acme, "", "").json(t)["status"]; s != "refunded" {
		t.Fatalf("order = %v, want refunded", s)
	}
	if n, err := b.app.Recoverer().RecoverOnce(ctx, 10); err != nil || n != 0 {
		t.Fatalf("RecoverOnce again = %d, %v; want nothing", n, err)
	}
	// Refunded already: a later cancel has nothing left to undo; the
	// first one's answer stays what it was.
	wantCancel(t, b.cancelByKey(t, "cancel-3", orderID, "pay-1"), http.StatusOK, "nothing_to_cancel")
	wantCancel(t, b.cancelByKey(t, "cancel-1", orderID, "pay-1"), http.StatusAccepted, "refund_started")
	if c, r := b.allCharges(), b.refunds(); c != 1 || r != 1 {
		t.Fatalf("provider: %d charges, %d refunds; want 1 and 1", c, r)
	}
}

// givenUpWhileUnknown makes an order whose payment under "pay-1" the
// provider charged while its answer was lost, and gives it up under
// "cancel-1" (cancel_requested): the payment is marked, its outcome still
// unknown to the service. The provider's webhook would tell the service of
// the charge before the cancel comes: it is held back (its deliveries go
// nowhere), so the outcome stays unknown until a retry or the Recoverer
// asks. It returns the order and the marked payment.
func (b *testBundle) givenUpWhileUnknown(t *testing.T) (orderID, paymentID string) {
	t.Helper()
	orderID, _ = b.order(t, "o1")
	if err := b.psp.SetWebhookURL("http://127.0.0.1:1/webhooks/psp"); err != nil {
		t.Fatal(err)
	}
	b.faults(t, pspsim.Faults{DropNext: 1})
	wantProblem(t, b.pay(t, orderID, "pay-1", "pm_card_ok"), http.StatusServiceUnavailable, "payment_provider_unavailable")
	got := wantCancel(t, b.cancelByKey(t, "cancel-1", orderID, "pay-1"), http.StatusAccepted, "cancel_requested")
	paymentID, _ = got["payment_id"].(string)
	if _, err := uuid.Parse(paymentID); err != nil {
		t.Fatalf("cancel = %v, want the payment it marked", got)
	}
	return orderID, paymentID
}

// The hard case: the provider charged but the answer was lost, and the
// client gives up. The cancel marks the payment; the step that learns the
// outcome (here the client's retry) records the charge, does not pay the
// order, and starts the refund; the order ends cancelled, never shipped.
func TestCancelByKeyWhileTheOutcomeIsUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orderID, paymentID := b.givenUpWhileUnknown(t)
	retry := b.pay(t, orderID, "pay-1", "pm_card_ok")
	wantProblem(t, retry, http.StatusConflict, "payment_cancelled")
	if s := b.do(t, "GET", "/v1/orders/"+orderID, acme, "", "").json(t)["status"]; s != "awaiting_payment" {
		t.Fatalf("order after the charge of a cancelled payment = %v, want awaiting_payment (never paid)", s)
	}
	if n, err := b.app.Recoverer().RecoverOnce(context.Background(), 10); err != nil || n != 1 {
		t.Fatalf("RecoverOnce = %d, %v; want the compensation finished", n, err)
	}
	if s := b.do(t, "GET", "/v1/orders/"+orderID, acme, "", "").json(t)["status"]; s != "cancelled" {
		t.Fatalf("order = %v, want cancelled", s)
	}
	// Every state change has its event: consumers learn the order was given up.
	if n := b.count(t, `SELECT count(*) FROM outbox_events WHERE event_type = 'order.cancelled' AND aggregate_id = $1`, orderID); n != 1 {
		t.Fatalf("order.cancelled events = %d, want 1", n)
	}
	p := b.do(t, "GET", "/v1/payments/"+paymentID, acme, "", "").json(t)
	if p["status"] != "succeeded" || p["amount_refunded"] != p["amount"] {
		t.Fatalf("payment = %v, want succeeded and refunded in full", p)
	}
	if c, r := b.allCharges(), b.refunds(); c != 1 || r != 1 {
		t.Fatalf("provider: %d charges, %d refunds; want 1 and 1", c, r)
	}
	wantProblem(t, b.pay(t, orderID, "pay-1", "pm_card_ok"), http.StatusConflict, "payment_cancelled") // replayed
}

// A database error while the compensation is written (here its refund's
// insert refused by a unique constraint: another refund already holds its
// provider key) is an error of the step like any other, also in the
// Recoverer, which has no HTTP layer to catch a panic: nothing of the
// compensation stays, and the next attempt, with the row gone, undoes the
// payment.
func TestCancelByKeyCompensationThatCannotBeWritten(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orderID, paymentID := b.givenUpWhileUnknown(t)
	pid := uuid.MustParse(paymentID)
	tenant := uuid.MustParse(b.tenantID(t, "acme"))
	ctx := context.Background()
	providerKey := payments.ProviderKey(tenant, payments.OpRefund, idempotency.Key(payments.CompensationKeyPrefix+paymentID))
	if _, err := b.pool.Exec(ctx, `INSERT INTO refunds (id, tenant_id, payment_id, idempotency_key, request_hash, provider_key, status, amount, created_at, updated_at)
		VALUES ($1, $2, $3, 'in-the-way', '\x00', $4, 'failed', 1, now(), now())`, uuid.New(), tenant, pid, providerKey); err != nil {
		t.Fatal(err)
	}
	compensations := func() int {
		return b.count(t, `SELECT count(*) FROM refunds WHERE idempotency_key = $1`, payments.CompensationKeyPrefix+paymentID)
	}
	// The Recoverer learns the charge and cannot write its compensation.
	b.clock.Advance(31 * time.Second)
	if _, err := b.app.Recoverer().RecoverOnce(ctx, 10); err != nil {
		t.Fatalf("RecoverOnce: %v", err)
	}
	if n := compensations(); n != 0 {
		t.Fatalf("compensating refunds after the failed attempt = %d, want 0", n)
	}
	if _, err := b.pool.Exec(ctx, `DELETE FROM refunds WHERE tenant_id = $1 AND idempotency_key = 'in-the-way'`, tenant); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, b.pay(t, orderID, "pay-1", "pm_card_ok"), http.StatusConflict, "payment_cancelled")
	if n := compensations(); n != 1 {
		t.Fatalf("compensating refunds after the retry = %d, want 1", n)
	}
	if n, err := b.app.Recoverer().RecoverOnce(ctx, 10); err != nil || n != 1 {
		t.Fatalf("RecoverOnce = %d, %v; want the compensation finished", n, err)
	}
	if s := b.do(t, "GET", "/v1/orders/"+orderID, acme, "", "").json(t)["status"]; s != "cancelled" {
		t.Fatalf("order = %v, want cancelled", s)
	}
}

// A declined payment needs nothing undone; neither does a key whose request
// was refused without a payment.
func TestCancelByKeyWithNothingToUndo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orderID, _ := b.order(t, "o1")
	wantProblem(t, b.pay(t, orderID, "pay-declined", "pm_card_declined"), http.StatusPaymentRequired, "card_declined")
	wantCancel(t, b.cancelByKey(t, "cancel-1", orderID, "pay-declined"), http.StatusOK, "nothing_to_cancel")
	if r := b.pay(t, orderID, "pay-ok", "pm_card_ok"); r.status != http.StatusCreated {
		t.Fatalf("pay = %d %s", r.status, r.body)
	}
	wantProblem(t, b.pay(t, orderID, "pay-twice", "pm_card_ok"), http.StatusConflict, "order_already_paid")
	wantCancel(t, b.cancelByKey(t, "cancel-2", orderID, "pay-twice"), http.StatusOK, "nothing_to_cancel")
	if n := b.refunds(); n != 0 {
		t.Fatalf("provider refunds = %d, want 0", n)
	}
}

// What a cancel refuses: no such order, a key whose payment is another
// order's, a body without what it names; none is stored.
func TestCancelByKeyRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orderID, _ := b.order(t, "o1")
	otherID, _ := b.order(t, "o2")
	if r := b.pay(t, orderID, "pay-1", "pm_card_ok"); r.status != http.StatusCreated {
		t.Fatalf("pay = %d %s", r.status, r.body)
	}
	wantProblem(t, b.cancelByKey(t, "c1", "00000000-0000-7000-8000-000000000000", "pay-1"), http.StatusNotFound, "not_found")
	wantProblem(t, b.cancelByKey(t, "c2", otherID, "pay-1"), http.StatusNotFound, "not_found")
	wantProblem(t, b.do(t, "POST", "/v1/payments/cancel-by-key", acme, "c3", `{"order_id":"`+orderID+`"}`), http.StatusUnprocessableEntity, "validation_failed")
	wantProblem(t, b.do(t, "POST", "/v1/payments/cancel-by-key", acme, "c4", `{"order_id":"x","idempotency_key":""}`), http.StatusUnprocessableEntity, "validation_failed")
	wantProblem(t, b.do(t, "POST", "/v1/payments/cancel-by-key", acme, "", `{"order_id":"`+orderID+`","idempotency_key":"pay-1"}`), http.StatusBadRequest, "idempotency_key_missing")
	if n := b.refunds(); n != 0 {
		t.Fatalf("provider refunds = %d, want 0", n)
	}
}

// A payment request has claimed its key and not committed yet: the cancel
// waits for that transaction and never races it. A claim rolled back (its
// request failed before it ran) leaves the key free, and the cancel writes
// its tombstone; a claim committed without a payment yet (its step about
// to call the provider) is answered 409 request_in_progress with
// Retry-After, and the cancel runs again when retried.
func TestCancelByKeyWaitsForAClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orderID, _ := b.order(t, "o1")
	tenant := b.tenantID(t, "acme")
	ctx := context.Background()
	for _, commit := range []bool{false, true} {
		payKey, cancelKey := fmt.Sprintf("pay-%t", commit), fmt.Sprintf("cancel-%t", commit)
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(ctx) }) // when the test stops early
		if _, err := tx.Exec(ctx, `INSERT INTO api_idempotency (tenant_id, operation, idempotency_key, request_hash, state, recovery_point,
			locked_until, request_id, created_at, updated_at, expires_at)
			VALUES ($1, 'payments.create', $2, '\x00', 'pending', 'started', now() + interval '1 minute', 'held', now(), now(), now() + interval '45 days')`,
			tenant, payKey); err != nil {
			t.Fatal(err)
		}
		answer := make(chan response, 1)
		go func() { answer <- b.cancelByKey(t, cancelKey, orderID, payKey) }()
		// The cancel waits on the claim's row, however long it takes to get
		// there on a busy machine.
		deadline := time.Now().Add(30 * time.Second)
		for b.lockWaits(t) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the cancel never waited for the claim's transaction")
			}
			select {
			case r := <-answer:
				t.Fatalf("the cancel answered %d %s while the claim was open: it raced the claim", r.status, r.body)
			case <-time.After(10 * time.Millisecond):
			}
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		r := <-answer
		if !commit {
			wantCancel(t, r, http.StatusOK, "prevented")
			continue
		}
		wantProblem(t, r, http.StatusConflict, "request_in_progress")
		if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 {
			t.Fatalf("Retry-After = %q, want whole seconds, at least 1", r.header.Get("Retry-After"))
		}
		if n := b.count(t, `SELECT count(*) FROM api_idempotency WHERE operation = 'payments.cancel' AND idempotency_key = $1`, cancelKey); n != 0 {
			t.Fatalf("records of the refused cancel = %d, want 0: request_in_progress is not stored", n)
		}
	}
	if n := b.allCharges(); n != 0 {
		t.Fatalf("provider charges = %d, want 0", n)
	}
}

// lockWaits counts the statements of the test's database waiting for a
// lock: on Citus, on any node (citus_lock_waits), since the row a statement
// waits for lives on a worker.
func (b *testBundle) lockWaits(t *testing.T) int {
	t.Helper()
	var citus bool
	if err := b.pool.QueryRow(context.Background(), `SELECT to_regclass('pg_catalog.citus_lock_waits') IS NOT NULL`).Scan(&citus); err != nil {
		t.Fatal(err)
	}
	if citus {
		return b.count(t, `SELECT count(*) FROM citus_lock_waits`)
	}
	return b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`)
}
