package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/payments"
)

// Kind names one invariant. A Violation of it is a bug of the service (or of
// the run's setup), never an accepted outcome of a fault.
type Kind string

// The invariants Check enforces. Each is independent: a history with one
// thing wrong reports exactly one Violation.
const (
	// DoubleCharge: an order has more than one succeeded provider charge, or
	// more than one succeeded payment. The bug the whole service exists to
	// prevent.
	DoubleCharge Kind = "double_charge"
	// ChargeWithoutPayment: the provider holds a charge whose reference names
	// no payment of ours: money taken that we cannot account for.
	ChargeWithoutPayment Kind = "charge_without_payment"
	// CancelledCharged: an order that was cancelled has a succeeded
	// payment or a succeeded provider charge: the customer gave the order
	// up and was charged for it anyway.
	CancelledCharged Kind = "cancelled_order_charged"
	// GivenUpCharged: a payment its client gave up by its key (POST
	// /v1/payments/cancel-by-key answered cancel_requested or
	// refund_started, or the payment carries the cancel's mark) ended
	// charged and not refunded in full.
	GivenUpCharged Kind = "given_up_payment_charged"
	// GivenUpFulfilled: a payment marked cancelled while its outcome was
	// unknown was fulfilled: its order shipped although the client gave
	// the payment up before it was known to have succeeded.
	GivenUpFulfilled Kind = "given_up_payment_fulfilled"
	// ChargeMismatch: a payment and the provider disagree: we say succeeded
	// and the provider has no such succeeded charge (or another amount), or
	// we say failed and the provider charged.
	ChargeMismatch Kind = "charge_mismatch"
	// Unsettled: a payment, a refund or a money operation's idempotency
	// record is still pending after the system settled: an intent nobody
	// will ever finish.
	Unsettled Kind = "unsettled"
	// OrderStatusMismatch: an order's status does not follow from its
	// payments and refunds.
	OrderStatusMismatch Kind = "order_status_mismatch"
	// RefundExceedsPayment: refunds of a payment add up to more than it,
	// in our books or at the provider.
	RefundExceedsPayment Kind = "refund_exceeds_payment"
	// RefundMismatch: our refunds of a payment and the provider's refunds of
	// its charge are not the same set, or the payment's refunded amount is
	// not their sum.
	RefundMismatch Kind = "refund_mismatch"
	// EventMissing: a state change without its outbox event (an order
	// without order.created, a finished payment without payment.succeeded or
	// payment.failed, a succeeded refund without refund.succeeded).
	EventMissing Kind = "event_missing"
	// EventDuplicated: a state change with more than one event: consumers
	// would act twice if their inbox did not save them.
	EventDuplicated Kind = "event_duplicated"
	// EventUnpublished: with a dispatcher, a committed event that was not
	// published after settling, or is marked published but is not in the
	// broker's stream (lost).
	EventUnpublished Kind = "event_unpublished"
	// EventUnconsumed: with fulfillment, a payment.succeeded or
	// refund.succeeded event the consumer never processed.
	EventUnconsumed Kind = "event_unconsumed"
	// FulfillmentMismatch: with fulfillment, an order with more than one
	// receipt, a fulfilled order without its receipt, a receipt for an order
	// that was never fulfilled, or one event noted twice.
	FulfillmentMismatch Kind = "fulfillment_mismatch"
	// StockMismatch: with fulfillment, a product's stock did not drop by
	// exactly the quantities of the orders that were shipped.
	StockMismatch Kind = "stock_mismatch"
	// WebhookUnprocessed: a stored provider webhook was never applied.
	WebhookUnprocessed Kind = "webhook_unprocessed"
	// IntentNotDefinite: a call of an intent has no definite outcome: the
	// client got none, the same call after settling got none, and the
	// database holds no final record of it.
	IntentNotDefinite Kind = "intent_not_definite"
	// ClientUnresolved: a client's call ended, after all its retries, on a
	// 5xx, a 409 request_in_progress or no answer at all, although the
	// intent did get a definite outcome later (otherwise it is the graver
	// IntentNotDefinite).
	ClientUnresolved Kind = "client_unresolved"
	// AnswerMismatch: a definite answer the database contradicts (a 201
	// payment that is not succeeded, a 402 whose payment did not fail, an
	// order id that is not the key's order).
	AnswerMismatch Kind = "answer_mismatch"
	// UnexpectedAnswer: a definite answer no intent of the run may get
	// (400, 404, 422 idempotency_key_reused, ...).
	UnexpectedAnswer Kind = "unexpected_answer"
	// UnhealthyDuringOutage: while the database was away, an API process
	// exited, its /healthz did not answer 200, or its /readyz did not
	// answer 503: the process must stay up and say it is not ready.
	UnhealthyDuringOutage Kind = "api_unhealthy_during_outage"
	// NotReconnected: after the database came back, an API's /readyz did
	// not answer 200 within reconnectBound, or (with the dispatcher) it
	// did not LISTEN for outbox notifications again: a connection left dead.
	NotReconnected Kind = "api_not_reconnected"
	// DataRace: a race-enabled process reported a data race.
	DataRace Kind = "data_race"
)

// Kinds lists every invariant, in report order.
var Kinds = []Kind{
	DoubleCharge, ChargeWithoutPayment, CancelledCharged, GivenUpCharged, GivenUpFulfilled, ChargeMismatch, Unsettled, OrderStatusMismatch,
	RefundExceedsPayment, RefundMismatch, EventMissing, EventDuplicated, EventUnpublished,
	EventUnconsumed, FulfillmentMismatch, StockMismatch, WebhookUnprocessed,
	IntentNotDefinite, ClientUnresolved, AnswerMismatch, UnexpectedAnswer, UnhealthyDuringOutage, NotReconnected, DataRace,
}

// Violation is one broken invariant: which, about what, and the evidence.
type Violation struct {
	Kind    Kind   `json:"kind"`
	Subject string `json:"subject"`
	Detail  string `json:"detail"`
}

func (v Violation) String() string { return fmt.Sprintf("%s %s: %s", v.Kind, v.Subject, v.Detail) }

// Event types of the outbox (the producers' names) and the fulfillment
// consumer's vocabulary, as the database stores them.
const (
	evOrderCreated     = "order.created"
	evOrderCancelled   = "order.cancelled"
	evPaymentSucceeded = "payment.succeeded"
	evPaymentFailed    = "payment.failed"
	evRefundSucceeded  = "refund.succeeded"
	subscriberFulfill  = "fulfillment"
	kindReceipt        = "receipt"
	statusSucceeded    = "succeeded"
	statusFailed       = "failed"
	statusPending      = "pending"
	orderCancelled     = "cancelled"
	codeInProgress     = "request_in_progress"
	// A tombstone's recovery point, and the key prefix of the refund that
	// undoes a cancelled payment.
	pointCancelled     = string(idempotency.PointCancelled)
	compensationPrefix = payments.CompensationKeyPrefix
)

// Check returns every violation of the invariants in h, sorted by kind and
// subject. It is a pure function of the history.
func Check(h History) []Violation {
	c := newChecker(h)
	c.ledger()
	c.givenUp()
	c.orders()
	c.refunds()
	c.events()
	if h.Features.Fulfillment {
		c.fulfillment()
	}
	c.settled()
	c.outcomes()
	c.outages()
	if h.DataRaces > 0 {
		c.add(DataRace, "processes", "%d data race report(s) in the logs", h.DataRaces)
	}
	slices.SortFunc(c.out, func(a, b Violation) int {
		return cmp.Or(cmp.Compare(slices.Index(Kinds, a.Kind), slices.Index(Kinds, b.Kind)), cmp.Compare(a.Subject, b.Subject))
	})
	return c.out
}

// checker holds the history's indexes while Check runs.
type checker struct {
	h   History
	out []Violation

	orderByID        map[string]Order
	orderByKey       map[string]Order // tenant/key
	paymentByID      map[string]Payment
	paymentByKey     map[string]Payment
	paymentsOfOrder  map[string][]Payment
	refundByID       map[string]Refund
	refundByKey      map[string]Refund
	refundsOfPayment map[string][]Refund
	chargesOfRef     map[string][]Charge
	chargeByID       map[string]Charge
	ledgerRefunds    map[string][]LedgerRefund // by charge id
	eventsOf         map[string]map[string]int // aggregate id -> type -> count
	records          map[string]Record         // tenant/op/key
	// skipStatus holds orders whose status is not checked because a more
	// specific violation already explains them; skipShipped the same for
	// an order's receipts.
	skipStatus, skipShipped map[string]bool
}

func tk(tenant, key string) string { return tenant + "/" + key }

func newChecker(h History) *checker {
	c := &checker{
		h:                h,
		orderByID:        map[string]Order{},
		orderByKey:       map[string]Order{},
		paymentByID:      map[string]Payment{},
		paymentByKey:     map[string]Payment{},
		paymentsOfOrder:  map[string][]Payment{},
		refundByID:       map[string]Refund{},
		refundByKey:      map[string]Refund{},
		refundsOfPayment: map[string][]Refund{},
		chargesOfRef:     map[string][]Charge{},
		chargeByID:       map[string]Charge{},
		ledgerRefunds:    map[string][]LedgerRefund{},
		eventsOf:         map[string]map[string]int{},
		records:          map[string]Record{},
		skipStatus:       map[string]bool{},
		skipShipped:      map[string]bool{},
	}
	for _, o := range h.DB.Orders {
		c.orderByID[o.ID] = o
		c.orderByKey[tk(o.Tenant, o.Key)] = o
	}
	for _, p := range h.DB.Payments {
		c.paymentByID[p.ID] = p
		c.paymentByKey[tk(p.Tenant, p.Key)] = p
		c.paymentsOfOrder[p.OrderID] = append(c.paymentsOfOrder[p.OrderID], p)
	}
	for _, r := range h.DB.Refunds {
		c.refundByID[r.ID] = r
		c.refundByKey[tk(r.Tenant, r.Key)] = r
		c.refundsOfPayment[r.PaymentID] = append(c.refundsOfPayment[r.PaymentID], r)
	}
	for _, ch := range h.Ledger.Charges {
		c.chargesOfRef[ch.Reference] = append(c.chargesOfRef[ch.Reference], ch)
		c.chargeByID[ch.ID] = ch
	}
	for _, r := range h.Ledger.Refunds {
		c.ledgerRefunds[r.Charge] = append(c.ledgerRefunds[r.Charge], r)
	}
	for _, e := range h.DB.Events {
		m := c.eventsOf[e.AggregateID]
		if m == nil {
			m = map[string]int{}
			c.eventsOf[e.AggregateID] = m
		}
		m[e.Type]++
	}
	for _, r := range h.DB.Records {
		c.records[r.Tenant+"/"+r.Operation+"/"+r.Key] = r
	}
	return c
}

func (c *checker) add(k Kind, subject, format string, args ...any) {
	c.out = append(c.out, Violation{Kind: k, Subject: subject, Detail: fmt.Sprintf(format, args...)})
}

// ledger compares every payment with the provider's charges.
func (c *checker) ledger() {
	for _, ch := range c.h.Ledger.Charges {
		if _, ok := c.paymentByID[ch.Reference]; !ok {
			c.add(ChargeWithoutPayment, "charge "+ch.ID, "%s charge of %d with reference %q (provider key %q) names no payment of ours",
				ch.Status, ch.Amount, ch.Reference, ch.IdempotencyKey)
		}
	}
	for _, o := range c.h.DB.Orders {
		charged, paid := 0, 0
		var ids []string
		for _, p := range c.paymentsOfOrder[o.ID] {
			if p.Status == statusSucceeded {
				paid++
			}
			for _, ch := range c.chargesOfRef[p.ID] {
				if ch.Status == statusSucceeded {
					charged++
					ids = append(ids, ch.ID)
				}
			}
		}
		if charged > 1 || paid > 1 {
			c.add(DoubleCharge, "order "+o.ID, "%d succeeded provider charges %v and %d succeeded payments for one order of %d",
				charged, ids, paid, o.AmountTotal)
			c.skipStatus[o.ID] = true
		}
	}
	for _, o := range c.h.DB.Orders {
		if o.Status != orderCancelled {
			continue
		}
		for _, p := range c.paymentsOfOrder[o.ID] {
			charged := slices.ContainsFunc(c.chargesOfRef[p.ID], func(ch Charge) bool { return ch.Status == statusSucceeded })
			if p.CancelRequested {
				continue // given up by its key: givenUp checks its refund
			}
			if p.Status == statusSucceeded || charged {
				c.add(CancelledCharged, "order "+o.ID, "cancelled, yet its payment %s is %s (a succeeded charge at the provider: %t)", p.ID, p.Status, charged)
				c.skipStatus[o.ID] = true
				break
			}
		}
	}
	for _, p := range c.h.DB.Payments {
		var succeeded []Charge
		for _, ch := range c.chargesOfRef[p.ID] {
			if ch.Status == statusSucceeded {
				succeeded = append(succeeded, ch)
			}
		}
		switch p.Status {
		case statusSucceeded:
			i := slices.IndexFunc(succeeded, func(ch Charge) bool { return ch.ID == p.ChargeID })
			switch {
			case i < 0:
				c.add(ChargeMismatch, "payment "+p.ID, "succeeded with charge %q, but the provider has no succeeded charge %q for it (succeeded charges: %d)",
					p.ChargeID, p.ChargeID, len(succeeded))
				c.skipStatus[p.OrderID] = true
			case succeeded[i].Amount != p.Amount:
				c.add(ChargeMismatch, "payment "+p.ID, "amount %d, but charge %s is of %d", p.Amount, p.ChargeID, succeeded[i].Amount)
			}
		case statusFailed:
			if len(succeeded) > 0 {
				c.add(ChargeMismatch, "payment "+p.ID, "failed, but the provider charged it (%s, %d)", succeeded[0].ID, succeeded[0].Amount)
				c.skipStatus[p.OrderID] = true
			}
		}
	}
}

// orders checks each order's status against its payments and refunds.
func (c *checker) orders() {
	for _, o := range c.h.DB.Orders {
		if c.skipStatus[o.ID] {
			continue
		}
		var paid *Payment
		for _, p := range c.paymentsOfOrder[o.ID] {
			if p.Status == statusSucceeded {
				paid = &p
			}
		}
		var want string
		switch {
		case paid != nil && paid.CancelRequested:
			// Given up while its outcome was unknown: never paid; its
			// charge refunded in full gives the order up.
			want = "awaiting_payment"
			if paid.AmountRefunded == paid.Amount {
				want = orderCancelled
			}
		case paid == nil:
			want = "awaiting_payment cancelled"
		case paid.AmountRefunded == 0:
			want = "paid or fulfilled"
		case paid.AmountRefunded < paid.Amount:
			want = "partially_refunded"
		case paid.AmountRefunded == paid.Amount:
			want = "refunded"
		default:
			continue // refunds beyond the payment: refunds() reports it
		}
		if !strings.Contains(" "+want+" ", " "+o.Status+" ") {
			c.add(OrderStatusMismatch, "order "+o.ID, "status %s, but its payments say %s", o.Status, want)
		}
	}
}

// refunds compares each succeeded payment's refunds with the provider's
// refunds of its charge.
func (c *checker) refunds() {
	for _, p := range c.h.DB.Payments {
		ours := c.refundsOfPayment[p.ID]
		var theirs []LedgerRefund
		if p.ChargeID != "" {
			theirs = c.ledgerRefunds[p.ChargeID]
		}
		if len(ours) == 0 && len(theirs) == 0 && p.AmountRefunded == 0 {
			continue
		}
		var ourSum, theirSum int64
		for _, r := range ours {
			if r.Status == statusSucceeded {
				ourSum += r.Amount
			}
		}
		for _, r := range theirs {
			if r.Status == statusSucceeded {
				theirSum += r.Amount
			}
		}
		if ourSum > p.Amount || theirSum > p.Amount {
			c.add(RefundExceedsPayment, "payment "+p.ID, "payment of %d, refunds of %d in our books and %d at the provider", p.Amount, ourSum, theirSum)
			continue
		}
		var problems []string
		if p.AmountRefunded != ourSum {
			problems = append(problems, fmt.Sprintf("amount_refunded %d but succeeded refunds add up to %d", p.AmountRefunded, ourSum))
		}
		matched := map[string]bool{}
		for _, r := range ours {
			if r.Status != statusSucceeded {
				continue
			}
			i := slices.IndexFunc(theirs, func(l LedgerRefund) bool { return l.ID == r.ProviderRefundID })
			switch {
			case i < 0:
				problems = append(problems, fmt.Sprintf("refund %s (%d) succeeded, the provider has no refund %q", r.ID, r.Amount, r.ProviderRefundID))
			case theirs[i].Amount != r.Amount:
				problems = append(problems, fmt.Sprintf("refund %s is %d, provider refund %s is %d", r.ID, r.Amount, theirs[i].ID, theirs[i].Amount))
			default:
				matched[theirs[i].ID] = true
			}
		}
		for _, l := range theirs {
			if l.Status == statusSucceeded && !matched[l.ID] && !slices.ContainsFunc(ours, func(r Refund) bool { return r.ProviderRefundID == l.ID }) {
				problems = append(problems, fmt.Sprintf("provider refund %s (%d, reference %q) is no succeeded refund of ours", l.ID, l.Amount, l.Reference))
			}
		}
		if len(problems) > 0 {
			c.add(RefundMismatch, "payment "+p.ID, "%s", strings.Join(problems, "; "))
		}
	}
}

// events checks one outbox event per state change, and its publication.
func (c *checker) events() {
	want := func(aggregate, typ string, n int) {
		got := c.eventsOf[aggregate][typ]
		switch {
		case got < n:
			c.add(EventMissing, typ+" "+aggregate, "%d %s event(s), want %d", got, typ, n)
		case got > n:
			c.add(EventDuplicated, typ+" "+aggregate, "%d %s events, want %d", got, typ, n)
		}
	}
	for _, o := range c.h.DB.Orders {
		want(o.ID, evOrderCreated, 1)
		n := 0
		if o.Status == orderCancelled {
			n = 1
		}
		want(o.ID, evOrderCancelled, n)
	}
	for _, p := range c.h.DB.Payments {
		s, f := 0, 0
		switch p.Status {
		case statusSucceeded:
			s = 1
		case statusFailed:
			f = 1
		}
		want(p.ID, evPaymentSucceeded, s)
		want(p.ID, evPaymentFailed, f)
	}
	for _, r := range c.h.DB.Refunds {
		n := 0
		if r.Status == statusSucceeded {
			n = 1
		}
		want(r.ID, evRefundSucceeded, n)
	}
	if !c.h.Features.Dispatcher {
		return
	}
	for _, e := range c.h.DB.Events {
		switch {
		case !e.Published:
			c.add(EventUnpublished, "event "+e.ID, "%s of %s is not published after settling", e.Type, e.AggregateID)
		case c.h.Stream != nil && c.h.Stream.MessageIDs[e.ID] == 0:
			c.add(EventUnpublished, "event "+e.ID, "%s of %s is marked published but the stream has no message with its id", e.Type, e.AggregateID)
		}
	}
}

// fulfillment checks the consumer: every event consumed, one receipt per
// shipped order, stock taken once.
func (c *checker) fulfillment() {
	processed := map[string]bool{}
	for _, p := range c.h.DB.Processed {
		if p.Subscriber == subscriberFulfill {
			processed[p.MessageID] = true
		}
	}
	for _, e := range c.h.DB.Events {
		if (e.Type == evPaymentSucceeded || e.Type == evRefundSucceeded) && !processed[e.ID] {
			c.add(EventUnconsumed, "event "+e.ID, "%s of %s was never processed by %s", e.Type, e.AggregateID, subscriberFulfill)
		}
	}
	receipts := map[string]int{}
	perEvent := map[string]int{}
	for _, n := range c.h.DB.Notifications {
		if n.Kind == kindReceipt {
			receipts[n.OrderID]++
		}
		perEvent[n.EventID]++
	}
	for id, n := range perEvent {
		if n > 1 {
			c.add(FulfillmentMismatch, "event "+id, "%d notifications for one event", n)
		}
	}
	for _, o := range c.h.DB.Orders {
		n := receipts[o.ID]
		switch {
		case c.skipShipped[o.ID]:
		case n > 1:
			c.add(FulfillmentMismatch, "order "+o.ID, "%d receipts: shipped more than once", n)
		case n == 0 && o.Status == "fulfilled":
			c.add(FulfillmentMismatch, "order "+o.ID, "fulfilled without a receipt")
		case n == 1 && (o.Status == "awaiting_payment" || o.Status == "paid" || o.Status == orderCancelled):
			c.add(FulfillmentMismatch, "order "+o.ID, "a receipt, but the order is %s", o.Status)
		}
	}
	shipped := map[string]int64{} // tenant/sku -> quantity
	for _, it := range c.h.DB.OrderItems {
		o, ok := c.orderByID[it.OrderID]
		if ok && receipts[o.ID] > 0 {
			shipped[tk(o.Tenant, it.SKU)] += it.Quantity * int64(receipts[o.ID])
		}
	}
	before := map[string]int64{}
	for _, s := range c.h.DB.StockBefore {
		before[tk(s.Tenant, s.SKU)] = s.Stock
	}
	for _, s := range c.h.DB.StockAfter {
		k := tk(s.Tenant, s.SKU)
		if b, ok := before[k]; ok && b-shipped[k] != s.Stock {
			c.add(StockMismatch, "product "+k, "stock %d before, %d shipped, %d after (want %d)", b, shipped[k], s.Stock, b-shipped[k])
		}
	}
}

// settled checks that nothing was left pending.
func (c *checker) settled() {
	for _, p := range c.h.DB.Payments {
		if p.Status == statusPending {
			c.add(Unsettled, "payment "+p.ID, "still pending after settling (key %s)", p.Key)
		}
	}
	for _, r := range c.h.DB.Refunds {
		if r.Status == statusPending {
			c.add(Unsettled, "refund "+r.ID, "still pending after settling (key %s)", r.Key)
		}
	}
	for _, r := range c.h.DB.Records {
		if r.State == statusPending && r.Operation != OpOrder {
			if _, ok := c.paymentByKey[tk(r.Tenant, r.Key)]; ok && r.Operation == OpPay && c.paymentByKey[tk(r.Tenant, r.Key)].Status == statusPending {
				continue // reported as the pending payment
			}
			if _, ok := c.refundByKey[tk(r.Tenant, r.Key)]; ok && r.Operation == OpRefund && c.refundByKey[tk(r.Tenant, r.Key)].Status == statusPending {
				continue
			}
			c.add(Unsettled, "record "+r.Operation+" "+r.Key, "idempotency record still pending after settling")
		}
	}
	for _, id := range c.h.DB.UnprocessedWebhooks {
		c.add(WebhookUnprocessed, "webhook "+id, "received but never applied")
	}
}
