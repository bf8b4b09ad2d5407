package webhooks_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/oncepay/oncepay/internal/attention"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/testkit"
	"github.com/oncepay/oncepay/internal/webhooks"
)

// A payment left pending (the provider's answer never reached us) is
// completed by its webhook, and the receiver's signal wakes the running
// worker at once: its polling interval is an hour.
func TestPendingPaymentCompletedByWebhook(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.worker.Run(ctx, time.Hour) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	paid := b.payment(t, payments.StatusPending)
	declined := b.payment(t, payments.StatusPending)
	processed := func(id string) func() bool {
		return func() bool {
			return b.count(t, `SELECT count(*) FROM webhook_receipts WHERE delivery_id = $1 AND processed_at IS NOT NULL`, id) == 1
		}
	}
	wantReceived(t, b.deliver(t, "msg_paid", chargeEvent(t, webhooks.EventChargeSucceeded, paid.tenant, paid.payment.String(), chargeIDOf(paid.payment), b.clock.Now().Unix())), false)
	testkit.WaitFor(t, 20*time.Second, "the worker to process msg_paid", processed("msg_paid"))
	// Run's first round is over now: only the receiver's signal can start
	// the round that applies the next delivery.
	wantReceived(t, b.deliver(t, "msg_declined", chargeEvent(t, webhooks.EventChargeFailed, declined.tenant, declined.payment.String(), chargeIDOf(declined.payment), b.clock.Now().Unix())), false)
	testkit.WaitFor(t, 20*time.Second, "the worker to process msg_declined", processed("msg_declined"))
	if got, want := b.state(t, paid), (state{payment: payments.StatusSucceeded, order: "paid", succeeded: 1}); got != want {
		t.Fatalf("paid: state = %+v, want %+v", got, want)
	}
	if got, want := b.state(t, declined), (state{payment: payments.StatusFailed, order: "awaiting_payment", failed: 1}); got != want {
		t.Fatalf("declined: state = %+v, want %+v", got, want)
	}
	if got := b.str(t, `SELECT failure_code FROM payments WHERE id = $1`, declined.payment); got != "card_declined" {
		t.Fatalf("failure_code = %q, want card_declined", got)
	}
}

// Late and reordered events only move states forward: nothing moves back,
// and no extra event is emitted.
func TestLateEventsOnlyMoveForward(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := b.clock.Now().Unix()

	// charge.failed after charge.succeeded changes nothing.
	succeeded := b.payment(t, payments.StatusPending)
	wantReceived(t, b.deliver(t, "msg_s1", chargeEvent(t, webhooks.EventChargeSucceeded, succeeded.tenant, succeeded.payment.String(), chargeIDOf(succeeded.payment), now)), false)
	if n := b.processOnce(t, 10); n != 1 {
		t.Fatalf("ProcessOnce = %d, want 1", n)
	}
	wantReceived(t, b.deliver(t, "msg_s2", chargeEvent(t, webhooks.EventChargeFailed, succeeded.tenant, succeeded.payment.String(), "ch_other", now+1)), false)

	// charge.succeeded after charge.failed changes nothing either, but it
	// says money moved where we recorded that none did: a mismatch, noted
	// on the receipt for an operator.
	failed := b.payment(t, payments.StatusPending)
	wantReceived(t, b.deliver(t, "msg_f1", chargeEvent(t, webhooks.EventChargeFailed, failed.tenant, failed.payment.String(), chargeIDOf(failed.payment), now)), false)
	if n := b.processOnce(t, 10); n != 2 { // msg_s2, msg_f1
		t.Fatalf("ProcessOnce = %d, want 2", n)
	}
	wantReceived(t, b.deliver(t, "msg_f2", chargeEvent(t, webhooks.EventChargeSucceeded, failed.tenant, failed.payment.String(), chargeIDOf(failed.payment), now+1)), false)

	// charge.refunded arrives before a late copy of charge.succeeded (another
	// delivery id, as after a provider-side resend), and is delivered twice
	// under two ids: the refund is applied once, and the late success neither
	// re-pays the order nor emits an event.
	refunded := b.payment(t, payments.StatusSucceeded)
	refund := b.pendingRefund(t, refunded, true)
	refundBody := refundEvent(t, refunded, refund.String(), now+2)
	wantReceived(t, b.deliver(t, "msg_r1", refundBody), false)
	wantReceived(t, b.deliver(t, "msg_r2", refundBody), false)
	wantReceived(t, b.deliver(t, "msg_r3", chargeEvent(t, webhooks.EventChargeSucceeded, refunded.tenant, refunded.payment.String(), chargeIDOf(refunded.payment), now)), false)

	if n := b.processOnce(t, 10); n != 4 { // msg_f2, msg_r1, msg_r2, msg_r3
		t.Fatalf("ProcessOnce = %d, want 4", n)
	}
	for _, tc := range []struct {
		name string
		f    fixture
		want state
	}{
		{"succeeded", succeeded, state{payment: payments.StatusSucceeded, order: "paid", succeeded: 1}},
		{"failed", failed, state{payment: payments.StatusFailed, order: "awaiting_payment", failed: 1}},
		{"refunded", refunded, state{payment: payments.StatusSucceeded, order: "refunded", refundsSucceeded: 1}},
	} {
		if got := b.state(t, tc.f); got != tc.want {
			t.Fatalf("%s: state = %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if got := b.str(t, `SELECT provider_charge_id FROM payments WHERE id = $1`, succeeded.payment); got != chargeIDOf(succeeded.payment) {
		t.Fatalf("provider_charge_id = %q: the late event overwrote it", got)
	}
	if got := payments.Status(b.str(t, `SELECT status FROM refunds WHERE id = $1`, refund)); got != payments.StatusSucceeded {
		t.Fatalf("refund status = %q, want succeeded", got)
	}
	if n := b.count(t, `SELECT amount_refunded FROM payments WHERE id = $1`, refunded.payment); n != paymentAmount {
		t.Fatalf("amount_refunded = %d, want %d (once)", n, paymentAmount)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_receipts WHERE processed_at IS NULL OR (last_error IS NOT NULL AND delivery_id <> 'msg_f2')`); n != 0 {
		t.Fatalf("receipts unprocessed or with errors = %d, want 0", n)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_receipts WHERE delivery_id = 'msg_f2' AND last_error LIKE 'mismatch:%'`); n != 1 {
		t.Fatal("charge.succeeded for a failed payment is not noted as a mismatch")
	}
}

// An event for a payment or refund we do not know is marked processed with a
// note, and never tried again.
func TestUnknownReferenceIsNotRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other := b.payment(t, payments.StatusSucceeded)
	now := b.clock.Now().Unix()
	for id, body := range map[string][]byte{
		"msg_unknown_payment": chargeEvent(t, webhooks.EventChargeSucceeded, uuid.New(), uuid.NewString(), "ch_x1", now),
		"msg_not_a_uuid":      chargeEvent(t, webhooks.EventChargeFailed, uuid.New(), "order-1234", "ch_x2", now),
		"msg_no_metadata":     []byte(`{"id":"evt_x","type":"charge.succeeded","created":1,"data":{"object":{"id":"ch_x3","status":"succeeded"}}}`),
		"msg_unknown_refund":  refundEvent(t, other, uuid.NewString(), now),
	} {
		wantReceived(t, b.deliver(t, id, body), false)
	}
	if n := b.processOnce(t, 10); n != 4 {
		t.Fatalf("ProcessOnce = %d, want 4", n)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_receipts WHERE processed_at IS NOT NULL AND attempts = 1 AND last_error LIKE 'not applied:%'`); n != 4 {
		t.Fatalf("receipts processed with a note = %d, want 4", n)
	}
	b.clock.Advance(24 * time.Hour)
	if n := b.processOnce(t, 10); n != 0 {
		t.Fatalf("ProcessOnce a day later = %d, want 0", n)
	}
	if n := b.count(t, `SELECT max(attempts) FROM webhook_receipts`); n != 1 {
		t.Fatalf("attempts = %d, want 1", n)
	}
	if n := b.count(t, `SELECT count(*) FROM outbox_events`); n != 0 {
		t.Fatalf("events = %d, want 0", n)
	}
}

// An event that names a payment or refund of ours but another amount or
// currency is never applied, and retrying cannot change it: it is marked
// processed with a note. Nothing moves, nothing is emitted, and the true
// event still applies afterwards.
func TestMismatchedEventIsNotApplied(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := b.clock.Now().Unix()
	pay := b.payment(t, payments.StatusPending)
	refunded := b.payment(t, payments.StatusSucceeded)
	refund := b.pendingRefund(t, refunded, true)
	declined := b.payment(t, payments.StatusSucceeded)
	failedRefund := b.pendingRefund(t, declined, false)
	b.exec(t, `UPDATE refunds SET status = 'failed' WHERE id = $1`, failedRefund)
	charge := chargeEvent(t, webhooks.EventChargeSucceeded, pay.tenant, pay.payment.String(), chargeIDOf(pay.payment), now)
	for id, body := range map[string][]byte{
		"msg_amount":        withMember(t, charge, []string{"data", "object", "amount"}, paymentAmount+1),
		"msg_currency":      withMember(t, charge, []string{"data", "object", "currency"}, "USD"),
		"msg_refund_amount": withMember(t, refundEvent(t, refunded, refund.String(), now), []string{"data", "refund", "amount"}, paymentAmount-1),
		"msg_refund_charge": withMember(t, refundEvent(t, refunded, refund.String(), now), []string{"data", "refund", "charge"}, "ch_other"),
		// Money moved where we recorded that none did.
		"msg_refund_failed": refundEvent(t, declined, failedRefund.String(), now),
	} {
		wantReceived(t, b.deliver(t, id, body), false)
	}
	if n := b.processOnce(t, 10); n != 5 {
		t.Fatalf("ProcessOnce = %d, want 5", n)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_receipts WHERE processed_at IS NOT NULL AND attempts = 1 AND last_error LIKE 'mismatch:%'`); n != 5 {
		t.Fatalf("receipts processed with a mismatch note = %d, want 5", n)
	}
	// Each is set aside for an operator: an open attention item about its
	// delivery and the payment or refund it names, raised with it.
	type about struct {
		kind   string
		tenant uuid.UUID
	}
	wantItems := map[string]about{"msg_amount": {"payment", pay.tenant}, "msg_currency": {"payment", pay.tenant},
		"msg_refund_amount": {"refund", refunded.tenant}, "msg_refund_charge": {"refund", refunded.tenant},
		"msg_refund_failed": {"refund", declined.tenant}}
	items, err := attention.List(context.Background(), b.pool, attention.StatusOpen, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != len(wantItems) {
		t.Fatalf("open attention items = %d, want %d", len(items), len(wantItems))
	}
	for _, it := range items {
		w, ok := wantItems[it.DeliveryID]
		if !ok || it.Reason != attention.ReasonMismatch || it.Attempt != nil || it.Resource == nil || it.Resource.Type != w.kind ||
			it.TenantID != w.tenant || !strings.Contains(it.Detail, it.DeliveryID) {
			t.Errorf("attention item %+v: want a mismatch about webhook %s and its %s", it, it.DeliveryID, w.kind)
		}
	}
	if got := payments.Status(b.str(t, `SELECT status FROM refunds WHERE id = $1`, failedRefund)); got != payments.StatusFailed {
		t.Fatalf("failed refund status = %q, want failed", got)
	}
	if got, want := b.state(t, pay), (state{payment: payments.StatusPending, order: "awaiting_payment"}); got != want {
		t.Fatalf("payment: state = %+v, want %+v", got, want)
	}
	if got := payments.Status(b.str(t, `SELECT status FROM refunds WHERE id = $1`, refund)); got != payments.StatusPending {
		t.Fatalf("refund status = %q, want pending", got)
	}
	if n := b.count(t, `SELECT count(*) FROM outbox_events`); n != 0 {
		t.Fatalf("events = %d, want 0", n)
	}

	wantReceived(t, b.deliver(t, "msg_true", charge), false)
	if n := b.processOnce(t, 10); n != 1 {
		t.Fatalf("ProcessOnce = %d, want 1", n)
	}
	if got, want := b.state(t, pay), (state{payment: payments.StatusSucceeded, order: "paid", succeeded: 1}); got != want {
		t.Fatalf("after the true event: state = %+v, want %+v", got, want)
	}

	// Events about other money are flagged for finished payments and refunds
	// too, not only while they are pending.
	failedRefundBody := withMember(t, refundEvent(t, declined, failedRefund.String(), now), []string{"data", "refund", "status"}, "failed")
	for id, body := range map[string][]byte{
		"msg_late_amount":        withMember(t, charge, []string{"data", "object", "amount"}, paymentAmount+1),
		"msg_failed_refund_more": withMember(t, failedRefundBody, []string{"data", "refund", "amount"}, paymentAmount+1),
	} {
		wantReceived(t, b.deliver(t, id, body), false)
	}
	if n := b.processOnce(t, 10); n != 2 {
		t.Fatalf("ProcessOnce = %d, want 2", n)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_receipts WHERE delivery_id IN ('msg_late_amount', 'msg_failed_refund_more') AND last_error LIKE 'mismatch:%'`); n != 2 {
		t.Fatalf("late events about other money noted as mismatches = %d, want 2", n)
	}

	// A second succeeded charge for the paid payment: charged twice at the
	// provider. Nothing moves, but it is a mismatch, for an operator.
	wantReceived(t, b.deliver(t, "msg_second_charge", chargeEvent(t, webhooks.EventChargeSucceeded, pay.tenant, pay.payment.String(), "ch_second", now+1)), false)
	if n := b.processOnce(t, 10); n != 1 {
		t.Fatalf("ProcessOnce = %d, want 1", n)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_receipts WHERE delivery_id = 'msg_second_charge' AND last_error LIKE 'mismatch:%'`); n != 1 {
		t.Fatal("a second succeeded charge is not noted as a mismatch")
	}
	if n := b.count(t, `SELECT count(*) FROM attention_items WHERE delivery_id = 'msg_second_charge' AND resource_id = $1 AND resolved_at IS NULL`, pay.payment); n != 1 {
		t.Fatal("a second succeeded charge raised no attention item about its payment")
	}
	if got, want := b.state(t, pay), (state{payment: payments.StatusSucceeded, order: "paid", succeeded: 1}); got != want {
		t.Fatalf("after a second charge: state = %+v, want %+v", got, want)
	}
}

// A provider refund's status decides: "pending" changes nothing yet,
// "failed" fails our refund and gives its reserved amount back, and only
// "succeeded" refunds (once).
func TestRefundEventFollowsTheProviderStatus(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := b.clock.Now().Unix()
	f := b.payment(t, payments.StatusSucceeded)
	refund := b.pendingRefund(t, f, true)
	withStatus := func(status string) []byte {
		return withMember(t, refundEvent(t, f, refund.String(), now), []string{"data", "refund", "status"}, status)
	}
	wantReceived(t, b.deliver(t, "msg_pending", withStatus("pending")), false)
	if n := b.processOnce(t, 10); n != 1 {
		t.Fatalf("ProcessOnce = %d, want 1", n)
	}
	if got := payments.Status(b.str(t, `SELECT status FROM refunds WHERE id = $1`, refund)); got != payments.StatusPending {
		t.Fatalf("after a pending provider refund: status = %q, want pending", got)
	}
	wantReceived(t, b.deliver(t, "msg_failed", withStatus("failed")), false)
	if n := b.processOnce(t, 10); n != 1 {
		t.Fatalf("ProcessOnce = %d, want 1", n)
	}
	if got := b.str(t, `SELECT status || ' ' || failure_code FROM refunds WHERE id = $1`, refund); got != "failed refund_failed" {
		t.Fatalf("after a failed provider refund: %q, want failed refund_failed", got)
	}
	if n := b.count(t, `SELECT refund_reserved + amount_refunded FROM payments WHERE id = $1`, f.payment); n != 0 {
		t.Fatalf("reserved + refunded = %d, want 0 (the reservation given back)", n)
	}
	if got, want := b.state(t, f), (state{payment: payments.StatusSucceeded, order: "paid"}); got != want {
		t.Fatalf("state = %+v, want %+v (nothing refunded, no event)", got, want)
	}
}

// A receipt whose application fails is rolled back to its savepoint (other
// receipts of the batch still apply), counted, kept, and retried with
// backoff until it applies.
func TestFailedApplicationIsRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := b.clock.Now().Unix()
	// The refund's amount is not reserved on its payment, so recording it
	// breaks a CHECK constraint: a failure that no retry fixes by itself.
	broken := b.payment(t, payments.StatusSucceeded)
	refund := b.pendingRefund(t, broken, false)
	fine := b.payment(t, payments.StatusPending)
	wantReceived(t, b.deliver(t, "msg_broken", refundEvent(t, broken, refund.String(), now)), false)
	wantReceived(t, b.deliver(t, "msg_fine", chargeEvent(t, webhooks.EventChargeSucceeded, fine.tenant, fine.payment.String(), chargeIDOf(fine.payment), now)), false)

	if n := b.processOnce(t, 10); n != 1 {
		t.Fatalf("ProcessOnce = %d, want 1 (the fine receipt)", n)
	}
	if got, want := b.state(t, fine), (state{payment: payments.StatusSucceeded, order: "paid", succeeded: 1}); got != want {
		t.Fatalf("fine: state = %+v, want %+v", got, want)
	}
	wantBroken := func(attempts int) {
		t.Helper()
		if n := b.count(t, `SELECT count(*) FROM webhook_receipts WHERE delivery_id = 'msg_broken' AND processed_at IS NULL AND last_error IS NOT NULL AND attempts = $1`, attempts); n != 1 {
			t.Fatalf("msg_broken is not unprocessed with %d attempts and an error", attempts)
		}
		if got := payments.Status(b.str(t, `SELECT status FROM refunds WHERE id = $1`, refund)); got != payments.StatusPending {
			t.Fatalf("refund status = %q, want pending (rolled back)", got)
		}
		if got, want := b.state(t, broken), (state{payment: payments.StatusSucceeded, order: "paid"}); got != want {
			t.Fatalf("broken: state = %+v, want %+v", got, want)
		}
	}
	wantBroken(1)

	// Backoff: after n failures a receipt waits 2^n - 1 seconds from its
	// receipt.
	if n := b.processOnce(t, 10); n != 0 {
		t.Fatalf("ProcessOnce at once = %d, want 0", n)
	}
	wantBroken(1)
	b.clock.Advance(time.Second)
	if n := b.processOnce(t, 10); n != 0 {
		t.Fatalf("ProcessOnce after 1s = %d, want 0", n)
	}
	wantBroken(2)

	b.exec(t, `UPDATE payments SET refund_reserved = amount WHERE id = $1`, broken.payment) // the fix
	if n := b.processOnce(t, 10); n != 0 {
		t.Fatalf("ProcessOnce before the backoff ends = %d, want 0", n)
	}
	b.clock.Advance(2 * time.Second)
	if n := b.processOnce(t, 10); n != 1 {
		t.Fatalf("ProcessOnce after the fix = %d, want 1", n)
	}
	if got, want := b.state(t, broken), (state{payment: payments.StatusSucceeded, order: "refunded", refundsSucceeded: 1}); got != want {
		t.Fatalf("broken after the fix: state = %+v, want %+v", got, want)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_receipts WHERE delivery_id = 'msg_broken' AND processed_at IS NOT NULL AND attempts = 3`); n != 1 {
		t.Fatalf("msg_broken is not processed after 3 attempts")
	}
}

// Two workers (two processes, in production) drain the same receipts at
// once: every receipt is finished exactly once, every payment succeeds once
// with one event.
func TestConcurrentWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t)

	const n = 20
	fixtures := make([]fixture, n)
	now := b.clock.Now().Unix()
	for i := range fixtures {
		fixtures[i] = b.payment(t, payments.StatusPending)
		// Two deliveries per payment (the provider resent the event under a
		// new id), so the workers also race on the same payment.
		for copy := range 2 {
			body := chargeEvent(t, webhooks.EventChargeSucceeded, fixtures[i].tenant, fixtures[i].payment.String(), chargeIDOf(fixtures[i].payment), now)
			wantReceived(t, b.deliver(t, fmt.Sprintf("msg_%d_%d", i, copy), body), false)
		}
	}

	workers := []*webhooks.Worker{b.worker, newWorker(b.pool, b.clock, testkit.Logger(t))}
	totals := make([]int, len(workers))
	errs := make([]error, len(workers))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, w := range workers {
		wg.Go(func() {
			<-start
			for {
				got, err := w.ProcessOnce(context.Background(), 3)
				if err != nil {
					errs[i] = err
					return
				}
				if got == 0 {
					return
				}
				totals[i] += got
			}
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("ProcessOnce: %v", err)
		}
	}
	if sum := totals[0] + totals[1]; sum != 2*n {
		t.Fatalf("receipts finished = %d (%v), want %d", sum, totals, 2*n)
	}
	if got := b.processOnce(t, 100); got != 0 {
		t.Fatalf("ProcessOnce after both = %d, want 0", got)
	}
	if got := b.count(t, `SELECT count(*) FROM webhook_receipts WHERE processed_at IS NOT NULL AND attempts = 1 AND last_error IS NULL`); got != 2*n {
		t.Fatalf("receipts processed once, cleanly = %d, want %d", got, 2*n)
	}
	for i, f := range fixtures {
		if got, want := b.state(t, f), (state{payment: payments.StatusSucceeded, order: "paid", succeeded: 1}); got != want {
			t.Fatalf("payment %d: state = %+v, want %+v", i, got, want)
		}
	}
}
