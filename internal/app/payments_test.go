package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/retention"
	"github.com/oncepay/oncepay/internal/testkit"
	"github.com/oncepay/oncepay/proving/pspsim"
)

// order creates an order and returns its id and amount.
func (b *testBundle) order(t *testing.T, key string) (string, int64) {
	t.Helper()
	r := b.do(t, "POST", "/v1/orders", acme, key, orderBody)
	if r.status != http.StatusCreated {
		t.Fatalf("create order: %d %s", r.status, r.body)
	}
	o := r.json(t)
	return o["id"].(string), int64(o["amount_total"].(float64))
}

func (b *testBundle) pay(t *testing.T, orderID, key, method string) response {
	t.Helper()
	return b.do(t, "POST", "/v1/orders/"+orderID+"/payments", acme, key, `{"payment_method":"`+method+`"}`)
}

// charges counts the provider's succeeded charges for our payment reference:
// the simulator's ledger is the ground truth for "charged exactly once".
func (b *testBundle) charges(t *testing.T, paymentID string) int {
	t.Helper()
	n := 0
	for _, c := range b.psp.Ledger(paymentID).Charges {
		if c.Status == pspsim.StatusSucceeded {
			n++
		}
	}
	return n
}

func (b *testBundle) allCharges() int { return len(b.psp.Ledger("").Charges) }

func (b *testBundle) faults(t *testing.T, f pspsim.Faults) {
	t.Helper()
	if err := b.psp.SetFaults(f); err != nil {
		t.Fatal(err)
	}
}

func TestPayOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orderID, amount := b.order(t, "o1")
	r := b.pay(t, orderID, "pay-1", "pm_card_ok")
	if r.status != http.StatusCreated {
		t.Fatalf("pay: %d %s", r.status, r.body)
	}
	p := r.json(t)
	if p["status"] != "succeeded" || p["order_id"] != orderID || int64(p["amount"].(float64)) != amount || p["currency"] != "EUR" || p["provider_charge_id"] == nil {
		t.Fatalf("payment = %s", r.body)
	}
	if r.header.Get("Location") != "/v1/payments/"+p["id"].(string) {
		t.Fatalf("Location = %q", r.header.Get("Location"))
	}
	if exp, _ := http.ParseTime(r.header.Get("Idempotency-Expires")); time.Until(exp) < 44*24*time.Hour {
		t.Fatalf("Idempotency-Expires = %q, want 45 days ahead", r.header.Get("Idempotency-Expires"))
	}
	got := b.do(t, "GET", "/v1/payments/"+p["id"].(string), acme, "", "")
	if !bytes.Equal(got.body, r.body) {
		t.Fatalf("GET payment = %s, want %s", got.body, r.body)
	}
	if s := b.do(t, "GET", "/v1/orders/"+orderID, acme, "", "").json(t)["status"]; s != "paid" && s != "fulfilled" {
		t.Fatalf("order status = %v, want paid (or already fulfilled by the consumer)", s)
	}
	if n := b.charges(t, p["id"].(string)); n != 1 {
		t.Fatalf("provider charges = %d, want 1", n)
	}
	// Rule 7: the provider got our derived key, the same for every attempt.
	if c := b.psp.Ledger(p["id"].(string)).Charges[0]; c.IdempotencyKey == "pay-1" || c.IdempotencyKey == "" {
		t.Fatalf("provider key = %q: want a key derived from the record, not the client's", c.IdempotencyKey)
	}
	if n := b.count(t, `SELECT count(*) FROM outbox_events WHERE event_type = 'payment.succeeded'`); n != 1 {
		t.Fatalf("payment.succeeded events = %d, want 1", n)
	}
	wantProblem(t, b.do(t, "GET", "/v1/payments/"+p["id"].(string), globex, "", ""), http.StatusNotFound, "not_found")
	wantProblem(t, b.pay(t, orderID, "", "pm_card_ok"), http.StatusBadRequest, "idempotency_key_missing")
	wantProblem(t, b.do(t, "POST", "/v1/orders/"+orderID+"/payments", acme, "pay-x", `{}`), http.StatusUnprocessableEntity, "validation_failed")
	wantProblem(t, b.pay(t, "01a22931-c9da-71c4-a494-fc128972f4cb", "pay-404", "pm_card_ok"), http.StatusNotFound, "not_found")
	// The key is checked first, whatever the path: a POST without one is 400
	// even where the id is no UUID.
	wantProblem(t, b.pay(t, "not-a-uuid", "", "pm_card_ok"), http.StatusBadRequest, "idempotency_key_missing")
	wantProblem(t, b.do(t, "POST", "/v1/payments/not-a-uuid/refunds", acme, "", `{"amount":1}`), http.StatusBadRequest, "idempotency_key_missing")
	wantProblem(t, b.pay(t, "not-a-uuid", "pay-404b", "pm_card_ok"), http.StatusNotFound, "not_found")
	// PostgreSQL's text cannot hold U+0000: refused as a field, never a 500.
	// Lengths count characters, as the OpenAPI document's maxLength does.
	for _, method := range []string{`pm\u0000`, `pm\ncard`, "pm_" + strings.Repeat("é", 62)} {
		p := wantProblem(t, b.pay(t, orderID, "pay-bad-method", method), http.StatusUnprocessableEntity, "validation_failed")
		if f := p["errors"].([]any)[0].(map[string]any)["field"]; f != "payment_method" {
			t.Fatalf("payment_method %q: error names %v", method, f)
		}
	}
	wantProblem(t, b.pay(t, orderID, "pay-long-method", "pm_"+strings.Repeat("é", 61)), http.StatusConflict, "order_already_paid")
}

func TestPayDeclinedThenRetryWithNewKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orderID, _ := b.order(t, "o1")
	first := b.pay(t, orderID, "pay-declined", "pm_card_declined")
	p := wantProblem(t, first, http.StatusPaymentRequired, "card_declined")
	failed := b.do(t, "GET", p["instance"].(string), acme, "", "") // the problem points at the failed payment
	if failed.status != http.StatusOK || failed.json(t)["status"] != "failed" || failed.json(t)["failure_code"] != "card_declined" {
		t.Fatalf("declined payment at %v = %d %s", p["instance"], failed.status, failed.body)
	}
	again := b.pay(t, orderID, "pay-declined", "pm_card_declined")
	if again.status != http.StatusPaymentRequired || !bytes.Equal(again.body, first.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("declined replay = %d %s", again.status, again.body)
	}
	if n := b.allCharges(); n != 1 {
		t.Fatalf("provider saw %d charge attempts, want 1 (the decline is not repeated)", n)
	}
	// A decline does not block a new intent with a new key.
	ok := b.pay(t, orderID, "pay-second-card", "pm_card_ok")
	if ok.status != http.StatusCreated {
		t.Fatalf("new attempt after a decline: %d %s", ok.status, ok.body)
	}
}

// A payment method the provider refuses is a final failure of that attempt
// (422 payment_rejected, stored), never a 500 and never a blocked order.
func TestPayRejectedPaymentMethod(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orderID, _ := b.order(t, "o1")
	r := b.pay(t, orderID, "pay-bogus", "pm_card_bogus")
	p := wantProblem(t, r, http.StatusUnprocessableEntity, "payment_rejected")
	if got := b.do(t, "GET", p["instance"].(string), acme, "", "").json(t); got["status"] != "failed" || got["failure_code"] != "invalid_payment_method" {
		t.Fatalf("rejected payment = %v", got)
	}
	if again := b.pay(t, orderID, "pay-bogus", "pm_card_bogus"); again.status != http.StatusUnprocessableEntity || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("rejection not replayed: %d", again.status)
	}
	if ok := b.pay(t, orderID, "pay-good", "pm_card_ok"); ok.status != http.StatusCreated {
		t.Fatalf("a good card after a rejected one = %d %s", ok.status, ok.body)
	}
}

func TestPayOrderAlreadyPaid(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orderID, _ := b.order(t, "o1")
	if r := b.pay(t, orderID, "pay-a", "pm_card_ok"); r.status != http.StatusCreated {
		t.Fatalf("pay: %d %s", r.status, r.body)
	}
	second := b.pay(t, orderID, "pay-b", "pm_card_ok")
	wantProblem(t, second, http.StatusConflict, "order_already_paid")
	if r := b.pay(t, orderID, "pay-b", "pm_card_ok"); r.status != http.StatusConflict || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("order_already_paid is not stored and replayed: %d", r.status)
	}
	if n := b.allCharges(); n != 1 {
		t.Fatalf("provider charges = %d, want 1", n)
	}
}

// Drill 2 for payments: 16 concurrent identical pay requests, one charge.
func TestDrill2_ConcurrentPayRequests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orderID, _ := b.order(t, "o1")
	b.faults(t, pspsim.Faults{LatencyMS: 50}) // keep the first request at the provider a while
	const n = 16
	results := make([]response, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i] = b.pay(t, orderID, "pay-race", "pm_card_ok")
		}()
	}
	close(start)
	wg.Wait()
	var body []byte
	for _, r := range results {
		switch r.status {
		case http.StatusCreated:
			if body == nil {
				body = r.body
			}
			if !bytes.Equal(body, r.body) {
				t.Fatalf("two different payments:\n%s\n%s", body, r.body)
			}
		case http.StatusConflict:
			wantProblem(t, r, http.StatusConflict, "request_in_progress")
			if r.header.Get("Retry-After") == "" {
				t.Fatal("409 without Retry-After")
			}
		default:
			t.Fatalf("unexpected %d %s", r.status, r.body)
		}
	}
	if n := b.allCharges(); n != 1 {
		t.Fatalf("provider charges = %d, want exactly 1", n)
	}
	if n := b.count(t, `SELECT count(*) FROM payments`); n != 1 {
		t.Fatalf("payments = %d, want 1", n)
	}
}

// Drill 1 for payments: the charge is recorded, the response is lost; the
// retry replays it and the provider is not called again.
func TestDrill1_PaymentResponseLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orderID, _ := b.order(t, "o1")
	conn, err := net.Dial("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"payment_method":"pm_card_ok"}`
	req := "POST /v1/orders/" + orderID + "/payments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + acme +
		"\r\nIdempotency-Key: pay-lost\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the lost payment's record to be completed", func() bool {
		return b.count(t, `SELECT count(*) FROM api_idempotency WHERE idempotency_key = 'pay-lost' AND state = 'completed'`) == 1
	})
	conn.Close()
	retry := b.pay(t, orderID, "pay-lost", "pm_card_ok")
	if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry = %d %s, want a replayed 201", retry.status, retry.body)
	}
	if n := b.allCharges(); n != 1 {
		t.Fatalf("provider charges = %d, want 1", n)
	}
}

// crashOnce makes the first provider answer of op "crash" the process before
// phase 2: the hook returns an error exactly where a crash would stop.
func crashOnce(op idempotency.Operation) []app.Option {
	var crashed atomic.Bool
	return []app.Option{app.WithOperationHooks(operation.Hooks{
		AfterCall: func(got idempotency.Operation, _ idempotency.RecoveryPoint) error {
			if got == op && crashed.CompareAndSwap(false, true) {
				return errors.New("injected crash after the provider answered")
			}
			return nil
		},
	})}
}

// inPhase2 runs fn inside phase 2's transaction (the step that records the
// provider's answer) of payments and refunds, before it commits.
func inPhase2(fn func(op idempotency.Operation) error) func(idempotency.Operation, idempotency.RecoveryPoint) error {
	return func(op idempotency.Operation, point idempotency.RecoveryPoint) error {
		if point != payments.PointPaymentCreated && point != payments.PointRefundCreated {
			return nil
		}
		return fn(op)
	}
}

// A phase 2 that fails while the process lives on (its database connection
// dropped, say) gives the claim back at once: the client's immediate retry
// resumes the attempt instead of meeting request_in_progress for the rest of
// the lease. One charge.
func TestFailedPhase2ReleasesTheClaim(t *testing.T) {
	t.Parallel()
	var failed atomic.Bool
	b := setupWith(t, []app.Option{app.WithOperationHooks(operation.Hooks{
		BeforeCommit: inPhase2(func(idempotency.Operation) error {
			if failed.CompareAndSwap(false, true) {
				return errors.New("injected: phase 2 lost its connection")
			}
			return nil
		}),
	})})
	orderID, _ := b.order(t, "o1")
	if r := b.pay(t, orderID, "pay-p2", "pm_card_ok"); r.status < 500 {
		t.Fatalf("failed phase 2 answered %d", r.status)
	}
	retry := b.pay(t, orderID, "pay-p2", "pm_card_ok")
	if retry.status != http.StatusCreated {
		t.Fatalf("immediate retry = %d %s, want 201 (the claim was released)", retry.status, retry.body)
	}
	if n := b.allCharges(); n != 1 {
		t.Fatalf("provider charges = %d, want 1", n)
	}
}

// Drill 7 via the client: the provider charged, the API died before phase 2.
// The client's retry within the lease is told to wait; after the lease it
// resumes the same attempt: one charge, one succeeded payment.
func TestDrill7_CrashAfterProviderCall_ClientRetry(t *testing.T) {
	t.Parallel()
	b := setupWith(t, crashOnce(payments.OpPay))
	orderID, _ := b.order(t, "o1")
	first := b.pay(t, orderID, "pay-crash", "pm_card_ok")
	if first.status < 500 {
		t.Fatalf("crashed request answered %d", first.status)
	}
	if n := b.allCharges(); n != 1 {
		t.Fatalf("provider charges after the crash = %d, want 1", n)
	}
	// The payment is pending, or already succeeded through the provider's
	// webhook; either way the claim is pending with its lease.
	if n := b.count(t, `SELECT count(*) FROM payments WHERE status IN ('pending', 'succeeded')`); n != 1 {
		t.Fatalf("live payments = %d, want 1", n)
	}
	busy := b.pay(t, orderID, "pay-crash", "pm_card_ok")
	wantProblem(t, busy, http.StatusConflict, "request_in_progress")
	b.clock.Advance(31 * time.Second) // past the lease
	retry := b.pay(t, orderID, "pay-crash", "pm_card_ok")
	if retry.status != http.StatusCreated || retry.json(t)["status"] != "succeeded" {
		t.Fatalf("retry after the lease = %d %s", retry.status, retry.body)
	}
	if n := b.allCharges(); n != 1 {
		t.Fatalf("provider charges = %d, want exactly 1", n)
	}
	if n := b.count(t, `SELECT count(*) FROM payments WHERE status = 'succeeded'`); n != 1 {
		t.Fatalf("succeeded payments = %d, want 1", n)
	}
	if n := b.count(t, `SELECT count(*) FROM outbox_events WHERE event_type = 'payment.succeeded'`); n != 1 {
		t.Fatalf("payment.succeeded events = %d, want 1", n)
	}
}

// Drill 7 via the recoverer: nobody retries; the background recoverer
// finishes the abandoned attempt, and a later client retry is a replay.
func TestDrill7_CrashAfterProviderCall_Recoverer(t *testing.T) {
	t.Parallel()
	b := setupWith(t, crashOnce(payments.OpPay))
	orderID, _ := b.order(t, "o1")
	if r := b.pay(t, orderID, "pay-crash", "pm_card_ok"); r.status < 500 {
		t.Fatalf("crashed request answered %d", r.status)
	}
	ctx := context.Background()
	if n, err := b.app.Recoverer().RecoverOnce(ctx, 10); err != nil || n != 0 {
		t.Fatalf("RecoverOnce within the lease = %d, %v; want 0 (the owner may still finish)", n, err)
	}
	b.clock.Advance(31 * time.Second)
	if n, err := b.app.Recoverer().RecoverOnce(ctx, 10); err != nil || n != 1 {
		t.Fatalf("RecoverOnce after the lease = %d, %v; want 1", n, err)
	}
	if n := b.allCharges(); n != 1 {
		t.Fatalf("provider charges = %d, want exactly 1", n)
	}
	if n := b.count(t, `SELECT count(*) FROM payments WHERE status = 'succeeded'`); n != 1 {
		t.Fatalf("succeeded payments = %d, want 1", n)
	}
	if s := b.do(t, "GET", "/v1/orders/"+orderID, acme, "", "").json(t)["status"]; s != "paid" && s != "fulfilled" {
		t.Fatalf("order = %v, want paid (or already fulfilled by the consumer)", s)
	}
	retry := b.pay(t, orderID, "pay-crash", "pm_card_ok")
	if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("client retry after recovery = %d %s, want a replayed 201", retry.status, retry.body)
	}
}

// Unknown outcome: the provider charges and drops the connection. The client
// gets 503 with Retry-After; its retry resumes the same attempt: one charge.
func TestPayUnknownOutcomeResumes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orderID, _ := b.order(t, "o1")
	b.faults(t, pspsim.Faults{DropNext: 1})
	first := b.pay(t, orderID, "pay-drop", "pm_card_ok")
	wantProblem(t, first, http.StatusServiceUnavailable, "payment_provider_unavailable")
	if first.header.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
	if n := b.count(t, `SELECT count(*) FROM api_idempotency WHERE state <> 'pending'`); n != 1 { // only the order's
		t.Fatalf("an unknown outcome was stored as final")
	}
	retry := b.pay(t, orderID, "pay-drop", "pm_card_ok")
	if retry.status != http.StatusCreated {
		t.Fatalf("retry = %d %s", retry.status, retry.body)
	}
	if n := b.allCharges(); n != 1 {
		t.Fatalf("provider charges = %d, want 1", n)
	}
}

// The provider forgets keys after its retention (here 1 second instead of 24
// hours), ours live 45 days. A resumed attempt looks the charge up by
// reference instead of charging again under a key the provider forgot.
func TestPayResumedAfterProviderForgotKey(t *testing.T) {
	t.Parallel()
	b := setupWithPSP(t, func(c *pspsim.Config) { c.KeyRetention = time.Second })
	orderID, _ := b.order(t, "o1")
	b.faults(t, pspsim.Faults{DropNext: 1})
	wantProblem(t, b.pay(t, orderID, "pay-forgotten", "pm_card_ok"), http.StatusServiceUnavailable, "payment_provider_unavailable")
	b.clock.Advance(2 * time.Second) // the provider's key has expired
	retry := b.pay(t, orderID, "pay-forgotten", "pm_card_ok")
	if retry.status != http.StatusCreated {
		t.Fatalf("retry = %d %s", retry.status, retry.body)
	}
	if n := b.allCharges(); n != 1 {
		t.Fatalf("provider charges = %d, want 1: the resumed attempt charged again", n)
	}
}

// Drill 8 for payments: the key's record is gone and the same pay request
// comes again: the original payment, no second charge.
func TestDrill8_PaymentLateRetryAfterRecordExpired(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orderID, _ := b.order(t, "o1")
	first := b.pay(t, orderID, "pay-late", "pm_card_ok")
	if _, err := b.pool.Exec(context.Background(), `DELETE FROM api_idempotency WHERE operation = 'payments.create'`); err != nil {
		t.Fatal(err)
	}
	late := b.pay(t, orderID, "pay-late", "pm_card_ok")
	if late.status != http.StatusCreated || late.json(t)["id"] != first.json(t)["id"] {
		t.Fatalf("late retry = %d %s, want the original payment", late.status, late.body)
	}
	if n := b.allCharges(); n != 1 {
		t.Fatalf("provider charges = %d, want 1", n)
	}
	if n := b.count(t, `SELECT count(*) FROM outbox_events WHERE event_type = 'payment.succeeded'`); n != 1 {
		t.Fatalf("payment.succeeded events = %d, want 1", n)
	}
}

func (b *testBundle) paidOrder(t *testing.T) (paymentID string, amount int64) {
	t.Helper()
	orderID, amount := b.order(t, "o-refund")
	r := b.pay(t, orderID, "pay-refund", "pm_card_ok")
	if r.status != http.StatusCreated {
		t.Fatalf("pay: %d %s", r.status, r.body)
	}
	return r.json(t)["id"].(string), amount
}

func (b *testBundle) refund(t *testing.T, paymentID, key string, amount int64) response {
	t.Helper()
	return b.do(t, "POST", "/v1/payments/"+paymentID+"/refunds", acme, key, `{"amount":`+strconv.FormatInt(amount, 10)+`}`)
}

func TestRefunds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	paymentID, amount := b.paidOrder(t)
	first := b.refund(t, paymentID, "refund-1", 500)
	if first.status != http.StatusCreated || first.json(t)["status"] != "succeeded" {
		t.Fatalf("refund = %d %s", first.status, first.body)
	}
	again := b.refund(t, paymentID, "refund-1", 500)
	if again.status != http.StatusCreated || !bytes.Equal(again.body, first.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("refund replay = %d %s", again.status, again.body)
	}
	wantProblem(t, b.refund(t, paymentID, "refund-1", 600), http.StatusUnprocessableEntity, "idempotency_key_reused")
	over := b.refund(t, paymentID, "refund-over", amount)
	wantProblem(t, over, http.StatusUnprocessableEntity, "refund_exceeds_payment")
	if r := b.refund(t, paymentID, "refund-over", amount); r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("refund_exceeds_payment is not stored and replayed")
	}
	rest := b.refund(t, paymentID, "refund-rest", amount-500)
	if rest.status != http.StatusCreated {
		t.Fatalf("refund of the rest = %d %s", rest.status, rest.body)
	}
	p := b.do(t, "GET", "/v1/payments/"+paymentID, acme, "", "").json(t)
	if int64(p["amount_refunded"].(float64)) != amount {
		t.Fatalf("amount_refunded = %v, want %d", p["amount_refunded"], amount)
	}
	orderID := p["order_id"].(string)
	if s := b.do(t, "GET", "/v1/orders/"+orderID, acme, "", "").json(t)["status"]; s != "refunded" {
		t.Fatalf("order status = %v, want refunded", s)
	}
	if refunds := b.psp.Ledger(paymentID).Refunds; len(refunds) != 2 {
		t.Fatalf("provider refunds = %d, want 2", len(refunds))
	}
	wantProblem(t, b.refund(t, paymentID, "refund-zero", 0), http.StatusUnprocessableEntity, "validation_failed")
	frac := b.do(t, "POST", "/v1/payments/"+paymentID+"/refunds", acme, "refund-frac", `{"amount":1.5}`)
	wantProblem(t, frac, http.StatusUnprocessableEntity, "validation_failed")
	// An amount is read exactly, never through a float64: one that a
	// float64 would round to a whole number is not whole, one past 2^53 is
	// out of range as it is, and 1e2 is the whole number 100 (which meets
	// the payment, refunded in full by now).
	for body, code := range map[string]string{
		`{"amount":1.0000000000000001}`: "validation_failed",
		`{"amount":9007199254740993}`:   "validation_failed",
		`{"amount":1e2}`:                "refund_exceeds_payment",
	} {
		r := b.do(t, "POST", "/v1/payments/"+paymentID+"/refunds", acme, "refund-"+body, body)
		wantProblem(t, r, http.StatusUnprocessableEntity, code)
	}
}

// tenantID returns the id of the tenant with slug.
func (b *testBundle) tenantID(t *testing.T, slug string) string {
	t.Helper()
	var id string
	if err := b.pool.QueryRow(context.Background(), `SELECT id::text FROM tenants WHERE slug = $1`, slug).Scan(&id); err != nil {
		t.Fatalf("tenant %s: %v", slug, err)
	}
	return id
}

// What the provider learns of a payment and a refund is our references and
// the derived provider key, never the client's Idempotency-Key: nothing the
// provider holds (its ledger, with every charge's and refund's key and
// metadata) contains the client's keys (docs/SECURITY.md).
func TestProviderNeverLearnsTheClientsKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const payKey, refundKey = "client-pay-key-7f3a", "client-refund-key-9b1c"
	orderID, _ := b.order(t, "o-provider-learns")
	paid := b.pay(t, orderID, payKey, "pm_card_ok")
	if paid.status != http.StatusCreated {
		t.Fatalf("pay: %d %s", paid.status, paid.body)
	}
	paymentID := paid.json(t)["id"].(string)
	refunded := b.refund(t, paymentID, refundKey, 100)
	if refunded.status != http.StatusCreated {
		t.Fatalf("refund: %d %s", refunded.status, refunded.body)
	}
	refundID := refunded.json(t)["id"].(string)

	l := b.psp.Ledger("")
	if len(l.Charges) != 1 || len(l.Refunds) != 1 {
		t.Fatalf("ledger = %+v, want one charge and one refund", l)
	}
	tenant := b.tenantID(t, "acme")
	if got, want := l.Charges[0].Metadata, map[string]string{"reference": paymentID, "order_id": orderID, "tenant_id": tenant}; !maps.Equal(got, want) {
		t.Errorf("charge metadata = %v, want %v", got, want)
	}
	if got, want := l.Refunds[0].Metadata, map[string]string{"reference": refundID, "payment_id": paymentID, "tenant_id": tenant}; !maps.Equal(got, want) {
		t.Errorf("refund metadata = %v, want %v", got, want)
	}
	all, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{payKey, refundKey} {
		if bytes.Contains(all, []byte(key)) {
			t.Errorf("the provider's ledger holds the client's key %q: %s", key, all)
		}
	}
}

// Concurrent refunds that together exceed the payment: only the allowed ones
// succeed, and the provider agrees with our records.
func TestConcurrentRefundsNeverExceedPayment(t *testing.T) {
	t.Parallel()
	b := setup(t)
	paymentID, amount := b.paidOrder(t)
	part := amount/4 + 1 // four of these exceed the payment; three fit
	const n = 8
	results := make([]response, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i] = b.refund(t, paymentID, "refund-"+strconv.Itoa(i), part)
		}()
	}
	close(start)
	wg.Wait()
	succeeded := 0
	for _, r := range results {
		switch r.status {
		case http.StatusCreated:
			succeeded++
		case http.StatusUnprocessableEntity:
			wantProblem(t, r, http.StatusUnprocessableEntity, "refund_exceeds_payment")
		default:
			t.Fatalf("unexpected %d %s", r.status, r.body)
		}
	}
	if succeeded != 3 {
		t.Fatalf("%d refunds of %d succeeded against %d, want 3", succeeded, part, amount)
	}
	var ours int64
	if err := b.pool.QueryRow(context.Background(), `SELECT coalesce(sum(amount), 0) FROM refunds WHERE status = 'succeeded'`).Scan(&ours); err != nil {
		t.Fatal(err)
	}
	var theirs int64
	for _, r := range b.psp.Ledger(paymentID).Refunds {
		theirs += r.Amount
	}
	if ours != theirs || ours > amount {
		t.Fatalf("refunded: ours %d, provider %d, payment %d", ours, theirs, amount)
	}
}

// Drill 7 for refunds, via the recoverer.
func TestDrill7_RefundCrashAfterProviderCall_Recoverer(t *testing.T) {
	t.Parallel()
	b := setupWith(t, crashOnce(payments.OpRefund))
	paymentID, _ := b.paidOrder(t)
	if r := b.refund(t, paymentID, "refund-crash", 100); r.status < 500 {
		t.Fatalf("crashed refund answered %d", r.status)
	}
	b.clock.Advance(31 * time.Second)
	if n, err := b.app.Recoverer().RecoverOnce(context.Background(), 10); err != nil || n != 1 {
		t.Fatalf("RecoverOnce = %d, %v", n, err)
	}
	if refunds := b.psp.Ledger(paymentID).Refunds; len(refunds) != 1 {
		t.Fatalf("provider refunds = %d, want 1", len(refunds))
	}
	retry := b.refund(t, paymentID, "refund-crash", 100)
	if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry after recovery = %d %s", retry.status, retry.body)
	}
}

// Drill 8 through the sweeper itself: time passes beyond the retention, the
// sweeper deletes the records, and the genuine late retries of an order and
// of its payment cause no second effect.
func TestDrill8_LateRetryAfterSweep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orderID, _ := b.order(t, "o-swept")
	pay := b.pay(t, orderID, "pay-swept", "pm_card_ok")
	if pay.status != http.StatusCreated {
		t.Fatalf("pay: %d %s", pay.status, pay.body)
	}
	b.clock.Advance(45*retention.Day + time.Minute)
	rep, err := b.app.Sweeper().SweepOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Deleted["api_idempotency"] != 2 || b.count(t, `SELECT count(*) FROM api_idempotency`) != 0 {
		t.Fatalf("sweep report %+v; want both records deleted", rep)
	}
	if r := b.do(t, "POST", "/v1/orders", acme, "o-swept", orderBody); r.status != http.StatusCreated || r.json(t)["id"] != orderID || (r.json(t)["status"] != "paid" && r.json(t)["status"] != "fulfilled") {
		t.Fatalf("late order retry = %d %s, want 201 with the original order as it is now (paid or fulfilled)", r.status, r.body)
	}
	late := b.pay(t, orderID, "pay-swept", "pm_card_ok")
	if late.status != http.StatusCreated || late.json(t)["id"] != pay.json(t)["id"] {
		t.Fatalf("late pay retry = %d %s, want the original payment", late.status, late.body)
	}
	if n := b.count(t, `SELECT count(*) FROM orders`); n != 1 {
		t.Fatalf("orders = %d, want 1", n)
	}
	if n := b.allCharges(); n != 1 {
		t.Fatalf("provider charges = %d, want 1", n)
	}
}

// The provider's signed webhook, delivered over HTTP by the embedded
// simulator, completes a payment left pending by an unknown outcome, with no
// client retry; the retry that comes later answers from that state.
func TestWebhookCompletesPendingPayment(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orderID, _ := b.order(t, "o1")
	b.faults(t, pspsim.Faults{DropNext: 1})
	wantProblem(t, b.pay(t, orderID, "pay-webhook", "pm_card_ok"), http.StatusServiceUnavailable, "payment_provider_unavailable")
	testkit.WaitFor(t, 15*time.Second, "the webhook to finish the payment", func() bool {
		return b.count(t, `SELECT count(*) FROM payments WHERE status = 'succeeded'`) == 1
	})
	if s := b.do(t, "GET", "/v1/orders/"+orderID, acme, "", "").json(t)["status"]; s != "paid" && s != "fulfilled" {
		t.Fatalf("order = %v, want paid (or already fulfilled by the consumer)", s)
	}
	retry := b.pay(t, orderID, "pay-webhook", "pm_card_ok")
	if retry.status != http.StatusCreated || retry.json(t)["status"] != "succeeded" {
		t.Fatalf("retry = %d %s", retry.status, retry.body)
	}
	if n := b.allCharges(); n != 1 {
		t.Fatalf("provider charges = %d, want 1", n)
	}
	if n := b.count(t, `SELECT count(*) FROM outbox_events WHERE event_type = 'payment.succeeded'`); n != 1 {
		t.Fatalf("payment.succeeded events = %d, want 1 (webhook and retry must not both emit)", n)
	}
	// Every delivery so far was received once and applied; duplicates of
	// them would change nothing (internal/webhooks tests drill 5).
	if n := b.count(t, `SELECT count(*) FROM webhook_receipts WHERE processed_at IS NULL`); n != 0 {
		t.Fatalf("%d webhook receipts unprocessed", n)
	}
}

// The whole chain in one process: the payment's event goes through the
// outbox, the embedded JetStream and the fulfillment consumer, which takes
// the stock once and marks the order fulfilled; the events list shows it
// published and processed.
func TestPaidOrderIsFulfilledThroughTheBroker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orderID, _ := b.order(t, "o-ship")
	if r := b.pay(t, orderID, "pay-ship", "pm_card_ok"); r.status != http.StatusCreated {
		t.Fatalf("pay: %d %s", r.status, r.body)
	}
	testkit.WaitFor(t, 20*time.Second, "the order to be fulfilled", func() bool {
		return b.do(t, "GET", "/v1/orders/"+orderID, acme, "", "").json(t)["status"] == "fulfilled"
	})
	if n := b.count(t, `SELECT stock FROM products p JOIN tenants t ON t.id = p.tenant_id WHERE t.slug = 'acme' AND sku = 'travel-mug'`); n != 100000-2 {
		t.Fatalf("travel-mug stock = %d, want %d", n, 100000-2)
	}
	testkit.WaitFor(t, 20*time.Second, "every event to be published", func() bool {
		return b.count(t, `SELECT count(*) FROM outbox_events WHERE published_at IS NULL`) == 0
	})
	metrics := string(b.do(t, "GET", "/metrics", "", "", "").body)
	for _, want := range []string{
		`oncepay_consumer_messages_total{result="processed",subscriber="fulfillment"} 1`,
		`oncepay_outbox_pending_events 0`,
		`oncepay_outbox_stuck_events 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Fatalf("/metrics lacks %q", want)
		}
	}
	if !strings.Contains(metrics, `oncepay_outbox_publish_attempts_total{result="published"}`) {
		t.Fatal("/metrics lacks the published count")
	}
	events := b.do(t, "GET", "/v1/events", acme, "", "").json(t)["data"].([]any)
	for _, e := range events {
		ev := e.(map[string]any)
		if ev["type"] == "payment.succeeded" && len(ev["processed_by"].([]any)) != 1 {
			t.Fatalf("payment.succeeded processed_by = %v, want fulfillment once", ev["processed_by"])
		}
	}
}
