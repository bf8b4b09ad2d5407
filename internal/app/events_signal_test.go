package app_test

import (
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/testkit"
	"github.com/oncepay/oncepay/proving/pspsim"
)

// The outbox has no NOTIFY trigger (it serialized commits): every service
// that appends events wakes its process's dispatcher after the commit. With
// polling practically off, each event below is published only if the
// service that committed it said so.
func TestServicesWakeTheDispatcherAfterCommit(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *app.Config) {
		c.Tuning.OutboxPollInterval = time.Hour
		c.PSPTimeout = 500 * time.Millisecond // for the unknown outcome below
	})
	published := func(eventType, aggregate string) func() bool {
		return func() bool {
			return b.count(t, `SELECT count(*) FROM outbox_events WHERE event_type = $1 AND aggregate_id = $2 AND published_at IS NOT NULL`,
				eventType, aggregate) == 1
		}
	}

	orderID, _ := b.order(t, "signal-order")
	testkit.WaitFor(t, 10*time.Second, "the order.created event to be published", published("order.created", orderID))

	paid := b.pay(t, orderID, "signal-pay", "pm_card_ok")
	if paid.status != 201 {
		t.Fatalf("pay = %d %s", paid.status, paid.body)
	}
	paymentID := paid.json(t)["id"].(string)
	testkit.WaitFor(t, 10*time.Second, "the payment.succeeded event to be published", published("payment.succeeded", paymentID))

	refunded := b.refund(t, paymentID, "signal-refund", 100)
	if refunded.status != 201 {
		t.Fatalf("refund = %d %s", refunded.status, refunded.body)
	}
	testkit.WaitFor(t, 10*time.Second, "the refund.succeeded event to be published", published("refund.succeeded", refunded.json(t)["id"].(string)))

	// The webhook worker: the provider charges and never answers, so the
	// payment stays pending (503, no retry here, the recoverer is off) until
	// the provider's webhook finishes it.
	pending, _ := b.order(t, "signal-order-webhook")
	b.faults(t, pspsim.Faults{TimeoutNext: 1})
	unknown := b.pay(t, pending, "signal-pay-webhook", "pm_card_ok")
	if unknown.status != 503 {
		t.Fatalf("pay with the provider hanging = %d %s, want 503", unknown.status, unknown.body)
	}
	testkit.WaitFor(t, 10*time.Second, "the webhook-completed payment's event to be published", func() bool {
		return b.count(t, `SELECT count(*) FROM outbox_events e JOIN payments p ON p.tenant_id = e.tenant_id AND p.id = e.aggregate_id
			WHERE p.order_id = $1 AND e.event_type = 'payment.succeeded' AND e.published_at IS NOT NULL`, pending) == 1
	})
}
