package app_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/oncepay/oncepay/internal/app"
)

// oddProvider speaks the provider's API like the simulator, with what no
// simulator fault does: its refunds take the status the test sets (as a
// provider that settles refunds later, "pending", or fails them), and its
// charges and refunds can be about other money (skew overrides members of
// every answer). It keeps what it made, so lookups by reference find it.
type oddProvider struct {
	mu           sync.Mutex
	refundStatus string
	chargeSkew   map[string]any
	refundSkew   map[string]any
	charges      map[string]map[string]any // by our reference
	refunds      map[string]map[string]any // by our reference
	// down answers 503 to everything, as a provider in an outage; calls
	// counts the requests it got (answered or not).
	down  bool
	calls int
}

func newOddProvider(t *testing.T) (*oddProvider, string) {
	t.Helper()
	p := &oddProvider{refundStatus: "succeeded", charges: map[string]map[string]any{}, refunds: map[string]map[string]any{}}
	ts := httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(ts.Close)
	return p, ts.URL
}

// set changes the provider's behaviour under its lock.
func (p *oddProvider) set(f func(p *oddProvider)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p)
}

// callCount returns calls under the lock.
func (p *oddProvider) callCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

func (p *oddProvider) serve(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	p.calls++
	if p.down {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	var in map[string]any
	if r.Method == http.MethodPost {
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
	}
	reference := func() string { return in["metadata"].(map[string]any)["reference"].(string) }
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/charges":
		ref := reference()
		p.charges[ref] = with(map[string]any{"id": "ch_1", "amount": in["amount"], "currency": in["currency"],
			"status": "succeeded", "amount_refunded": 0, "metadata": in["metadata"]}, p.chargeSkew)
		_ = json.NewEncoder(w).Encode(p.charges[ref])
	case r.Method == http.MethodGet && r.URL.Path == "/v1/charges":
		data := []any{}
		if c, ok := p.charges[r.URL.Query().Get("reference")]; ok {
			data = append(data, c)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"data": data})
	case r.Method == http.MethodPost && r.URL.Path == "/v1/refunds":
		ref := reference()
		p.refunds[ref] = map[string]any{"id": "re_" + ref, "charge": in["charge"], "amount": in["amount"], "metadata": in["metadata"]}
		_ = json.NewEncoder(w).Encode(p.refund(ref))
	case r.Method == http.MethodGet && r.URL.Path == "/v1/ledger":
		out := []map[string]any{}
		for ref := range p.refunds {
			out = append(out, p.refund(ref))
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"charges": []any{}, "refunds": out})
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

// refund is the refund made for our reference ref as the provider reports
// it now.
func (p *oddProvider) refund(ref string) map[string]any {
	return with(with(map[string]any{"status": p.refundStatus}, p.refunds[ref]), p.refundSkew)
}

// with returns m with the members of over set.
func with(m, over map[string]any) map[string]any {
	out := make(map[string]any, len(m)+len(over))
	for k, v := range m {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

// A refund is succeeded only when the provider says so. One the provider
// has not settled yet ("pending") answers 503 and stays pending with its
// amount reserved; the retry with the same key, once the provider settled
// it, answers 201. One the provider failed answers 409 and gives its
// reserved amount back.
func TestRefundFollowsTheProviderStatus(t *testing.T) {
	t.Parallel()
	provider, url := newOddProvider(t)
	provider.set(func(p *oddProvider) { p.refundStatus = "pending" })
	b := setup(t, func(c *app.Config) { c.PSPURL = url })
	orderID, _ := b.order(t, "o1")
	pay := b.pay(t, orderID, "pay-1", "pm_card_ok")
	if pay.status != http.StatusCreated {
		t.Fatalf("pay = %d %s", pay.status, pay.body)
	}
	paymentID := pay.json(t)["id"].(string)
	reserved := func() int {
		return b.count(t, `SELECT refund_reserved FROM payments WHERE id = $1`, paymentID)
	}

	wantProblem(t, b.refund(t, paymentID, "refund-1", 500), http.StatusServiceUnavailable, "payment_provider_unavailable")
	if got := b.count(t, `SELECT count(*) FROM refunds WHERE status = 'pending'`); got != 1 || reserved() != 500 {
		t.Fatalf("after a pending provider refund: pending refunds %d, reserved %d; want 1, 500", got, reserved())
	}
	provider.set(func(p *oddProvider) { p.refundStatus = "succeeded" })
	r := b.refund(t, paymentID, "refund-1", 500)
	if r.status != http.StatusCreated || r.json(t)["status"] != "succeeded" {
		t.Fatalf("retry once settled = %d %s, want 201 succeeded", r.status, r.body)
	}

	provider.set(func(p *oddProvider) { p.refundStatus = "failed" })
	wantProblem(t, b.refund(t, paymentID, "refund-2", 300), http.StatusConflict, "payment_not_refundable")
	if got := b.count(t, `SELECT count(*) FROM refunds WHERE idempotency_key = 'refund-2' AND status = 'failed' AND failure_code = 'refund_failed'`); got != 1 {
		t.Fatal("refund-2 is not failed with refund_failed")
	}
	if got := reserved(); got != 500 {
		t.Fatalf("reserved = %d, want 500 (refund-1 only: refund-2's amount given back)", got)
	}
}

// A provider whose own charge is for other money than the payment (here an
// amount of 1 for the order's total) never gets the payment marked paid: the
// attempt is held for an operator in phase 2 (409 awaiting_operator), and
// its retry gets the same answer without asking the provider again.
func TestChargeForOtherMoneyIsNeverRecorded(t *testing.T) {
	t.Parallel()
	provider, url := newOddProvider(t)
	provider.set(func(p *oddProvider) { p.chargeSkew = map[string]any{"amount": 1} })
	b := setup(t, func(c *app.Config) { c.PSPURL = url })
	orderID, _ := b.order(t, "o1")
	for range 2 { // the request, then its retry
		wantProblem(t, b.pay(t, orderID, "pay-other-money", "pm_card_ok"), http.StatusConflict, "awaiting_operator")
	}
	if n := provider.callCount(); n != 1 {
		t.Fatalf("provider calls = %d, want 1 (the charge): a held attempt runs nothing", n)
	}
	if n := b.count(t, `SELECT count(*) FROM payments WHERE status = 'pending'`); n != 1 {
		t.Fatalf("pending payments = %d, want 1", n)
	}
	if n := b.count(t, `SELECT count(*) FROM orders WHERE status = 'awaiting_payment'`); n != 1 {
		t.Fatalf("orders awaiting payment = %d, want 1", n)
	}
	if n := b.count(t, `SELECT count(*) FROM outbox_events WHERE event_type LIKE 'payment.%'`); n != 0 {
		t.Fatalf("payment events = %d, want 0", n)
	}
}

// A provider refund for other money (another amount, or another charge) is
// never recorded: the refund stays pending with its amount reserved, and the
// attempt is held for an operator (409 awaiting_operator).
func TestRefundForOtherMoneyIsNeverRecorded(t *testing.T) {
	t.Parallel()
	provider, url := newOddProvider(t)
	b := setup(t, func(c *app.Config) { c.PSPURL = url })
	orderID, _ := b.order(t, "o1")
	pay := b.pay(t, orderID, "pay-1", "pm_card_ok")
	if pay.status != http.StatusCreated {
		t.Fatalf("pay = %d %s", pay.status, pay.body)
	}
	paymentID := pay.json(t)["id"].(string)
	for i, skew := range []map[string]any{{"amount": 501}, {"charge": "ch_other"}} {
		provider.set(func(p *oddProvider) { p.refundSkew = skew })
		wantProblem(t, b.refund(t, paymentID, fmt.Sprintf("refund-%d", i), 500), http.StatusConflict, "awaiting_operator")
	}
	if n := b.count(t, `SELECT count(*) FROM attention_items WHERE reason = 'mismatch' AND operation = 'refunds.create' AND resource_type = 'refund' AND resolved_at IS NULL`); n != 2 {
		t.Fatalf("open mismatch items of refunds = %d, want 2", n)
	}
	if n := b.count(t, `SELECT count(*) FROM refunds WHERE status = 'pending'`); n != 2 {
		t.Fatalf("pending refunds = %d, want 2", n)
	}
	if n := b.count(t, `SELECT amount_refunded FROM payments WHERE id = $1`, paymentID); n != 0 {
		t.Fatalf("amount_refunded = %d, want 0", n)
	}
	if n := b.count(t, `SELECT count(*) FROM outbox_events WHERE event_type = 'refund.succeeded'`); n != 0 {
		t.Fatalf("refund.succeeded events = %d, want 0", n)
	}
}
