package metrics_test

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/metrics"
)

// Each observer method feeds its own series.
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
	m.AdminAuthFailure("rate_limited")

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
		`oncepay_admin_auth_failures_total{result="rate_limited"} 1`,
		`go_goroutines `,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// The outbox's gauges are read from the outbox's stats once per scrape, so
// the three agree; when the stats cannot be read, every one of them is -1,
// never a plausible 0. (internal/app's tests read them from a running
// service's database.)
func TestWatchOutboxReadsTheStatsOncePerScrape(t *testing.T) {
	t.Parallel()
	var (
		calls int
		fail  error
	)
	m := metrics.New()
	m.WatchOutbox(func(ctx context.Context) (int64, time.Duration, int64, error) {
		calls++
		if _, ok := ctx.Deadline(); !ok {
			t.Error("stats called without a deadline")
		}
		return 3, 1500 * time.Millisecond, 1, fail
	})
	scrape := func() string {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return rec.Body.String()
	}
	wantSeries := func(body string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(body, "\n"+w+"\n") {
				t.Errorf("/metrics lacks %q", w)
			}
		}
	}
	wantSeries(scrape(), "oncepay_outbox_pending_events 3", "oncepay_outbox_lag_seconds 1.5", "oncepay_outbox_stuck_events 1")
	if calls != 1 {
		t.Fatalf("one scrape read the stats %d times, want 1", calls)
	}
	fail = errors.New("database away")
	wantSeries(scrape(), "oncepay_outbox_pending_events -1", "oncepay_outbox_lag_seconds -1", "oncepay_outbox_stuck_events -1")
}
