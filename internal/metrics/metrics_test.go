package metrics_test

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/metrics"
)

// Each observer method feeds its own series. (WatchOutbox's gauges need a
// database; internal/app's tests read them from the running service.)
func TestObserversFeedTheirSeries(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	m.Idempotency("orders.create", "executed")
	m.HTTP("POST", "/v1/orders", 201, 3*time.Millisecond)
	m.ProviderCall("charge", "unknown")
	m.Webhook("duplicate")
	m.Swept(map[string]int64{"api_idempotency": 3}, 2)
	m.OutboxPublish("published", 5)
	m.OutboxPublish("failed", 2)
	m.OutboxPublish("failed", 1)
	m.Consumed("fulfillment", "duplicate")

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, err := io.ReadAll(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`oncepay_idempotency_outcomes_total{operation="orders.create",outcome="executed"} 1`,
		`oncepay_http_request_duration_seconds_count{method="POST",route="/v1/orders",status="201"} 1`,
		`oncepay_provider_calls_total{call="charge",result="unknown"} 1`,
		`oncepay_webhooks_received_total{result="duplicate"} 1`,
		`oncepay_sweeper_deleted_total{table="api_idempotency"} 3`,
		`oncepay_sweeper_stuck_operations 2`,
		`oncepay_outbox_publish_attempts_total{result="published"} 5`,
		`oncepay_outbox_publish_attempts_total{result="failed"} 3`,
		`oncepay_consumer_messages_total{result="duplicate",subscriber="fulfillment"} 1`,
		`go_goroutines `,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
