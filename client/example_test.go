package client_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/oncepay/oncepay/client"
)

// Example creates an order and pays it. The first payment attempt meets an
// unknown provider outcome (503); the client retries it with the same key,
// so the order is charged once. Paying again with the key replays the stored
// answer, and a declined card is a definite error.
func Example() {
	srv := fakeService() // stands in for `make run`, so the example runs anywhere
	defer srv.Close()

	c, err := client.New(srv.URL, "sk_test_acme",
		client.WithOnRetry(func(attempt int, _ time.Duration, err error) {
			fmt.Println("retrying after attempt", attempt, "failed:", err)
		}))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	order, _, err := c.CreateOrder(ctx, client.CreateOrderRequest{
		Currency: "EUR",
		Items:    []client.LineItem{{SKU: "travel-mug", Quantity: 2}},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("order:", order.Status, order.AmountTotal, order.Currency)

	// Keep the key with the intent (e.g. in your database) to resume the
	// payment after a crash of your own process.
	key := client.NewIdempotencyKey()
	pay, meta, err := c.Pay(ctx, order.ID, client.PaymentMethodOK, client.WithIdempotencyKey(key))
	if err != nil {
		panic(err)
	}
	fmt.Println("payment:", pay.Status, "attempts:", meta.Attempts, "replayed:", meta.Replayed)

	again, meta, err := c.Pay(ctx, order.ID, client.PaymentMethodOK, client.WithIdempotencyKey(key))
	if err != nil {
		panic(err)
	}
	fmt.Println("same key again:", again.ID == pay.ID, "replayed:", meta.Replayed)

	_, _, err = c.Pay(ctx, order.ID, client.PaymentMethodDeclined)
	fmt.Println("declined:", client.IsCode(err, client.CodeCardDeclined), "retryable:", client.Retryable(err))
	// Output:
	// order: awaiting_payment 3600 EUR
	// retrying after attempt 1 failed: oncepay: 503 payment_provider_unavailable: The payment provider did not answer.
	// payment: succeeded attempts: 2 replayed: false
	// same key again: true replayed: true
	// declined: true retryable: false
}

// fakeService is a few lines of the real API's behaviour, just enough for
// the example: stored answers per key, one unknown provider outcome, and
// declines. Tests of the client against the real service are in
// internal/app/client_test.go.
func fakeService() *httptest.Server {
	type answer struct {
		status int
		body   string
	}
	var (
		mu          sync.Mutex
		stored      = map[string]answer{} // by Idempotency-Key
		unavailable = true
	)
	const orderID = "0197a3c2-0000-7000-8000-000000000001"
	write := func(w http.ResponseWriter, a answer) {
		ctype := "application/json"
		if a.status >= 400 {
			ctype = "application/problem+json"
		}
		w.Header().Set("Content-Type", ctype)
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, a.body)
	}
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		key := r.Header.Get("Idempotency-Key")
		body, _ := io.ReadAll(r.Body)
		if a, ok := stored[key]; ok {
			w.Header().Set("Idempotent-Replayed", "true")
			write(w, a)
			return
		}
		var a answer
		switch {
		case r.URL.Path == "/v1/orders":
			a = answer{201, `{"id":"` + orderID + `","status":"awaiting_payment","currency":"EUR","amount_total":3600,"items":[{"sku":"travel-mug","name":"Travel mug","quantity":2,"unit_amount":1800,"amount":3600}],"created_at":"2026-01-02T03:04:05Z"}`}
		case strings.Contains(string(body), client.PaymentMethodDeclined):
			a = answer{402, `{"type":"urn:oncepay:problem:card_declined","title":"Payment Required","status":402,"detail":"The card was declined.","code":"card_declined"}`}
		case unavailable: // an unknown outcome is not stored: the key stays open
			unavailable = false
			write(w, answer{503, `{"type":"urn:oncepay:problem:payment_provider_unavailable","title":"Service Unavailable","status":503,"detail":"The payment provider did not answer.","code":"payment_provider_unavailable"}`})
			return
		default:
			a = answer{201, `{"id":"0197a3c2-0000-7000-8000-000000000002","order_id":"` + orderID + `","status":"succeeded","amount":3600,"currency":"EUR","payment_method":"pm_card_ok","provider_charge_id":"ch_1","failure_code":null,"amount_refunded":0,"created_at":"2026-01-02T03:04:06Z"}`}
		}
		stored[key] = a
		write(w, a)
	}))
}
