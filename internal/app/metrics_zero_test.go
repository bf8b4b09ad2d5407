package app_test

import (
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
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

// Every metric docs/OPERATIONS.md lists ("Every series") is on a fresh
// server's /metrics once it answered one request, and every oncepay_
// metric there is listed: a metric added, renamed or disconnected from its
// observer without the docs fails here.
func TestEveryDocumentedSeriesIsExported(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "\n### Every series\n")
	if !ok {
		t.Fatal(`docs/OPERATIONS.md has no "### Every series" section`)
	}
	table, _, _ = strings.Cut(table, "\n#")
	documented := map[string]bool{}
	for _, line := range strings.Split(table, "\n") {
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		for _, name := range regexp.MustCompile("`(oncepay_[a-z_]+)`").FindAllStringSubmatch(first, -1) {
			documented[name[1]] = true
		}
	}
	if len(documented) < 15 {
		t.Fatalf("only %d metrics read from the table: the test reads it wrong", len(documented))
	}

	b := setup(t, withAdminToken)
	b.do(t, "GET", "/healthz", "", "", "") // the request histogram has a series once a request was answered
	exported := map[string]bool{}
	for series := range b.scrape(t) {
		name, _, _ := strings.Cut(series, "{")
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && documented[base] {
				name = base
			}
		}
		if strings.HasPrefix(name, "oncepay_") {
			exported[name] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(documented)) {
		if !exported[name] {
			t.Errorf("%s is documented but not on /metrics", name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(exported)) {
		if !documented[name] {
			t.Errorf("%s is on /metrics but not in docs/OPERATIONS.md, \"Every series\"", name)
		}
	}
}
