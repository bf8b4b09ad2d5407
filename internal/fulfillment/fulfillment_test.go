package fulfillment_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/broker"
	"github.com/oncepay/oncepay/internal/fulfillment"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/testkit"
)

func TestFulfillsAPaidOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, broker.StreamsConfig{})
	b.runConsumer(t)
	b.runDispatcher(t)
	order, event := b.paidOrder(t, line{skuMug, 3}, line{skuKettle, 1})
	testkit.WaitFor(t, 20*time.Second, "the order to be fulfilled", func() bool { return len(b.rec.get(event)) == 1 })
	if got := b.rec.get(event); !outcomesEqual(got, fulfillment.Fulfilled) {
		t.Fatalf("outcomes = %v, want [fulfilled]", got)
	}
	if got, want := b.stock(t, skuMug), mugStock-3; got != want {
		t.Fatalf("mug stock = %d, want %d", got, want)
	}
	if got := b.stock(t, skuKettle); got != 999 {
		t.Fatalf("kettle stock = %d, want 999", got)
	}
	if got := b.status(t, order); got != "fulfilled" {
		t.Fatalf("order status = %q, want fulfilled", got)
	}
	if n := b.notifications(t, order, fulfillment.KindReceipt); n != 1 {
		t.Fatalf("%d receipts, want 1", n)
	}
	var body struct {
		OrderID uuid.UUID `json:"order_id"`
		Items   []struct {
			SKU      string `json:"sku"`
			Quantity int    `json:"quantity"`
		} `json:"items"`
	}
	var raw []byte
	if err := b.pool.QueryRow(context.Background(), `SELECT body FROM notifications WHERE order_id = $1`, order).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &body); err != nil || body.OrderID != order || len(body.Items) != 2 {
		t.Fatalf("receipt = %s (%v)", raw, err)
	}
	if n := b.count(t, `SELECT count(*) FROM processed_messages WHERE subscriber = 'fulfillment' AND message_id = $1`, event.String()); n != 1 {
		t.Fatalf("%d inbox rows, want 1", n)
	}
}

// Drill 4: the consumer commits its work and dies before the ack. JetStream
// delivers the message again after the ack wait; the inbox recognises it,
// and the effect stays single: stock taken once, one receipt. The commit
// observer (metrics) sees both commits, the one whose ack was lost too.
func TestDrill4ConsumerCommitsAndDiesBeforeAck(t *testing.T) {
	t.Parallel()
	b := setup(t, broker.StreamsConfig{})
	b.rec.dropAcks = 1
	observed := &recorder{outcomes: make(map[string][]fulfillment.Outcome)}
	b.runConsumer(t, fulfillment.WithAckWait(time.Second),
		fulfillment.WithCommitObserver(func(id string, o fulfillment.Outcome) { _ = observed.afterCommit(id, o) }))
	b.runDispatcher(t)
	order, event := b.paidOrder(t, line{skuMug, 2})

	testkit.WaitFor(t, 20*time.Second, "the redelivery after the lost ack", func() bool { return len(b.rec.get(event)) >= 2 })
	b.settled(t)
	if got := b.rec.get(event); !outcomesEqual(got, fulfillment.Fulfilled, fulfillment.Duplicate) {
		t.Fatalf("outcomes = %v, want [fulfilled duplicate]", got)
	}
	if got := observed.get(event); !outcomesEqual(got, fulfillment.Fulfilled, fulfillment.Duplicate) {
		t.Fatalf("observed outcomes = %v, want [fulfilled duplicate]", got)
	}
	if got, want := b.stock(t, skuMug), mugStock-2; got != want {
		t.Fatalf("mug stock = %d, want %d (taken once)", got, want)
	}
	if n := b.notifications(t, order, fulfillment.KindReceipt); n != 1 {
		t.Fatalf("%d receipts, want 1", n)
	}
	if got := b.status(t, order); got != "fulfilled" {
		t.Fatalf("order status = %q, want fulfilled", got)
	}
}

// Drill 6, first half: the dispatcher publishes an event and dies before it
// marks it published, so the event is published again. Inside the duplicate
// window JetStream acknowledges the second publish as a duplicate and does
// not deliver it: one delivery, one effect.
func TestDrill6SameEventPublishedTwice(t *testing.T) {
	t.Parallel()
	b := setup(t, broker.StreamsConfig{})
	b.runConsumer(t)
	var (
		mu      sync.Mutex
		crashed bool
	)
	d := b.dispatcher(t, outbox.WithHooks(outbox.DispatcherHooks{AfterPublish: func([]uuid.UUID) error {
		mu.Lock()
		defer mu.Unlock()
		if !crashed {
			crashed = true
			return errors.New("crash before marking published")
		}
		return nil
	}}))
	order, event := b.paidOrder(t, line{skuMug, 1})
	ctx := context.Background()
	if _, err := d.DispatchOnce(ctx); err == nil {
		t.Fatal("the crash hook did not stop the round")
	}
	b.clock.Advance(time.Minute) // the crashed dispatcher's lease runs out
	if res, err := d.DispatchOnce(ctx); err != nil || res.Published != 1 {
		t.Fatalf("second publish: %+v, %v", res, err)
	}
	b.settled(t)
	if got := b.rec.get(event); !outcomesEqual(got, fulfillment.Fulfilled) {
		t.Fatalf("outcomes = %v, want [fulfilled]: the broker stored the event once", got)
	}
	if got, want := b.stock(t, skuMug), mugStock-1; got != want {
		t.Fatalf("mug stock = %d, want %d", got, want)
	}
	if n := b.notifications(t, order, fulfillment.KindReceipt); n != 1 {
		t.Fatalf("%d receipts, want 1", n)
	}
}

// Drill 6, second half: the same event is published again after JetStream's
// duplicate window has passed. The broker stores and delivers it as a new
// message; the inbox is what keeps the effect single (rule 8).
//
// The window is 1s here. Its expiry is time-based, so the test has to let
// time pass; it does so by polling: it publishes the event again every
// 10ms until JetStream stops calling it a duplicate (bounded at 20s;
// JetStream purges its duplicate table lazily, so expect 1-2s).
func TestDrill6SameEventPublishedAfterTheDuplicateWindow(t *testing.T) {
	t.Parallel()
	b := setup(t, broker.StreamsConfig{DuplicateWindow: time.Second})
	b.runConsumer(t)
	b.runDispatcher(t)
	order, event := b.paidOrder(t, line{skuMug, 4})
	testkit.WaitFor(t, 20*time.Second, "the first delivery", func() bool { return len(b.rec.get(event)) == 1 })

	admin := outbox.NewAdmin(b.pool, b.nats.JS, b.logger)
	ctx := context.Background()
	duplicates := 0
	testkit.WaitFor(t, 20*time.Second, "the duplicate window to pass", func() bool {
		res, err := admin.Replay(ctx, event)
		if err != nil {
			t.Fatalf("publish again: %v", err)
		}
		if res.Duplicate {
			duplicates++
		}
		return !res.Duplicate
	})
	t.Logf("JetStream dropped %d publishes inside the window before storing the event again", duplicates)
	testkit.WaitFor(t, 20*time.Second, "the second delivery", func() bool { return len(b.rec.get(event)) == 2 })
	b.settled(t)
	if got := b.rec.get(event); !outcomesEqual(got, fulfillment.Fulfilled, fulfillment.Duplicate) {
		t.Fatalf("outcomes = %v, want [fulfilled duplicate]", got)
	}
	if got, want := b.stock(t, skuMug), mugStock-4; got != want {
		t.Fatalf("mug stock = %d, want %d", got, want)
	}
	if n := b.notifications(t, order, fulfillment.KindReceipt); n != 1 {
		t.Fatalf("%d receipts, want 1", n)
	}
}

// An operator replays a refund event through the admin endpoint: the
// broker delivers it again (outside the window) and the consumer ignores it.
// GET-side, the event shows fulfillment as its one processor.
func TestOperatorReplayIsIgnoredByTheConsumer(t *testing.T) {
	t.Parallel()
	b := setup(t, broker.StreamsConfig{DuplicateWindow: time.Second})
	b.runConsumer(t)
	b.runDispatcher(t)
	order, paid := b.paidOrder(t, line{skuKettle, 1})
	refund := b.refundEvent(t, order, 400, 400, 1000)
	testkit.WaitFor(t, 20*time.Second, "both events to be processed", func() bool {
		return len(b.rec.get(paid)) == 1 && len(b.rec.get(refund)) == 1
	})
	if got := b.rec.get(refund); !outcomesEqual(got, fulfillment.RefundNoted) {
		t.Fatalf("refund outcomes = %v, want [refund_noted]", got)
	}

	e := echo.New()
	admin := outbox.NewAdminHandler(outbox.NewAdmin(b.pool, b.nats.JS, b.logger))
	e.POST("/admin/outbox/events/:id/replay", admin.Replay)
	replay := func() (duplicate bool) {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/admin/outbox/events/"+refund.String()+"/replay", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("replay = %d %s", rec.Code, rec.Body)
		}
		var body struct {
			Event struct {
				ID string `json:"id"`
			} `json:"event"`
			Duplicate bool `json:"duplicate"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Event.ID != refund.String() {
			t.Fatalf("replay body = %s (%v)", rec.Body, err)
		}
		return body.Duplicate
	}
	// Inside the window JetStream drops the replay; poll until it stores it.
	testkit.WaitFor(t, 20*time.Second, "a replay outside the duplicate window", func() bool { return !replay() })
	testkit.WaitFor(t, 20*time.Second, "the replay's delivery", func() bool { return len(b.rec.get(refund)) == 2 })
	b.settled(t)
	if got := b.rec.get(refund); !outcomesEqual(got, fulfillment.RefundNoted, fulfillment.Duplicate) {
		t.Fatalf("refund outcomes = %v, want [refund_noted duplicate]", got)
	}
	if n := b.notifications(t, order, fulfillment.KindRefund); n != 1 {
		t.Fatalf("%d refund notices, want 1", n)
	}
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/admin/outbox/events/"+uuid.NewString()+"/replay", nil))
	if rec.Code == http.StatusOK {
		t.Fatalf("replay of an unknown event = %d, want an error", rec.Code)
	}
}

// Stock never goes negative: twenty concurrent orders of one mug each meet
// ten mugs. Ten are fulfilled, ten are backordered with nothing taken.
func TestStockNeverGoesNegative(t *testing.T) {
	t.Parallel()
	b := setup(t, broker.StreamsConfig{})
	b.runConsumer(t, fulfillment.WithWorkers(8))
	b.runDispatcher(t)
	big, bigEvent := b.paidOrder(t, line{skuMug, mugStock + 1}, line{skuKettle, 1})
	testkit.WaitFor(t, 20*time.Second, "the oversized order", func() bool { return len(b.rec.get(bigEvent)) == 1 })
	if got := b.rec.get(bigEvent); !outcomesEqual(got, fulfillment.Backordered) {
		t.Fatalf("oversized order: %v, want [backordered]", got)
	}
	if b.stock(t, skuMug) != mugStock || b.stock(t, skuKettle) != 1000 || b.status(t, big) != "paid" || b.notifications(t, big, fulfillment.KindBackorder) != 1 {
		t.Fatal("a backordered order took stock, changed status, or has no single backorder notice")
	}

	var orders []uuid.UUID
	for range 2 * mugStock {
		o, _ := b.paidOrder(t, line{skuMug, 1})
		orders = append(orders, o)
	}
	testkit.WaitFor(t, 30*time.Second, "every order to be handled", func() bool { return b.rec.total() == 1+2*mugStock })
	fulfilled, backordered := 0, 0
	for _, o := range orders {
		switch b.status(t, o) {
		case "fulfilled":
			fulfilled++
			if b.notifications(t, o, fulfillment.KindReceipt) != 1 {
				t.Fatalf("fulfilled order %s has no single receipt", o)
			}
		case "paid":
			backordered++
			if b.notifications(t, o, fulfillment.KindBackorder) != 1 {
				t.Fatalf("backordered order %s has no single backorder notice", o)
			}
		}
	}
	if fulfilled != mugStock || backordered != mugStock || b.stock(t, skuMug) != 0 {
		t.Fatalf("fulfilled %d, backordered %d, stock %d; want %d, %d, 0", fulfilled, backordered, b.stock(t, skuMug), mugStock, mugStock)
	}
}

// A line whose product left the catalog cannot ship: the order is
// backordered and nothing is taken from the lines that could.
func TestOrderWithAnUnknownProductIsBackordered(t *testing.T) {
	t.Parallel()
	b := setup(t, broker.StreamsConfig{})
	b.runConsumer(t)
	b.runDispatcher(t)
	order, event := b.paidOrder(t, line{skuMug, 1}, line{"discontinued", 1})
	testkit.WaitFor(t, 20*time.Second, "the event", func() bool { return len(b.rec.get(event)) == 1 })
	if got := b.rec.get(event); !outcomesEqual(got, fulfillment.Backordered) {
		t.Fatalf("outcomes = %v, want [backordered]", got)
	}
	var short string
	if err := b.pool.QueryRow(context.Background(), `SELECT body->'short'->0->>'sku' FROM notifications WHERE order_id = $1 AND kind = 'backorder'`, order).Scan(&short); err != nil {
		t.Fatal(err)
	}
	if short != "discontinued" || b.stock(t, skuMug) != mugStock || b.status(t, order) != "paid" {
		t.Fatalf("short line %q, mug stock %d, status %q; want discontinued, %d, paid", short, b.stock(t, skuMug), b.status(t, order), mugStock)
	}
}

// The consumer never moves an order backwards: a payment.succeeded that
// arrives after the order was refunded ships nothing.
func TestRefundedOrderIsNotFulfilled(t *testing.T) {
	t.Parallel()
	b := setup(t, broker.StreamsConfig{})
	order, event := b.paidOrder(t, line{skuMug, 1})
	if _, err := b.pool.Exec(context.Background(), `UPDATE orders SET status = 'refunded' WHERE id = $1`, order); err != nil {
		t.Fatal(err)
	}
	b.runConsumer(t)
	b.runDispatcher(t)
	testkit.WaitFor(t, 20*time.Second, "the event", func() bool { return len(b.rec.get(event)) == 1 })
	if got := b.rec.get(event); !outcomesEqual(got, fulfillment.Skipped) {
		t.Fatalf("outcomes = %v, want [skipped]", got)
	}
	if b.stock(t, skuMug) != mugStock || b.status(t, order) != "refunded" || b.notifications(t, order, fulfillment.KindReceipt) != 0 {
		t.Fatal("a refunded order was shipped")
	}
}

// The broker is down while payments succeed: the events wait in the outbox
// and flow when it is back; every order is fulfilled once, none lost.
func TestBrokerOutageLosesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, broker.StreamsConfig{})
	b.runConsumer(t)
	b.runDispatcher(t)
	b.nats.Stop()
	const n = 20
	for range n {
		b.paidOrder(t, line{skuKettle, 1})
	}
	testkit.WaitFor(t, 20*time.Second, "the events to wait with failed attempts", func() bool {
		return b.count(t, `SELECT count(*) FROM outbox_events WHERE attempts >= 1 AND published_at IS NULL`) == n
	})
	b.nats.Restart(t)
	testkit.WaitFor(t, 30*time.Second, "every order to be fulfilled", func() bool {
		return b.count(t, `SELECT count(*) FROM orders WHERE status = 'fulfilled'`) == n
	})
	b.settled(t)
	if got := b.stock(t, skuKettle); got != 1000-n {
		t.Fatalf("kettle stock = %d, want %d", got, 1000-n)
	}
	if got := b.count(t, `SELECT count(*) FROM notifications WHERE kind = 'receipt'`); got != n {
		t.Fatalf("%d receipts, want %d", got, n)
	}
	if got := b.count(t, `SELECT count(*) FROM processed_messages`); got != n {
		t.Fatalf("%d inbox rows, want %d", got, n)
	}
}

// The consumer reads the producer's event names; they must not drift apart.
func TestEventNamesMatchTheProducer(t *testing.T) {
	t.Parallel()
	if fulfillment.EventPaymentSucceeded != payments.EventPaymentSucceeded || fulfillment.EventRefundSucceeded != payments.EventRefundSucceeded {
		t.Fatal("fulfillment's event names differ from the payments service's")
	}
}
