package app_test

import (
	"fmt"
	"testing"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/retention"
	"github.com/oncepay/oncepay/internal/webhooks"
)

// A fresh server, before its first request, already exports every series
// it knows in advance at zero: each registered operation with each
// idempotency outcome, each provider call with each of its results, every
// webhook and sweeper and outbox and consumer result. Dashboards and alerts
// work from the start instead of finding nothing.
func TestKnownSeriesStartAtZero(t *testing.T) {
	t.Parallel()
	b := setup(t)
	got := b.scrape(t)
	var want []string
	for _, op := range app.Operations() {
		for _, o := range idempotency.Outcomes() {
			want = append(want, fmt.Sprintf(`oncepay_idempotency_outcomes_total{operation=%q,outcome=%q}`, op.Name, o))
		}
	}
	for call, results := range payments.ProviderCalls() {
		for _, r := range results {
			want = append(want, fmt.Sprintf(`oncepay_provider_calls_total{call=%q,result=%q}`, call, r))
		}
	}
	for _, r := range webhooks.DeliveryResults() {
		want = append(want, fmt.Sprintf(`oncepay_webhooks_received_total{result=%q}`, r))
	}
	for _, r := range webhooks.ProcessResults() {
		want = append(want, fmt.Sprintf(`oncepay_webhooks_processed_total{result=%q}`, r))
	}
	for _, table := range retention.TableNames() {
		want = append(want, fmt.Sprintf(`oncepay_sweeper_deleted_total{table=%q}`, table))
	}
	for _, r := range outbox.AttemptResults() {
		want = append(want, fmt.Sprintf(`oncepay_outbox_publish_attempts_total{result=%q}`, r))
	}
	for _, r := range []string{"processed", "duplicate"} {
		want = append(want, fmt.Sprintf(`oncepay_consumer_messages_total{result=%q,subscriber="fulfillment"}`, r))
	}
	for _, series := range want {
		if v, ok := got[series]; !ok || v != 0 {
			t.Errorf("a fresh server's /metrics: %s = %v (exported: %v), want 0", series, v, ok)
		}
	}
}
