package chaos

import (
	"encoding/json"
	"slices"
	"testing"
	"time"
)

// cleanHistory is a recorded history of six intents in which everything
// went right despite faults: a partially refunded order, an order paid on
// the second card after a decline (its client saw a 503 on the way), an
// order whose only card was declined, a fully refunded order whose
// second refund was refused, an order cancelled before its payment (which
// was refused), and an order whose cancel was refused because it was being
// paid; meanwhile the database was killed once, the
// APIs stayed up and came back. Every test case breaks exactly one
// invariant of a copy of it.
func cleanHistory() History {
	const t = "acme"
	return History{
		Outages: []Outage{{
			Kind: PostgresKilled, Began: outageBegan, Ended: outageBegan.Add(1500 * time.Millisecond),
			Probes: []Probe{
				{API: 0, At: outageBegan, Alive: true, Healthz: 200, Readyz: 503},
				{API: 1, At: outageBegan, Alive: true, Healthz: 200, Readyz: 503},
			},
			Back: []Reconnect{{API: 0, Ready: 300 * time.Millisecond, Listening: time.Second}, {API: 1, Ready: 200 * time.Millisecond, Listening: 2 * time.Second}},
		}},
		Features: Features{Dispatcher: true, Fulfillment: true},
		DB: DBState{
			Orders: []Order{
				{ID: "o1", Tenant: t, Key: "k1-order", Status: "partially_refunded", AmountTotal: 2490},
				{ID: "o2", Tenant: t, Key: "k2-order", Status: "fulfilled", AmountTotal: 5900},
				{ID: "o3", Tenant: t, Key: "k3-order", Status: "awaiting_payment", AmountTotal: 2200},
				{ID: "o4", Tenant: t, Key: "k4-order", Status: "refunded", AmountTotal: 1800},
				{ID: "o5", Tenant: t, Key: "k5-order", Status: "cancelled", AmountTotal: 1500},
				{ID: "o6", Tenant: t, Key: "k6-order", Status: "paid", AmountTotal: 3000},
				{ID: "o7", Tenant: t, Key: "k7-order", Status: "awaiting_payment", AmountTotal: 1200},
				{ID: "o8", Tenant: t, Key: "k8-order", Status: "cancelled", AmountTotal: 1400},
			},
			OrderItems: []OrderItem{
				{OrderID: "o1", SKU: "espresso", Quantity: 1},
				{OrderID: "o2", SKU: "kettle", Quantity: 1},
				{OrderID: "o3", SKU: "dripper", Quantity: 1},
				{OrderID: "o4", SKU: "mug", Quantity: 1},
				{OrderID: "o5", SKU: "mug", Quantity: 2},
				{OrderID: "o6", SKU: "kettle", Quantity: 1},
				{OrderID: "o7", SKU: "dripper", Quantity: 1},
				{OrderID: "o8", SKU: "espresso", Quantity: 1},
			},
			Payments: []Payment{
				{ID: "p1", Tenant: t, OrderID: "o1", Key: "k1-pay", ProviderKey: "pk1", Status: "succeeded", Amount: 2490, ChargeID: "ch1", AmountRefunded: 500},
				{ID: "p2", Tenant: t, OrderID: "o2", Key: "k2-pay", ProviderKey: "pk2", Status: "failed", Amount: 5900, ChargeID: "ch2"},
				{ID: "p3", Tenant: t, OrderID: "o2", Key: "k2-pay2", ProviderKey: "pk3", Status: "succeeded", Amount: 5900, ChargeID: "ch3"},
				{ID: "p4", Tenant: t, OrderID: "o3", Key: "k3-pay", ProviderKey: "pk4", Status: "failed", Amount: 2200, ChargeID: "ch4"},
				{ID: "p5", Tenant: t, OrderID: "o4", Key: "k4-pay", ProviderKey: "pk5", Status: "succeeded", Amount: 1800, ChargeID: "ch5", AmountRefunded: 1800},
				{ID: "p16", Tenant: t, OrderID: "o6", Key: "k6-pay", ProviderKey: "pk16", Status: "succeeded", Amount: 3000, ChargeID: "ch16"},
				// Given up by its key while the outcome was unknown: charged,
				// never paid, refunded in full.
				{ID: "p8", Tenant: t, OrderID: "o8", Key: "k8-pay", ProviderKey: "pk8", Status: "succeeded", Amount: 1400, ChargeID: "ch8", AmountRefunded: 1400, CancelRequested: true},
			},
			Refunds: []Refund{
				{ID: "r1", Tenant: t, PaymentID: "p1", Key: "k1-refund", ProviderKey: "pkr1", Status: "succeeded", Amount: 500, ProviderRefundID: "re1"},
				{ID: "r2", Tenant: t, PaymentID: "p5", Key: "k4-refund", ProviderKey: "pkr2", Status: "succeeded", Amount: 1800, ProviderRefundID: "re2"},
				{ID: "r8", Tenant: t, PaymentID: "p8", Key: "oncepay-cancel:p8", ProviderKey: "pkr8", Status: "succeeded", Amount: 1400, ProviderRefundID: "re8"},
			},
			Records: []Record{
				{Tenant: t, Operation: OpOrder, Key: "k1-order", State: "completed", Status: 201},
				{Tenant: t, Operation: OpOrder, Key: "k2-order", State: "completed", Status: 201},
				{Tenant: t, Operation: OpOrder, Key: "k3-order", State: "completed", Status: 201},
				{Tenant: t, Operation: OpOrder, Key: "k4-order", State: "completed", Status: 201},
				{Tenant: t, Operation: OpPay, Key: "k1-pay", State: "completed", Status: 201},
				{Tenant: t, Operation: OpPay, Key: "k2-pay", State: "failed", Status: 402},
				{Tenant: t, Operation: OpPay, Key: "k2-pay2", State: "completed", Status: 201},
				{Tenant: t, Operation: OpPay, Key: "k3-pay", State: "failed", Status: 402},
				{Tenant: t, Operation: OpPay, Key: "k4-pay", State: "completed", Status: 201},
				{Tenant: t, Operation: OpRefund, Key: "k1-refund", State: "completed", Status: 201},
				{Tenant: t, Operation: OpRefund, Key: "k4-refund", State: "completed", Status: 201},
				{Tenant: t, Operation: OpRefund, Key: "k4-refund2", State: "failed", Status: 422},
				{Tenant: t, Operation: OpOrder, Key: "k5-order", State: "completed", Status: 201},
				{Tenant: t, Operation: OpCancel, Key: "k5-cancel", State: "completed", Status: 200},
				{Tenant: t, Operation: OpPay, Key: "k5-pay", State: "failed", Status: 409},
				{Tenant: t, Operation: OpOrder, Key: "k6-order", State: "completed", Status: 201},
				{Tenant: t, Operation: OpPay, Key: "k6-pay", State: "completed", Status: 201},
				{Tenant: t, Operation: OpCancel, Key: "k6-cancel", State: "failed", Status: 409},
				{Tenant: t, Operation: OpOrder, Key: "k7-order", State: "completed", Status: 201},
				{Tenant: t, Operation: OpGiveUp, Key: "k7-give-up", State: "completed", Status: 200},
				{Tenant: t, Operation: OpPay, Key: "k7-pay", State: "failed", Status: 409, Point: "cancelled"},
				{Tenant: t, Operation: OpOrder, Key: "k8-order", State: "completed", Status: 201},
				{Tenant: t, Operation: OpPay, Key: "k8-pay", State: "failed", Status: 409},
				{Tenant: t, Operation: OpGiveUp, Key: "k8-give-up", State: "completed", Status: 202},
				{Tenant: t, Operation: OpRefund, Key: "oncepay-cancel:p8", State: "completed", Status: 201},
			},
			Events: []Event{
				{ID: "e-o1", Type: "order.created", AggregateID: "o1", Published: true},
				{ID: "e-o2", Type: "order.created", AggregateID: "o2", Published: true},
				{ID: "e-o3", Type: "order.created", AggregateID: "o3", Published: true},
				{ID: "e-o4", Type: "order.created", AggregateID: "o4", Published: true},
				{ID: "e-p1", Type: "payment.succeeded", AggregateID: "p1", Published: true},
				{ID: "e-p2", Type: "payment.failed", AggregateID: "p2", Published: true},
				{ID: "e-p3", Type: "payment.succeeded", AggregateID: "p3", Published: true},
				{ID: "e-p4", Type: "payment.failed", AggregateID: "p4", Published: true},
				{ID: "e-p5", Type: "payment.succeeded", AggregateID: "p5", Published: true},
				{ID: "e-r1", Type: "refund.succeeded", AggregateID: "r1", Published: true},
				{ID: "e-r2", Type: "refund.succeeded", AggregateID: "r2", Published: true},
				{ID: "e-o5", Type: "order.created", AggregateID: "o5", Published: true},
				{ID: "e-o5c", Type: "order.cancelled", AggregateID: "o5", Published: true},
				{ID: "e-o6", Type: "order.created", AggregateID: "o6", Published: true},
				{ID: "e-p16", Type: "payment.succeeded", AggregateID: "p16", Published: true},
				{ID: "e-o7", Type: "order.created", AggregateID: "o7", Published: true},
				{ID: "e-o8", Type: "order.created", AggregateID: "o8", Published: true},
				{ID: "e-p8", Type: "payment.succeeded", AggregateID: "p8", Published: true},
				{ID: "e-r8", Type: "refund.succeeded", AggregateID: "r8", Published: true},
				{ID: "e-o8c", Type: "order.cancelled", AggregateID: "o8", Published: true},
			},
			StockBefore: []Stock{{t, "espresso", 100}, {t, "kettle", 100}, {t, "dripper", 100}, {t, "mug", 100}},
			StockAfter:  []Stock{{t, "espresso", 99}, {t, "kettle", 99}, {t, "dripper", 100}, {t, "mug", 99}},
			Processed: []Processed{
				{"e-p1", "fulfillment"}, {"e-p3", "fulfillment"}, {"e-p5", "fulfillment"},
				{"e-r1", "fulfillment"}, {"e-r2", "fulfillment"}, {"e-p16", "fulfillment"},
				{"e-p8", "fulfillment"}, {"e-r8", "fulfillment"},
			},
			Notifications: []Notification{
				{OrderID: "o1", Kind: "receipt", EventID: "e-p1"},
				{OrderID: "o2", Kind: "receipt", EventID: "e-p3"},
				{OrderID: "o4", Kind: "receipt", EventID: "e-p5"},
				{OrderID: "o1", Kind: "refund", EventID: "e-r1"},
				{OrderID: "o4", Kind: "refund", EventID: "e-r2"},
			},
		},
		Ledger: Ledger{
			Charges: []Charge{
				{ID: "ch1", Amount: 2490, Status: "succeeded", Reference: "p1", IdempotencyKey: "pk1", AmountRefunded: 500},
				{ID: "ch2", Amount: 5900, Status: "failed", Reference: "p2", IdempotencyKey: "pk2"},
				{ID: "ch3", Amount: 5900, Status: "succeeded", Reference: "p3", IdempotencyKey: "pk3"},
				{ID: "ch4", Amount: 2200, Status: "failed", Reference: "p4", IdempotencyKey: "pk4"},
				{ID: "ch5", Amount: 1800, Status: "succeeded", Reference: "p5", IdempotencyKey: "pk5", AmountRefunded: 1800},
				{ID: "ch16", Amount: 3000, Status: "succeeded", Reference: "p16", IdempotencyKey: "pk16"},
				{ID: "ch8", Amount: 1400, Status: "succeeded", Reference: "p8", IdempotencyKey: "pk8", AmountRefunded: 1400},
			},
			Refunds: []LedgerRefund{
				{ID: "re1", Charge: "ch1", Amount: 500, Status: "succeeded", Reference: "r1", IdempotencyKey: "pkr1"},
				{ID: "re2", Charge: "ch5", Amount: 1800, Status: "succeeded", Reference: "r2", IdempotencyKey: "pkr2"},
				{ID: "re8", Charge: "ch8", Amount: 1400, Status: "succeeded", Reference: "r8", IdempotencyKey: "pkr8"},
			},
		},
		// Duplicates in the stream are at-least-once delivery, not a violation.
		Stream: &StreamState{MessageIDs: map[string]int{
			"e-o1": 1, "e-o2": 1, "e-o3": 1, "e-o4": 1, "e-p1": 2, "e-p2": 1, "e-p3": 1,
			"e-p4": 1, "e-p5": 1, "e-r1": 1, "e-r2": 1, "e-o5": 1, "e-o5c": 1, "e-o6": 1, "e-p16": 1,
			"e-o7": 1, "e-o8": 1, "e-p8": 1, "e-r8": 1, "e-o8c": 1,
		}},
		Outcomes: []Outcome{
			{Intent: 1, Tenant: t, Calls: []Call{
				{Op: OpOrder, Key: "k1-order", Status: 201, ResourceID: "o1", Amount: 2490, Attempts: 2},
				{Op: OpPay, Key: "k1-pay", Status: 201, ResourceID: "p1", ResourceStatus: "succeeded", Parent: "o1", Amount: 2490, Attempts: 1},
				{Op: OpRefund, Key: "k1-refund", Status: 201, ResourceID: "r1", ResourceStatus: "succeeded", Parent: "p1", Amount: 500, Attempts: 1},
			}},
			{Intent: 2, Tenant: t, Calls: []Call{
				{Op: OpOrder, Key: "k2-order", Status: 201, ResourceID: "o2", Amount: 5900, Attempts: 1},
				{Op: OpPay, Key: "k2-pay", Status: 402, Code: "card_declined", Attempts: 1},
				{Op: OpPay, Key: "k2-pay2", Status: 201, ResourceID: "p3", ResourceStatus: "succeeded", Parent: "o2", Amount: 5900, Attempts: 3},
			}},
			{Intent: 3, Tenant: t, Calls: []Call{
				{Op: OpOrder, Key: "k3-order", Status: 201, ResourceID: "o3", Amount: 2200, Attempts: 1},
				{Op: OpPay, Key: "k3-pay", Status: 402, Code: "card_declined", Attempts: 4},
			}},
			{Intent: 4, Tenant: t, Calls: []Call{
				{Op: OpOrder, Key: "k4-order", Status: 201, ResourceID: "o4", Amount: 1800, Attempts: 1},
				{Op: OpPay, Key: "k4-pay", Status: 201, ResourceID: "p5", ResourceStatus: "succeeded", Parent: "o4", Amount: 1800, Attempts: 1},
				{Op: OpRefund, Key: "k4-refund", Status: 201, ResourceID: "r2", ResourceStatus: "succeeded", Parent: "p5", Amount: 1800, Attempts: 1},
				{Op: OpRefund, Key: "k4-refund2", Status: 422, Code: "refund_exceeds_payment", Attempts: 1},
			}},
			{Intent: 5, Tenant: t, Calls: []Call{
				{Op: OpOrder, Key: "k5-order", Status: 201, ResourceID: "o5", Amount: 1500, Attempts: 1},
				{Op: OpCancel, Key: "k5-cancel", Status: 200, ResourceID: "o5", ResourceStatus: "cancelled", Parent: "o5", Amount: 1500, Attempts: 2},
				{Op: OpPay, Key: "k5-pay", Status: 409, Code: "order_not_payable", Attempts: 1},
			}},
			{Intent: 6, Tenant: t, Calls: []Call{
				{Op: OpOrder, Key: "k6-order", Status: 201, ResourceID: "o6", Amount: 3000, Attempts: 1},
				{Op: OpPay, Key: "k6-pay", Status: 201, ResourceID: "p16", ResourceStatus: "succeeded", Parent: "o6", Amount: 3000, Attempts: 1},
				{Op: OpCancel, Key: "k6-cancel", Status: 409, Code: "order_not_cancellable", Parent: "o6", Attempts: 1},
			}},
			{Intent: 7, Tenant: t, Calls: []Call{
				{Op: OpOrder, Key: "k7-order", Status: 201, ResourceID: "o7", Amount: 1200, Attempts: 1},
				{Op: OpGiveUp, Key: "k7-give-up", Status: 200, ResourceStatus: "prevented", Parent: "o7", Target: "k7-pay", Attempts: 1},
				{Op: OpPay, Key: "k7-pay", Status: 409, Code: "payment_cancelled", Attempts: 1},
			}},
			{Intent: 8, Tenant: t, Calls: []Call{
				{Op: OpOrder, Key: "k8-order", Status: 201, ResourceID: "o8", Amount: 1400, Attempts: 1},
				{Op: OpGiveUp, Key: "k8-give-up", Status: 202, ResourceID: "p8", ResourceStatus: "cancel_requested", Parent: "o8", Target: "k8-pay", Attempts: 1},
				{Op: OpPay, Key: "k8-pay", Status: 409, Code: "payment_cancelled", Attempts: 3},
			}},
		},
	}
}

// recordOf is h's idempotency record of op and key.
func recordOf(h *History, op, key string) *Record {
	return &h.DB.Records[slices.IndexFunc(h.DB.Records, func(r Record) bool { return r.Operation == op && r.Key == key })]
}

// outageBegan is when the database of cleanHistory went away.
var outageBegan = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// clone deep-copies a history, so a case's mutation stays its own.
func clone(t *testing.T, h History) History {
	t.Helper()
	raw, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var out History
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestCheckCleanHistory(t *testing.T) {
	t.Parallel()
	if v := Check(cleanHistory()); len(v) != 0 {
		t.Fatalf("clean history: %d violations: %v", len(v), v)
	}
	// Without the optional parts, their invariants are not checked.
	h := clone(t, cleanHistory())
	h.Features = Features{}
	h.Stream = nil
	h.DB.Processed, h.DB.Notifications = nil, nil
	for i := range h.DB.Events {
		h.DB.Events[i].Published = false
	}
	h.DB.StockAfter = h.DB.StockBefore
	if v := Check(h); len(v) != 0 {
		t.Fatalf("clean history without dispatcher and fulfillment: %v", v)
	}
	// A client that gave up on 5xx answers while the database was away is
	// no violation once its call, resumed after settling, is definite.
	h = clone(t, cleanHistory())
	c := &h.Outcomes[0].Calls[1]
	resumed := *c
	c.Status, c.Code, c.ResourceID, c.ResourceStatus, c.Parent, c.Amount, c.Attempts = 500, "internal", "", "", "", 0, 10
	c.Ended = outageBegan.Add(5 * time.Second)
	c.Resumed = &resumed
	if v := Check(h); len(v) != 0 {
		t.Fatalf("a client that gave up during an outage: %v", v)
	}
	if n := GaveUpDuringOutages(h); n != 1 {
		t.Fatalf("GaveUpDuringOutages = %d, want 1", n)
	}

	// The same for a client whose last attempt met the lease of an attempt
	// the network cut (409 request_in_progress) while the link to the
	// database was broken; not for a fault on the broker's link, which no
	// request crosses.
	for _, tc := range []struct {
		dep       string
		violation bool
	}{{DepPostgres, false}, {DepProvider, false}, {DepNATS, true}} {
		h = clone(t, cleanHistory())
		h.Outages = nil
		linkBegan := outageBegan.Add(time.Minute)
		h.LinkFaults = []LinkFault{{Kind: NetworkBlackhole, Dep: tc.dep, Began: linkBegan, Ended: linkBegan.Add(5 * time.Second)}}
		c := &h.Outcomes[0].Calls[1]
		resumed := *c
		c.Status, c.Code, c.ResourceID, c.ResourceStatus, c.Parent, c.Amount, c.Attempts = 409, codeInProgress, "", "", "", 0, 10
		c.Ended = linkBegan.Add(8 * time.Second)
		c.Resumed = &resumed
		v := Check(h)
		if got := len(v) == 1 && v[0].Kind == ClientUnresolved; got != tc.violation {
			t.Errorf("409 in progress after its retries, during a fault on the link to %s: %v, want a violation: %v", tc.dep, v, tc.violation)
		}
	}
}

func TestCheckReportsEachViolation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		want    Kind
		subject string
		inject  func(h *History)
	}{
		{"second succeeded charge for a paid order", DoubleCharge, "order o1", func(h *History) {
			h.Ledger.Charges = append(h.Ledger.Charges, Charge{ID: "ch9", Amount: 2490, Status: "succeeded", Reference: "p1", IdempotencyKey: "another-key"})
		}},
		{"an order cancelled while its payment succeeded", CancelledCharged, "order o6", func(h *History) {
			h.DB.Orders[5].Status = "cancelled"
			h.DB.Events = append(h.DB.Events, Event{ID: "e-o6c", Type: "order.cancelled", AggregateID: "o6", Published: true})
			h.Stream.MessageIDs["e-o6c"] = 1
			c := &h.Outcomes[5].Calls[2]
			c.Status, c.Code, c.ResourceID, c.ResourceStatus, c.Amount = 200, "", "o6", "cancelled", 3000
		}},
		{"a cancel answered 200, the order still awaits its payment", AnswerMismatch, "intent 5 orders.cancel k5-cancel", func(h *History) {
			h.DB.Orders[4].Status = "awaiting_payment"
			h.DB.Events = slices.DeleteFunc(h.DB.Events, func(e Event) bool { return e.ID == "e-o5c" })
		}},
		{"a cancel refused, the order cancelled all the same", AnswerMismatch, "intent 6 orders.cancel k6-cancel", func(h *History) {
			h.Outcomes[5].Calls[1] = Call{Op: OpPay, Key: "k6-pay", Status: 402, Code: "card_declined", Attempts: 1}
			h.DB.Payments[5].Status, h.Ledger.Charges[5].Status = "failed", "failed"
			h.DB.Records[16].State, h.DB.Records[16].Status = "failed", 402
			h.DB.Orders[5].Status = "cancelled"
			h.DB.Events[slices.IndexFunc(h.DB.Events, func(e Event) bool { return e.ID == "e-p16" })].Type = "payment.failed"
			h.DB.Events = append(h.DB.Events, Event{ID: "e-o6c", Type: "order.cancelled", AggregateID: "o6", Published: true})
			h.Stream.MessageIDs["e-o6c"] = 1
		}},
		{"a pay refused as not payable, yet its key made a payment", AnswerMismatch, "intent 5 payments.create k5-pay", func(h *History) {
			h.DB.Payments = append(h.DB.Payments, Payment{ID: "p7", Tenant: "acme", OrderID: "o5", Key: "k5-pay", ProviderKey: "pk7", Status: "failed", Amount: 1500})
			h.DB.Events = append(h.DB.Events, Event{ID: "e-p7", Type: "payment.failed", AggregateID: "p7", Published: true})
			h.Stream.MessageIDs["e-p7"] = 1
		}},
		{"a cancelled order without its event", EventMissing, "order.cancelled o5", func(h *History) {
			h.DB.Events = slices.DeleteFunc(h.DB.Events, func(e Event) bool { return e.ID == "e-o5c" })
		}},
		{"a payment given up by its key, charged and never refunded", GivenUpCharged, "payment p8", func(h *History) {
			// What the service would leave without the compensation.
			h.DB.Payments[6].AmountRefunded, h.Ledger.Charges[6].AmountRefunded = 0, 0
			h.DB.Refunds = h.DB.Refunds[:2]
			h.Ledger.Refunds = h.Ledger.Refunds[:2]
			h.DB.Records = slices.DeleteFunc(h.DB.Records, func(r Record) bool { return r.Key == "oncepay-cancel:p8" })
			h.DB.Orders[7].Status = "awaiting_payment"
			h.DB.Events = slices.DeleteFunc(h.DB.Events, func(e Event) bool { return e.ID == "e-r8" || e.ID == "e-o8c" })
		}},
		{"a payment the client gave up succeeded, the give-up said refund_started and nothing undid it", GivenUpCharged, "payment p8", func(h *History) {
			// Without the cancel's mark: only the answer says it was given up.
			p := &h.DB.Payments[6]
			// The compensating refund was started and failed.
			p.CancelRequested, p.AmountRefunded, h.Ledger.Charges[6].AmountRefunded = false, 0, 0
			h.DB.Refunds[2].Status, h.DB.Refunds[2].ProviderRefundID = "failed", ""
			h.Ledger.Refunds = h.Ledger.Refunds[:2]
			h.DB.Orders[7].Status = "paid"
			h.DB.Events = slices.DeleteFunc(h.DB.Events, func(e Event) bool { return e.ID == "e-r8" || e.ID == "e-o8c" })
			r := recordOf(h, OpPay, "k8-pay")
			r.State, r.Status = "completed", 201
			h.Outcomes[7].Calls[1].ResourceStatus = "refund_started"
			h.Outcomes[7].Calls[2] = Call{Op: OpPay, Key: "k8-pay", Status: 201, ResourceID: "p8", ResourceStatus: "succeeded", Parent: "o8", Amount: 1400, Attempts: 1}
		}},
		{"a payment marked cancelled while unknown shipped", GivenUpFulfilled, "payment p8", func(h *History) {
			h.DB.Notifications = append(h.DB.Notifications, Notification{OrderID: "o8", Kind: "receipt", EventID: "e-p8"})
			h.DB.StockAfter[0].Stock--
		}},
		{"a give-up answered prevented, yet the payment's key ran", AnswerMismatch, "intent 7 payments.cancel k7-give-up", func(h *History) {
			h.DB.Payments = append(h.DB.Payments, Payment{ID: "p7", Tenant: "acme", OrderID: "o7", Key: "k7-pay", ProviderKey: "pk7", Status: "failed", Amount: 1200})
			h.DB.Events = append(h.DB.Events, Event{ID: "e-p7", Type: "payment.failed", AggregateID: "p7", Published: true})
			h.Stream.MessageIDs["e-p7"] = 1
		}},
		{"a pay answered payment_cancelled, no cancel stopped its key", AnswerMismatch, "intent 8 payments.create k8-pay", func(h *History) {
			h.Outcomes[7].Calls = h.Outcomes[7].Calls[:1:1]
			h.Outcomes[7].Calls = append(h.Outcomes[7].Calls, Call{Op: OpPay, Key: "k8-pay", Status: 409, Code: "payment_cancelled", Attempts: 1})
			h.DB.Payments[6].CancelRequested = false
			h.DB.Orders[7].Status = "refunded"
			h.DB.Events = slices.DeleteFunc(h.DB.Events, func(e Event) bool { return e.ID == "e-o8c" })
		}},
		{"provider charge nobody recorded", ChargeWithoutPayment, "charge ch9", func(h *History) {
			h.Ledger.Charges = append(h.Ledger.Charges, Charge{ID: "ch9", Amount: 100, Status: "succeeded", Reference: "p-unknown"})
		}},
		{"we recorded a decline, the provider charged", ChargeMismatch, "payment p4", func(h *History) {
			h.Ledger.Charges[3].Status = "succeeded"
		}},
		{"we recorded success, the provider charged another amount", ChargeMismatch, "payment p3", func(h *History) {
			h.Ledger.Charges[2].Amount = 5800
		}},
		{"payment still pending after settling", Unsettled, "payment p6", func(h *History) {
			h.DB.Payments = append(h.DB.Payments, Payment{ID: "p6", Tenant: "acme", OrderID: "o3", Key: "k3-pay2", ProviderKey: "pk6", Status: "pending", Amount: 2200})
			h.DB.Records = append(h.DB.Records, Record{Tenant: "acme", Operation: OpPay, Key: "k3-pay2", State: "pending"})
		}},
		{"money operation's record still pending", Unsettled, "record refunds.create k9", func(h *History) {
			h.DB.Records = append(h.DB.Records, Record{Tenant: "acme", Operation: OpRefund, Key: "k9", State: "pending"})
		}},
		{"refunded order shown as partially refunded", OrderStatusMismatch, "order o4", func(h *History) {
			h.DB.Orders[3].Status = "partially_refunded"
		}},
		{"refunds beyond the payment", RefundExceedsPayment, "payment p5", func(h *History) {
			h.DB.Refunds = append(h.DB.Refunds, Refund{ID: "r3", Tenant: "acme", PaymentID: "p5", Key: "k4-refund3", ProviderKey: "pkr3", Status: "succeeded", Amount: 100, ProviderRefundID: "re3"})
			h.Ledger.Refunds = append(h.Ledger.Refunds, LedgerRefund{ID: "re3", Charge: "ch5", Amount: 100, Status: "succeeded", Reference: "r3"})
			h.DB.Payments[4].AmountRefunded = 1900
			h.DB.Events = append(h.DB.Events, Event{ID: "e-r3", Type: "refund.succeeded", AggregateID: "r3", Published: true})
			h.Stream.MessageIDs["e-r3"] = 1
			h.DB.Processed = append(h.DB.Processed, Processed{"e-r3", "fulfillment"})
		}},
		{"our refund unknown to the provider", RefundMismatch, "payment p1", func(h *History) {
			h.Ledger.Refunds = h.Ledger.Refunds[1:]
		}},
		{"provider refund unknown to us", RefundMismatch, "payment p1", func(h *History) {
			h.Ledger.Refunds = append(h.Ledger.Refunds, LedgerRefund{ID: "re9", Charge: "ch1", Amount: 100, Status: "succeeded", Reference: "r9"})
		}},
		{"refunded amount is not the refunds' sum", RefundMismatch, "payment p1", func(h *History) {
			h.DB.Payments[0].AmountRefunded = 600
		}},
		{"order without order.created", EventMissing, "order.created o3", func(h *History) {
			h.DB.Events = slices.DeleteFunc(h.DB.Events, func(e Event) bool { return e.ID == "e-o3" })
		}},
		{"payment.succeeded twice", EventDuplicated, "payment.succeeded p1", func(h *History) {
			h.DB.Events = append(h.DB.Events, Event{ID: "e-p1b", Type: "payment.succeeded", AggregateID: "p1", Published: true})
			h.Stream.MessageIDs["e-p1b"] = 1
			h.DB.Processed = append(h.DB.Processed, Processed{"e-p1b", "fulfillment"})
		}},
		{"event never published", EventUnpublished, "event e-p2", func(h *History) {
			h.DB.Events[5].Published = false
		}},
		{"event marked published, not in the stream", EventUnpublished, "event e-r1", func(h *History) {
			delete(h.Stream.MessageIDs, "e-r1")
		}},
		{"payment.succeeded never consumed", EventUnconsumed, "event e-p3", func(h *History) {
			h.DB.Processed = slices.DeleteFunc(h.DB.Processed, func(p Processed) bool { return p.MessageID == "e-p3" })
		}},
		{"order shipped twice", FulfillmentMismatch, "order o2", func(h *History) {
			h.DB.Notifications = append(h.DB.Notifications, Notification{OrderID: "o2", Kind: "receipt", EventID: "e-p3-redelivered"})
			h.DB.StockAfter[1].Stock = 98
		}},
		{"stock taken without a shipment", StockMismatch, "product acme/dripper", func(h *History) {
			h.DB.StockAfter[2].Stock = 99
		}},
		{"webhook stored, never applied", WebhookUnprocessed, "webhook msg_1", func(h *History) {
			h.DB.UnprocessedWebhooks = []string{"msg_1"}
		}},
		{"intent without any definite outcome", IntentNotDefinite, "intent 3 payments.create k3-pay", func(h *History) {
			h.Outcomes[2].Calls[1] = Call{Op: OpPay, Key: "k3-pay", Status: 0, Err: "connection reset", Attempts: 8,
				Resumed: &Call{Op: OpPay, Key: "k3-pay", Status: 503, Code: "payment_provider_unavailable"}}
			h.DB.Records = slices.DeleteFunc(h.DB.Records, func(r Record) bool { return r.Key == "k3-pay" })
		}},
		{"client left with a 503 after its retries", ClientUnresolved, "intent 1 payments.create k1-pay", func(h *History) {
			c := &h.Outcomes[0].Calls[1]
			resumed := *c
			c.Status, c.Code, c.ResourceID, c.ResourceStatus, c.Attempts = 503, "payment_provider_unavailable", "", "", 8
			c.Resumed = &resumed
		}},
		{"client left with 409 request_in_progress", ClientUnresolved, "intent 2 payments.create k2-pay2", func(h *History) {
			c := &h.Outcomes[1].Calls[2]
			c.Status, c.Code, c.ResourceID, c.ResourceStatus = 409, "request_in_progress", "", "" // the record says completed
		}},
		{"declined answer for a succeeded payment", AnswerMismatch, "intent 2 payments.create k2-pay2", func(h *History) {
			c := &h.Outcomes[1].Calls[2]
			c.Status, c.Code, c.ResourceID, c.ResourceStatus = 402, "card_declined", "", ""
		}},
		{"client gave up on a 500 long after the database came back", ClientUnresolved, "intent 1 payments.create k1-pay", func(h *History) {
			c := &h.Outcomes[0].Calls[1]
			resumed := *c
			c.Status, c.Code, c.ResourceID, c.ResourceStatus, c.Parent, c.Amount, c.Attempts = 500, "internal", "", "", "", 0, 10
			c.Ended = outageBegan.Add(time.Minute)
			c.Resumed = &resumed
		}},
		{"order answer names another order", AnswerMismatch, "intent 4 orders.create k4-order", func(h *History) {
			h.Outcomes[3].Calls[0].ResourceID = "o3"
		}},
		{"order answer with another total than the order", AnswerMismatch, "intent 1 orders.create k1-order", func(h *History) {
			h.Outcomes[0].Calls[0].Amount = 2400
		}},
		{"payment answer of another amount", AnswerMismatch, "intent 4 payments.create k4-pay", func(h *History) {
			h.Outcomes[3].Calls[1].Amount = 1700
		}},
		{"refund answer naming another payment", AnswerMismatch, "intent 1 refunds.create k1-refund", func(h *History) {
			h.Outcomes[0].Calls[2].Parent = "p5"
		}},
		{"refund refused, yet its key's refund succeeded", AnswerMismatch, "intent 1 refunds.create k1-refund", func(h *History) {
			c := &h.Outcomes[0].Calls[2]
			c.Status, c.Code, c.ResourceID, c.ResourceStatus, c.Parent, c.Amount = 422, "refund_exceeds_payment", "", "", "", 0
		}},
		{"acknowledged order gone after a crash", AnswerMismatch, "intent 3 orders.create k3-order", func(h *History) {
			// The order's row is lost; its declined payment never happened
			// either (the client got no 402 for it).
			h.DB.Orders = slices.DeleteFunc(h.DB.Orders, func(o Order) bool { return o.ID == "o3" })
			h.DB.OrderItems = slices.DeleteFunc(h.DB.OrderItems, func(i OrderItem) bool { return i.OrderID == "o3" })
			h.DB.Payments = slices.DeleteFunc(h.DB.Payments, func(p Payment) bool { return p.ID == "p4" })
			h.DB.Events = slices.DeleteFunc(h.DB.Events, func(e Event) bool { return e.AggregateID == "o3" || e.AggregateID == "p4" })
			h.DB.StockBefore = slices.DeleteFunc(h.DB.StockBefore, func(s Stock) bool { return s.SKU == "dripper" })
			h.DB.StockAfter = slices.DeleteFunc(h.DB.StockAfter, func(s Stock) bool { return s.SKU == "dripper" })
			h.Ledger.Charges = slices.DeleteFunc(h.Ledger.Charges, func(c Charge) bool { return c.Reference == "p4" })
			h.Outcomes[2].Calls = h.Outcomes[2].Calls[:1]
		}},
		{"readyz said ready while the database was away", UnhealthyDuringOutage, "postgres_killed 1 api-1", func(h *History) {
			h.Outages[0].Probes[1].Readyz = 200
		}},
		{"an API exited while the database was away", UnhealthyDuringOutage, "postgres_killed 1 api-0", func(h *History) {
			h.Outages[0].Probes[0] = Probe{API: 0, At: outageBegan, Alive: false}
		}},
		{"an API never ready again", NotReconnected, "postgres_killed 1 api-0", func(h *History) {
			h.Outages[0].Back[0].Ready = -1
		}},
		{"an API's outbox listener never back", NotReconnected, "postgres_killed 1 api-1", func(h *History) {
			h.Outages[0].Back[1].Listening = -1
		}},
		{"fresh key refused as reused", UnexpectedAnswer, "intent 3 payments.create k3-pay", func(h *History) {
			c := &h.Outcomes[2].Calls[1]
			c.Status, c.Code = 422, "idempotency_key_reused"
		}},
		{"data race in a process", DataRace, "processes", func(h *History) {
			h.DataRaces = 2
		}},
	}
	covered := map[Kind]bool{}
	for _, tt := range tests {
		covered[tt.want] = true
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := clone(t, cleanHistory())
			tt.inject(&h)
			got := Check(h)
			if len(got) != 1 || got[0].Kind != tt.want || got[0].Subject != tt.subject {
				t.Fatalf("want exactly one %s about %q, got %d:\n%v", tt.want, tt.subject, len(got), got)
			}
		})
	}
	for _, k := range Kinds {
		if !covered[k] {
			t.Errorf("no recorded history violates %s", k)
		}
	}
}

func TestCallDefinite(t *testing.T) {
	t.Parallel()
	tests := []struct {
		call Call
		want bool
	}{
		{Call{Status: 201}, true},
		{Call{Status: 200}, true},
		{Call{Status: 402, Code: "card_declined"}, true},
		{Call{Status: 409, Code: "order_already_paid"}, true},
		{Call{Status: 422, Code: "refund_exceeds_payment"}, true},
		{Call{Status: 409, Code: "request_in_progress"}, false},
		{Call{Status: 503, Code: "payment_provider_unavailable"}, false},
		{Call{Status: 500}, false},
		{Call{Status: 0, Err: "connection reset"}, false},
	}
	for _, tt := range tests {
		if got := tt.call.Definite(); got != tt.want {
			t.Errorf("%+v.Definite() = %v, want %v", tt.call, got, tt.want)
		}
	}
}
