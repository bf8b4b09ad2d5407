package app_test

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/client"
	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/proving/pspsim"
)

// apiClient returns the public Go client of the running service b, for the
// tenant of apiKey, with short backoffs; Retry-After is still honoured.
func (b *testBundle) apiClient(t *testing.T, apiKey string, opts ...client.Option) *client.Client {
	t.Helper()
	opts = append([]client.Option{
		client.WithHTTPClient(b.client),
		client.WithBackoff(10*time.Millisecond, 100*time.Millisecond),
	}, opts...)
	c, err := client.New(b.baseURL, apiKey, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// clientOrder is orderBody as a typed request.
func clientOrder() client.CreateOrderRequest {
	return client.CreateOrderRequest{Currency: "EUR", Items: []client.LineItem{
		{SKU: "travel-mug", Quantity: 2},
		{SKU: "ceramic-dripper", Quantity: 1},
	}}
}

// The client's whole surface against the real service: every call, replays
// reported in Meta, business failures as codes, and not one retry on the way.
func TestClientEndToEnd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	retries := 0
	c := b.apiClient(t, acme, client.WithOnRetry(func(int, time.Duration, error) { retries++ }))

	products, err := c.ListProducts(ctx)
	if err != nil {
		t.Fatalf("ListProducts: %v", err)
	}
	prices := map[string]int64{}
	for _, p := range products {
		prices[p.SKU] = p.UnitAmount
	}
	if prices["travel-mug"] != 1800 || prices["ceramic-dripper"] != 2200 {
		t.Fatalf("products = %+v", products)
	}

	// Create, read back, replay, and reuse the key for something else.
	order, meta, err := c.CreateOrder(ctx, clientOrder())
	if err != nil {
		t.Fatalf("CreateOrder: %v", err)
	}
	if order.Status != client.OrderAwaitingPayment || order.AmountTotal != 2*1800+2200 || len(order.Items) != 2 {
		t.Fatalf("order = %+v", order)
	}
	if meta.Status != http.StatusCreated || meta.Replayed || meta.Location != "/v1/orders/"+order.ID || meta.Attempts != 1 || meta.RequestID == "" {
		t.Fatalf("meta = %+v", meta)
	}
	if d := time.Until(meta.Expires); d < 6*24*time.Hour || d > 7*24*time.Hour+time.Minute {
		t.Fatalf("meta.Expires in %v, want about 7 days", d)
	}
	got, err := c.GetOrder(ctx, order.ID)
	if err != nil || !reflect.DeepEqual(got, order) {
		t.Fatalf("GetOrder = %+v, %v; want %+v", got, err, order)
	}
	again, replay, err := c.CreateOrder(ctx, clientOrder(), client.WithIdempotencyKey(meta.IdempotencyKey))
	if err != nil || again.ID != order.ID || !replay.Replayed || replay.Status != http.StatusCreated || !replay.Expires.Equal(meta.Expires) {
		t.Fatalf("replay = %+v, %+v, %v", again, replay, err)
	}
	other := client.CreateOrderRequest{Currency: "EUR", Items: []client.LineItem{{SKU: "travel-mug", Quantity: 3}}}
	if _, _, err := c.CreateOrder(ctx, other, client.WithIdempotencyKey(meta.IdempotencyKey)); !client.IsCode(err, client.CodeIdempotencyKeyReused) || client.Retryable(err) {
		t.Fatalf("same key, other order: %v; want idempotency_key_reused", err)
	}
	if n := b.count(t, `SELECT count(*) FROM orders`); n != 1 {
		t.Fatalf("orders = %d, want 1", n)
	}

	// Pay, and replay the payment under its key.
	payKey := client.NewIdempotencyKey()
	pay, pmeta, err := c.Pay(ctx, order.ID, client.PaymentMethodOK, client.WithIdempotencyKey(payKey))
	if err != nil {
		t.Fatalf("Pay: %v", err)
	}
	if pay.Status != client.StatusSucceeded || pay.OrderID != order.ID || pay.Amount != order.AmountTotal || pay.ProviderChargeID == "" || pay.FailureCode != "" {
		t.Fatalf("payment = %+v", pay)
	}
	if pmeta.Replayed || pmeta.IdempotencyKey != payKey || pmeta.Location != "/v1/payments/"+pay.ID || time.Until(pmeta.Expires) < 44*24*time.Hour {
		t.Fatalf("payment meta = %+v", pmeta)
	}
	payAgain, pmeta2, err := c.Pay(ctx, order.ID, client.PaymentMethodOK, client.WithIdempotencyKey(payKey))
	if err != nil || !reflect.DeepEqual(payAgain, pay) || !pmeta2.Replayed {
		t.Fatalf("payment replay = %+v, %+v, %v", payAgain, pmeta2, err)
	}
	if n := b.charges(t, pay.ID); n != 1 {
		t.Fatalf("provider charges = %d, want 1", n)
	}
	if o, err := c.GetOrder(ctx, order.ID); err != nil || (o.Status != client.OrderPaid && o.Status != client.OrderFulfilled) {
		t.Fatalf("order after payment = %+v, %v", o, err)
	}
	_, _, err = c.Pay(ctx, order.ID, client.PaymentMethodOK)
	if !client.IsCode(err, client.CodeOrderAlreadyPaid) || client.Retryable(err) {
		t.Fatalf("second payment with a new key: %v; want order_already_paid", err)
	}

	// A declined card is a definite, stored answer.
	declined, _, err := c.CreateOrder(ctx, clientOrder())
	if err != nil {
		t.Fatal(err)
	}
	_, dmeta, err := c.Pay(ctx, declined.ID, client.PaymentMethodDeclined)
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusPaymentRequired || e.Code != client.CodeCardDeclined || e.Replayed || client.Retryable(err) {
		t.Fatalf("declined: %v (%+v)", err, e)
	}
	_, _, err = c.Pay(ctx, declined.ID, client.PaymentMethodDeclined, client.WithIdempotencyKey(dmeta.IdempotencyKey))
	if !errors.As(err, &e) || e.Code != client.CodeCardDeclined || !e.Replayed {
		t.Fatalf("declined replay: %v (%+v); want the stored card_declined", err, e)
	}

	// Pages, newest first.
	page, err := c.ListOrders(ctx, client.ListOptions{Limit: 1})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != declined.ID || page.NextCursor == "" {
		t.Fatalf("ListOrders page 1 = %+v, %v", page, err)
	}
	page, err = c.ListOrders(ctx, client.ListOptions{Limit: 1, Cursor: page.NextCursor})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != order.ID || page.NextCursor != "" {
		t.Fatalf("ListOrders page 2 = %+v, %v", page, err)
	}

	// Refunds: replayed under their key, bounded by the payment.
	refund, rmeta, err := c.Refund(ctx, pay.ID, 500)
	if err != nil || refund.Status != client.StatusSucceeded || refund.Amount != 500 || refund.PaymentID != pay.ID || refund.ProviderRefundID == "" {
		t.Fatalf("Refund = %+v, %v", refund, err)
	}
	refundAgain, rmeta2, err := c.Refund(ctx, pay.ID, 500, client.WithIdempotencyKey(rmeta.IdempotencyKey))
	if err != nil || refundAgain.ID != refund.ID || !rmeta2.Replayed {
		t.Fatalf("refund replay = %+v, %+v, %v", refundAgain, rmeta2, err)
	}
	if _, _, err := c.Refund(ctx, pay.ID, pay.Amount); !client.IsCode(err, client.CodeRefundExceedsPayment) {
		t.Fatalf("over-refund: %v; want refund_exceeds_payment", err)
	}
	p, err := c.GetPayment(ctx, pay.ID)
	if err != nil || p.AmountRefunded != 500 {
		t.Fatalf("GetPayment = %+v, %v; want 500 refunded", p, err)
	}
	if r, err := c.GetRefund(ctx, refund.ID); err != nil || r.ID != refund.ID || r.Amount != 500 || r.Status != refund.Status {
		t.Fatalf("GetRefund = %+v, %v; want %+v", r, err, refund)
	}
	if _, err := b.apiClient(t, globex).GetRefund(ctx, refund.ID); !client.IsCode(err, client.CodeNotFound) {
		t.Fatalf("another tenant's refund: %v; want not_found", err)
	}
	if o, err := c.GetOrder(ctx, order.ID); err != nil || o.Status != client.OrderPartiallyRefunded {
		t.Fatalf("order after refund = %+v, %v", o, err)
	}

	// The outbox: one event per effect, carrying the key of its request.
	events, err := c.ListEvents(ctx, client.ListOptions{Limit: 100})
	if err != nil {
		t.Fatalf("ListEvents: %v", err)
	}
	types := map[string]int{}
	for _, ev := range events.Data {
		types[ev.Type]++
		if ev.Type == "payment.succeeded" && (ev.AggregateID != pay.ID || ev.IdempotencyKey != payKey) {
			t.Fatalf("payment.succeeded = %+v, want payment %s under key %s", ev, pay.ID, payKey)
		}
	}
	want := map[string]int{"order.created": 2, "payment.succeeded": 1, "payment.failed": 1, "refund.succeeded": 1}
	if !reflect.DeepEqual(types, want) {
		t.Fatalf("events = %v, want %v", types, want)
	}

	// Tenancy and authentication.
	if _, err := b.apiClient(t, globex).GetPayment(ctx, pay.ID); !client.IsCode(err, client.CodeNotFound) {
		t.Fatalf("another tenant's payment: %v; want not_found", err)
	}
	if _, err := b.apiClient(t, "sk_test_nobody").ListProducts(ctx); !client.IsCode(err, client.CodeUnauthorized) {
		t.Fatalf("unknown API key: %v; want unauthorized", err)
	}
	if retries != 0 {
		t.Fatalf("retries = %d, want 0 against a healthy service", retries)
	}
}

// An unknown provider outcome (the provider charged and dropped the
// connection, or failed before charging) reaches the client as 503
// payment_provider_unavailable; the client retries with the same key after
// Retry-After, the retry resumes the same attempt, and the provider has one
// charge.
func TestClientRetriesUnknownProviderOutcome(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		faults pspsim.Faults
	}{
		{"charged then dropped", pspsim.Faults{DropNext: 1}},
		{"failed before charging", pspsim.Faults{FailNext: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			var errs []error
			var waits []time.Duration
			c := b.apiClient(t, acme, client.WithOnRetry(func(_ int, wait time.Duration, err error) {
				errs = append(errs, err)
				waits = append(waits, wait)
			}))
			order, _, err := c.CreateOrder(ctx, clientOrder())
			if err != nil {
				t.Fatal(err)
			}
			b.faults(t, tc.faults)
			pay, meta, err := c.Pay(ctx, order.ID, client.PaymentMethodOK)
			if err != nil {
				t.Fatalf("Pay: %v", err)
			}
			if pay.Status != client.StatusSucceeded || meta.Attempts != 2 || meta.Replayed {
				t.Fatalf("payment = %+v, meta = %+v; want success on the second attempt", pay, meta)
			}
			if len(errs) != 1 || !client.IsCode(errs[0], client.CodePaymentProviderUnavailable) {
				t.Fatalf("retried after %v, want one 503 payment_provider_unavailable", errs)
			}
			var e *client.Error
			if errors.As(errs[0], &e); e.RetryAfter <= 0 || waits[0] < e.RetryAfter {
				t.Fatalf("waited %v for Retry-After %v", waits[0], e.RetryAfter)
			}
			if n := b.allCharges(); n != 1 {
				t.Fatalf("provider charges = %d, want exactly 1", n)
			}
			if n := b.count(t, `SELECT count(*) FROM payments`); n != 1 {
				t.Fatalf("payments = %d, want 1", n)
			}
		})
	}
}

// Drill 2 through the client: concurrent calls of one intent (one key) while
// the first is at the provider. The duplicates get 409 request_in_progress,
// the client waits Retry-After and replays: every caller sees the same
// payment, and the provider charged once. The lease is short here because
// Retry-After of a pending payment is what is left of its lease; the write
// and provider timeouts shrink with it, since the lease must outlast them.
func TestClientConcurrentDuplicatesChargeOnce(t *testing.T) {
	t.Parallel()
	var inProgress atomic.Int32
	// The first call waits before the provider until a duplicate met 409
	// (or 2 s passed): a provider latency alone left the race to the
	// scheduler, and a busy machine started the duplicates too late.
	var held atomic.Bool
	b := setupWith(t, []app.Option{app.WithOperationHooks(operation.Hooks{
		BeforeCall: func(op idempotency.Operation, _ idempotency.RecoveryPoint) error {
			if op == payments.OpPay && held.CompareAndSwap(false, true) {
				for deadline := time.Now().Add(2 * time.Second); inProgress.Load() == 0 && time.Now().Before(deadline); {
					time.Sleep(5 * time.Millisecond) // polling a condition with a deadline
				}
			}
			return nil
		},
	})}, func(c *app.Config) {
		c.IdempotencyLease, c.WriteTimeout, c.PSPTimeout = 3*time.Second, 2500*time.Millisecond, 2*time.Second
	})
	ctx := context.Background()
	c := b.apiClient(t, acme, client.WithOnRetry(func(_ int, _ time.Duration, err error) {
		if client.IsCode(err, client.CodeRequestInProgress) {
			inProgress.Add(1)
		}
	}))
	order, _, err := c.CreateOrder(ctx, clientOrder())
	if err != nil {
		t.Fatal(err)
	}
	key := client.NewIdempotencyKey()
	const n = 8
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			p, _, err := c.Pay(ctx, order.ID, client.PaymentMethodOK, client.WithIdempotencyKey(key))
			if err == nil {
				ids[i] = p.ID
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	if inProgress.Load() == 0 {
		t.Fatal("no call met 409 request_in_progress; the test did not race")
	}
	for i := range n {
		if errs[i] != nil || ids[i] != ids[0] {
			t.Fatalf("call %d: %q, %v; want payment %q", i, ids[i], errs[i], ids[0])
		}
	}
	if n := b.allCharges(); n != 1 {
		t.Fatalf("provider charges = %d, want exactly 1", n)
	}
}
