package app_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/broker"
	"github.com/oncepay/oncepay/internal/broker/brokertest"
	"github.com/oncepay/oncepay/internal/testkit"
	"github.com/oncepay/oncepay/proving/pspsim"
)

// scrape reads /metrics into series -> value, each series spelt as the
// exposition format writes it: name{label="value",...} with the labels in
// alphabetical order.
func (b *testBundle) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	r := b.do(t, "GET", "/metrics", "", "", "")
	if r.status != http.StatusOK {
		t.Fatalf("/metrics = %d %s", r.status, r.body)
	}
	series := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(r.body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		series[line[:i]] = v
	}
	return series
}

// waitForSeries polls /metrics until series satisfies cond, and fails with
// the last value seen (or its absence) at the deadline. No sleeps: one
// scrape per tick.
func (b *testBundle) waitForSeries(t *testing.T, timeout time.Duration, series string, what string, cond func(float64) bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		v, ok := b.scrape(t)[series]
		if ok && cond(v) {
			return
		}
		if time.Now().After(deadline) {
			if !ok {
				t.Fatalf("/metrics has no %s after %v (want %s)", series, timeout, what)
			}
			t.Fatalf("/metrics %s = %v after %v (want %s)", series, v, timeout, what)
		}
		<-tick.C
	}
}

func atLeast(n float64) func(float64) bool { return func(v float64) bool { return v >= n } }

// A broker outage is visible on /metrics while it lasts: every publish
// attempt that gets no PubAck counts as
// oncepay_outbox_publish_attempts_total{result="failed"}, and the event
// waits in the outbox (pending, lag). When the broker is back the same event
// is published, and the gauges fall back to zero.
func TestMetricsCountFailedPublishAttempts(t *testing.T) {
	t.Parallel()
	nb := brokertest.Start(t, broker.StreamsConfig{}) // before setup: stopped after the app
	b := setup(t, func(c *app.Config) { c.NATSURL = nb.URL() })
	const (
		failed    = `oncepay_outbox_publish_attempts_total{result="failed"}`
		published = `oncepay_outbox_publish_attempts_total{result="published"}`
		pending   = `oncepay_outbox_pending_events`
		lag       = `oncepay_outbox_lag_seconds`
		stuck     = `oncepay_outbox_stuck_events`
	)
	nb.Stop()
	if r := b.do(t, "POST", "/v1/orders", acme, "metrics-outage", orderBody); r.status != http.StatusCreated {
		t.Fatalf("create order while the broker is down: %d %s", r.status, r.body)
	}
	// The dispatcher waits PublishTimeout (10 s) for a PubAck that cannot
	// come, then records the failed attempt.
	b.waitForSeries(t, 30*time.Second, failed, "at least one failed attempt", atLeast(1))
	s := b.scrape(t)
	if s[pending] < 1 || s[lag] <= 0 || s[stuck] != 0 {
		t.Fatalf("during the outage: %s = %v, %s = %v, %s = %v; want the order's event pending, a positive lag, nothing stuck",
			pending, s[pending], lag, s[lag], stuck, s[stuck])
	}
	if s[published] != 0 {
		t.Fatalf("%s = %v during the outage, want 0", published, s[published])
	}

	nb.Restart(t)
	b.waitForSeries(t, 30*time.Second, published, "the event published once the broker is back", atLeast(1))
	b.waitForSeries(t, 10*time.Second, pending, "nothing pending", func(v float64) bool { return v == 0 })
	if s := b.scrape(t); s[lag] != 0 || s[stuck] != 0 {
		t.Fatalf("after the outage: %s = %v, %s = %v; want 0 and 0", lag, s[lag], stuck, s[stuck])
	}
}

// Every series the docs list (docs/OPERATIONS.md, "Every series") appears
// on /metrics once its mechanism ran, with the labels the docs name. A
// metric that a refactor disconnects from its observer fails here.
func TestMetricsCoverEveryMechanism(t *testing.T) {
	t.Parallel()
	b := setup(t, withAdminToken, func(c *app.Config) {
		c.Tuning.NATSDuplicateWindow = time.Second // so an operator replay reaches the consumer
	})
	ctx := context.Background()

	// Idempotency outcomes of orders.create: executed, replayed, mismatch,
	// late_retry (the record is gone, the order's own uniqueness answers).
	orderID, _ := b.order(t, "metrics-order")
	b.do(t, "POST", "/v1/orders", acme, "metrics-order", orderBody)
	wantProblem(t, b.do(t, "POST", "/v1/orders", acme, "metrics-order", `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":9}]}`),
		http.StatusUnprocessableEntity, "idempotency_key_reused")
	if _, err := b.pool.Exec(ctx, `DELETE FROM api_idempotency WHERE idempotency_key = 'metrics-order'`); err != nil {
		t.Fatal(err)
	}
	if r := b.do(t, "POST", "/v1/orders", acme, "metrics-order", orderBody); r.status != http.StatusCreated {
		t.Fatalf("late retry: %d %s", r.status, r.body)
	}

	// in_progress of payments.create: the same key while the first request
	// is at the (slow) provider.
	b.faults(t, pspsim.Faults{LatencyMS: 1500})
	var wg sync.WaitGroup
	var first response
	wg.Go(func() { first = b.pay(t, orderID, "metrics-pay", "pm_card_ok") })
	testkit.WaitFor(t, 10*time.Second, "the first payment to be at the provider", func() bool {
		return b.count(t, `SELECT count(*) FROM payments WHERE status = 'pending'`) == 1
	})
	wantProblem(t, b.pay(t, orderID, "metrics-pay", "pm_card_ok"), http.StatusConflict, "request_in_progress")
	wg.Wait()
	if first.status != http.StatusCreated {
		t.Fatalf("pay: %d %s", first.status, first.body)
	}
	b.faults(t, pspsim.Faults{})

	// Webhooks: the simulator's own charge.succeeded delivery (accepted),
	// a redelivery (duplicate), a forged one (rejected).
	delivery := `{"id":"evt_metrics_1","type":"charge.succeeded","created":1767225600,"data":{"object":{"id":"ch_metrics_1","amount":100,"currency":"EUR","status":"succeeded","failure_code":null,"amount_refunded":0,"metadata":{"reference":"01a22931-c9da-71c4-a494-fc128972f4cb"}}}}`
	b.webhook(t, "msg_metrics_1", delivery, true)
	b.webhook(t, "msg_metrics_1", delivery, true)
	wantProblem(t, b.webhook(t, "msg_metrics_2", delivery, false), http.StatusUnauthorized, "unauthorized")
	// The worker: the delivery above names nothing of ours (not_ours); one
	// for our payment but one cent is a mismatch.
	other := fmt.Sprintf(`{"id":"evt_metrics_3","type":"charge.succeeded","created":1767225600,"data":{"object":{"id":"ch_metrics_3","amount":1,"currency":"EUR","status":"succeeded","failure_code":null,"amount_refunded":0,"metadata":{"tenant_id":%q,"reference":%q}}}}`,
		b.paymentTenant(t, first.json(t)["id"].(string)), first.json(t)["id"])
	b.webhook(t, "msg_metrics_3", other, true)
	b.waitForSeries(t, 20*time.Second, `oncepay_webhooks_processed_total{result="not_ours"}`, "receipts that name nothing of ours", atLeast(1))
	b.waitForSeries(t, 20*time.Second, `oncepay_webhooks_processed_total{result="mismatch"}`, "receipts about other money", atLeast(1))

	// The consumer: payment.succeeded processed; an operator replay after
	// the duplicate window reaches it again and is a duplicate.
	b.waitForSeries(t, 20*time.Second, `oncepay_consumer_messages_total{result="processed",subscriber="fulfillment"}`, "processed messages", atLeast(1))
	var eventID string
	if err := b.pool.QueryRow(ctx, `SELECT id::text FROM outbox_events WHERE event_type = 'payment.succeeded'`).Scan(&eventID); err != nil {
		t.Fatal(err)
	}
	// Published more than the window (1 s) ago: JetStream stores the replay.
	testkit.WaitFor(t, 20*time.Second, "the event to be published more than the duplicate window ago", func() bool {
		return b.count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND published_at < now() - interval '2 seconds'`, eventID) == 1
	})
	// The operator's replay.
	if r := b.do(t, "POST", "/admin/outbox/events/"+eventID+"/replay", openAPIAdminToken, "", ""); r.status != http.StatusOK {
		t.Fatalf("replay: %d %s", r.status, r.body)
	}
	b.waitForSeries(t, 20*time.Second, `oncepay_consumer_messages_total{result="duplicate",subscriber="fulfillment"}`, "the replay counted as a duplicate", atLeast(1))

	// The sweeper, a week and a day later: the orders.create record is gone.
	b.clock.Advance(8 * 24 * time.Hour)
	if _, err := b.app.Sweeper().SweepOnce(ctx); err != nil {
		t.Fatal(err)
	}

	b.waitForSeries(t, 20*time.Second, `oncepay_webhooks_received_total{result="accepted"}`, "accepted deliveries", atLeast(2))
	s := b.scrape(t)
	for _, series := range []string{
		`oncepay_idempotency_outcomes_total{operation="orders.create",outcome="executed"}`,
		`oncepay_idempotency_outcomes_total{operation="orders.create",outcome="replayed"}`,
		`oncepay_idempotency_outcomes_total{operation="orders.create",outcome="mismatch"}`,
		`oncepay_idempotency_outcomes_total{operation="orders.create",outcome="late_retry"}`,
		`oncepay_idempotency_outcomes_total{operation="payments.create",outcome="executed"}`,
		`oncepay_idempotency_outcomes_total{operation="payments.create",outcome="in_progress"}`,
		`oncepay_http_request_duration_seconds_count{method="POST",route="/v1/orders",status="201"}`,
		`oncepay_http_request_duration_seconds_count{method="POST",route="/v1/orders/:id/payments",status="201"}`,
		`oncepay_provider_calls_total{call="charge",result="succeeded"}`,
		`oncepay_webhooks_received_total{result="duplicate"}`,
		`oncepay_webhooks_received_total{result="rejected"}`,
		`oncepay_outbox_publish_attempts_total{result="published"}`,
		`oncepay_consumer_messages_total{result="processed",subscriber="fulfillment"}`,
		`oncepay_consumer_messages_total{result="duplicate",subscriber="fulfillment"}`,
		`oncepay_sweeper_deleted_total{table="api_idempotency"}`,
	} {
		if s[series] < 1 {
			t.Errorf("%s = %v, want at least 1", series, s[series])
		}
	}
	for _, series := range []string{
		`oncepay_outbox_pending_events`,
		`oncepay_outbox_lag_seconds`,
		`oncepay_outbox_stuck_events`,
		`oncepay_sweeper_stuck_operations`,
	} {
		if v, ok := s[series]; !ok || v < 0 {
			t.Errorf("%s = %v (present %t), want a gauge >= 0", series, v, ok)
		}
	}
}

// paymentTenant returns the tenant of a payment, as the charge metadata
// names it.
func (b *testBundle) paymentTenant(t *testing.T, paymentID string) string {
	t.Helper()
	var tenant string
	if err := b.pool.QueryRow(context.Background(), `SELECT tenant_id::text FROM payments WHERE id = $1`, paymentID).Scan(&tenant); err != nil {
		t.Fatal(err)
	}
	return tenant
}
