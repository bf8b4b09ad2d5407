package app_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/testkit"
)

// Past MaxInFlight a request is shed with 503 overloaded and Retry-After
// within AdmissionWait, before anything is done: the client's retry with the
// same key is a first execution, not a replay, and so no effect is lost or
// doubled. Probes and /metrics answer all the while, and /metrics shows the
// shed request and the one in flight.
func TestOverloadShedsAndNothingIsDone(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{})
	release := make(chan struct{})
	b := setupWith(t, []app.Option{app.WithOperationHooks(operation.Hooks{
		BeforeCall: func(op idempotency.Operation, _ idempotency.RecoveryPoint) error {
			if op == payments.OpPay {
				close(entered)
				<-release
			}
			return nil
		},
	})}, func(c *app.Config) {
		c.Tuning.MaxInFlight = 1
		c.Tuning.AdmissionWait = 20 * time.Millisecond
	})
	orderID, _ := b.order(t, "o-overload")

	// One payment holds the only slot, stopped before its provider call.
	paid := make(chan int, 1)
	go func() {
		req, err := http.NewRequest(http.MethodPost, b.baseURL+"/v1/orders/"+orderID+"/payments", strings.NewReader(`{"payment_method":"pm_card_ok"}`))
		if err != nil {
			t.Error(err)
			paid <- 0
			return
		}
		req.Header.Set("Authorization", "Bearer "+acme)
		req.Header.Set("Idempotency-Key", "pay-overload")
		req.Header.Set("Content-Type", "application/json")
		res, err := b.client.Do(req)
		if err != nil {
			t.Error(err)
			paid <- 0
			return
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		paid <- res.StatusCode
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the payment never reached its provider call")
	}

	t0 := time.Now()
	shed := b.do(t, "POST", "/v1/orders", acme, "o-shed", orderBody)
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("shed after %s: the answer must come within about AdmissionWait", d)
	}
	if shed.status != http.StatusServiceUnavailable || shed.json(t)["code"] != "overloaded" {
		t.Fatalf("order past capacity = %d %s, want 503 overloaded", shed.status, shed.body)
	}
	if ra := shed.header.Get("Retry-After"); ra != "1" {
		t.Errorf("Retry-After = %q, want 1", ra)
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if r := b.do(t, "GET", path, "", "", ""); r.status != http.StatusOK {
			t.Errorf("%s at capacity = %d %s, want 200", path, r.status, r.body)
		}
	}
	series := b.scrape(t)
	if v := series["oncepay_http_shed_total"]; v != 1 {
		t.Errorf("oncepay_http_shed_total = %v, want 1", v)
	}
	if v := series[`oncepay_http_requests_in_flight{pool="api"}`]; v != 1 {
		t.Errorf("oncepay_http_requests_in_flight = %v, want 1 (the held payment)", v)
	}
	if v := series[`oncepay_http_requests_in_flight_limit{pool="api"}`]; v != 1 {
		t.Errorf("oncepay_http_requests_in_flight_limit = %v, want 1", v)
	}

	close(release)
	if code := <-paid; code != http.StatusCreated {
		t.Fatalf("the held payment = %d, want 201", code)
	}
	// The client has the payment's answer a moment before the server gives
	// its slot back: a retry sent at once could meet the limit still taken.
	testkit.WaitFor(t, 5*time.Second, "the held payment's slot to be free", func() bool {
		return b.scrape(t)[`oncepay_http_requests_in_flight{pool="api"}`] == 0
	})
	retry := b.do(t, "POST", "/v1/orders", acme, "o-shed", orderBody)
	if retry.status != http.StatusCreated || retry.header.Get(idempotency.HeaderReplayed) == "true" {
		t.Fatalf("retry of the shed order = %d replayed=%q %s, want a first execution: the shed request did nothing",
			retry.status, retry.header.Get(idempotency.HeaderReplayed), retry.body)
	}
	if n := b.allCharges(); n != 1 {
		t.Errorf("provider charges = %d, want 1", n)
	}
	testkit.WaitFor(t, 5*time.Second, "no request in flight", func() bool {
		return b.scrape(t)[`oncepay_http_requests_in_flight{pool="api"}`] == 0
	})
}
