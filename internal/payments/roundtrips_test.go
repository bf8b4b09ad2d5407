package payments_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/testkit"
	"github.com/oncepay/oncepay/proving/pspsim"
)

// TestPaymentRoundTrips counts what payments.create and refunds.create
// cost PostgreSQL in round trips, on the wire between the service's pool
// and the server: a fresh key is the replay lookup and then each phase's
// transaction statement by statement (16 for a payment, 19 for a refund),
// a replay 1 (the lookup). Pipelining the phases, as the create is, saved
// 11 and 14 of them and did not show next to the provider call
// (docs/BENCHMARKS.md, "Payments: pipelined or not"). A change that adds a
// statement fails here.
func TestPaymentRoundTrips(t *testing.T) {
	t.Parallel()
	b := setup(t)
	logger := testkit.Logger(t)
	// The payments service's pool goes through the counter, one connection:
	// every round trip of a payment is on it. The orders for it are created
	// on the bundle's own pool, not counted.
	counted, counter := testkit.CountedPool(t, b.pool)
	policy := operation.PolicyOf(orders.Specs(), payments.Specs())
	store := idempotency.NewStore(policy, b.clock.Now, idempotency.WithLease(lease))
	svc := payments.NewService(counted, operation.NewRunner(counted, store, logger), b.orders,
		payments.NewProvider(b.simURL, payments.WithAPIKey("sk_sim_test")), logger, b.clock.Now)

	// roundTrips runs one request and returns the round trips it took.
	roundTrips := func(what string, run func() (idempotency.Response, error)) int64 {
		t.Helper()
		before := counter.RoundTrips()
		resp, err := run()
		if err != nil || resp.Status != http.StatusCreated {
			t.Fatalf("%s: %d %s, %v", what, resp.Status, resp.Body, err)
		}
		return counter.RoundTrips() - before
	}
	pay := func(key string) func() (idempotency.Response, error) {
		orderID := b.order(t, "order-"+key)
		body := fmt.Sprintf(`{"payment_method":%q}`, pspsim.PaymentMethodOK)
		req := b.request(t, payments.OpPay, key, []string{orderID.String()}, body)
		return func() (idempotency.Response, error) {
			return svc.Pay(t.Context(), req, orderID, pspsim.PaymentMethodOK)
		}
	}
	warm := pay("pay-warm-up")
	resp, err := warm()
	if err != nil || resp.Status != http.StatusCreated {
		t.Fatalf("pay: %d %s, %v", resp.Status, resp.Body, err)
	}
	paymentID := idOf(t, resp)
	refund := func(key string) func() (idempotency.Response, error) {
		body := `{"amount":100}`
		req := b.request(t, payments.OpRefund, key, []string{paymentID.String()}, body)
		return func() (idempotency.Response, error) { return svc.Refund(t.Context(), req, paymentID, 100) }
	}
	// The connection's first run of a statement prepares it (pgx's
	// statement cache): a round trip more, once per connection.
	roundTrips("refund", refund("refund-warm-up"))

	// The least of three: the pool pings a connection idle for more than a
	// second before handing it out, a round trip that is not the request's.
	least := func(runs ...func() (idempotency.Response, error)) int64 {
		n := int64(1 << 30)
		for _, run := range runs {
			n = min(n, roundTrips("request", run))
		}
		return n
	}
	pay1, pay2, pay3 := pay("pay-1"), pay("pay-2"), pay("pay-3")
	if n := least(pay1, pay2, pay3); n != 16 {
		t.Errorf("a payment with a fresh key took %d round trips to PostgreSQL, want 16 (lookup; BEGIN, claim, payment by key, "+
			"order locked, live payment, payment, point, COMMIT; BEGIN, relock, charge, order, event, answer, COMMIT)", n)
	}
	if n := least(pay1, pay1, pay1); n != 1 {
		t.Errorf("a payment's replay took %d round trips to PostgreSQL, want 1 (the lookup)", n)
	}
	ref1, ref2, ref3 := refund("refund-1"), refund("refund-2"), refund("refund-3")
	if n := least(ref1, ref2, ref3); n != 19 {
		t.Errorf("a refund with a fresh key took %d round trips to PostgreSQL, want 19 (lookup; BEGIN, claim, refund by key, "+
			"payment locked, reservation, refund, point, COMMIT; BEGIN, relock, refund, payment, refund moved, amounts, order, event, answer, COMMIT)", n)
	}
	if n := least(ref1, ref1, ref1); n != 1 {
		t.Errorf("a refund's replay took %d round trips to PostgreSQL, want 1 (the lookup)", n)
	}
}
