// Package fulfillment is the demo consumer of the event stream: when a
// payment succeeds it takes the order's items out of stock, marks the order
// fulfilled and records a receipt; when a refund succeeds it records a
// refund notice.
//
// A consumer records the message id in its own transaction, and that, not
// the broker's deduplication, makes a duplicate harmless. Every message is
// handled in one transaction that first claims the message id in the inbox
// (internal/inbox) and then does the work; the ack is sent only after that
// transaction committed. A message that arrives again (JetStream redelivers
// when the consumer committed and died before its ack; the outbox publishes
// again after a dispatcher crash or beyond the duplicate window; an
// operator replays it) finds its inbox row, commits nothing, and is acked.
//
// The orders package owns stock and the order's status: fulfillment asks it
// to ship (orders.Service.Ship, in the consumer's transaction), which takes
// every line out of stock and marks the order fulfilled, or, when any line
// is short, takes nothing and leaves the order paid; fulfillment then
// records the receipt or a backorder notice. Stock never goes negative. Only
// a paid order ships: the status moves forward only, so an order refunded
// before its payment.succeeded arrived is not shipped, and the status is a
// business-level guard that outlives the inbox's retention.
//
// Fulfillment owns the notifications it records; no other package touches
// that table: its queries are in internal/fulfillment/internal/dbsqlc.
package fulfillment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/broker"
	"github.com/oncepay/oncepay/internal/fulfillment/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/tracing"
)

// Subscriber names this consumer in the inbox and is its durable name.
const Subscriber = "fulfillment"

// The event types fulfillment acts on. They are the producer's names
// (payments.EventPaymentSucceeded and payments.EventRefundSucceeded; a test
// keeps them equal): a consumer reads the contract, it does not import the
// producer.
const (
	EventPaymentSucceeded = "payment.succeeded"
	EventRefundSucceeded  = "refund.succeeded"
)

// Outcome says what processing a message did.
type Outcome string

// Outcomes of Process.
const (
	// Fulfilled: stock taken, order fulfilled, receipt recorded.
	Fulfilled Outcome = "fulfilled"
	// Backordered: stock did not suffice; nothing taken, the order stays
	// paid, a backorder notice recorded.
	Backordered Outcome = "backordered"
	// RefundNoted: a refund notice recorded.
	RefundNoted Outcome = "refund_noted"
	// Skipped: the order is not paid (already fulfilled, or refunded
	// first); nothing to do.
	Skipped Outcome = "skipped"
	// Ignored: an event type fulfillment does not act on (the consumer's
	// filter normally keeps them away).
	Ignored Outcome = "ignored"
	// Duplicate: the inbox already had the message id; nothing done.
	Duplicate Outcome = "duplicate"
)

// Notification kinds (notifications.kind).
const (
	KindReceipt   = "receipt"
	KindBackorder = "backorder"
	KindRefund    = "refund"
)

// config is what the options tune. Zero values take the defaults the
// options name (withDefaults); the durable consumer is declared with them
// (see ConsumerConfig).
type config struct {
	ackWait        time.Duration
	maxDeliver     int
	maxAckPending  int
	workers        int
	processTimeout time.Duration
}

func (c config) withDefaults() config {
	if c.ackWait <= 0 {
		c.ackWait = 30 * time.Second
	}
	if c.maxDeliver == 0 {
		c.maxDeliver = 10
	}
	if c.maxAckPending <= 0 {
		c.maxAckPending = 1000
	}
	if c.workers <= 0 {
		c.workers = 4
	}
	if c.processTimeout <= 0 {
		c.processTimeout = 10 * time.Second
	}
	return c
}

// Hooks inject faults for the failure drills (WithHooks). Only tests set
// them: production code never does.
type Hooks struct {
	// AfterCommit runs after a message's transaction committed (or found a
	// duplicate) and before the ack. An error skips the ack, as a crash
	// would: JetStream delivers the message again after the ack wait
	// (WithAckWait).
	AfterCommit func(messageID string, outcome Outcome) error
}

// Consumer is the fulfillment consumer.
type Consumer struct {
	pool   *pgxpool.Pool
	js     jetstream.JetStream
	orders *orders.Service
	cfg    config
	logger *slog.Logger
	now    func() time.Time
	// observe sees every processed message (WithCommitObserver).
	observe func(messageID string, outcome Outcome)
	hooks   Hooks
	// tracer starts the span of each delivery (WithTracerProvider).
	tracer trace.Tracer
}

// ConsumerOption configures a Consumer. An option given a value that is
// not positive keeps its default, except WithMaxDeliver.
type ConsumerOption func(*Consumer)

// WithAckWait is how long JetStream waits for an ack before it delivers the
// message again (default 30s). A handler that commits and dies before its
// ack is redelivered after it.
func WithAckWait(d time.Duration) ConsumerOption { return func(c *Consumer) { c.cfg.ackWait = d } }

// WithMaxDeliver bounds the deliveries of one message (default 10; zero
// keeps the default, a negative n sets no bound). A message that failed
// that often is logged as an error and left in the stream; after the cause
// is fixed, an operator replays its event.
func WithMaxDeliver(n int) ConsumerOption { return func(c *Consumer) { c.cfg.maxDeliver = n } }

// WithMaxAckPending bounds unacknowledged messages in flight (default
// 1000).
func WithMaxAckPending(n int) ConsumerOption { return func(c *Consumer) { c.cfg.maxAckPending = n } }

// WithWorkers is the number of messages processed concurrently (default 4):
// as many workers share the consumer's pull subscription.
func WithWorkers(n int) ConsumerOption { return func(c *Consumer) { c.cfg.workers = n } }

// WithProcessTimeout bounds one message's transaction (default 10s).
func WithProcessTimeout(d time.Duration) ConsumerOption {
	return func(c *Consumer) { c.cfg.processTimeout = d }
}

// WithCommitObserver reports every processed message with its outcome
// after its transaction committed (or found a duplicate) and before the
// ack, e.g. to metrics (default none). It is called from the workers
// (concurrently) and must not block.
func WithCommitObserver(fn func(messageID string, outcome Outcome)) ConsumerOption {
	return func(c *Consumer) {
		if fn != nil {
			c.observe = fn
		}
	}
}

// WithTracerProvider traces every delivery with tp: a consumer span that
// continues the trace the message's headers carry (the request's, through
// the outbox), with what the consumer did and, for a duplicate, the inbox's
// event (default none: tracing.Disabled).
func WithTracerProvider(tp trace.TracerProvider) ConsumerOption {
	return func(c *Consumer) { c.tracer = tp.Tracer(instrumentation) }
}

// instrumentation names this package's spans' instrumentation scope.
const instrumentation = "github.com/oncepay/oncepay/internal/fulfillment"

// WithHooks injects faults for the failure drills (Hooks). Only tests set
// it: production code never does (default none).
func WithHooks(h Hooks) ConsumerOption { return func(c *Consumer) { c.hooks = h } }

// New returns the consumer, which ships orders through orderSvc, with the
// defaults each option names unless opts say otherwise. Declare it at
// start; Run consumes.
func New(pool *pgxpool.Pool, js jetstream.JetStream, orderSvc *orders.Service, logger *slog.Logger, now func() time.Time, opts ...ConsumerOption) *Consumer {
	c := &Consumer{pool: pool, js: js, orders: orderSvc, logger: logger, now: now, observe: func(string, Outcome) {},
		tracer: tracing.Disabled().Tracer(instrumentation)}
	for _, o := range opts {
		o(c)
	}
	c.cfg = c.cfg.withDefaults()
	return c
}

// ConsumerConfig is the durable pull consumer on broker.StreamEvents:
// explicit acks, the ack wait, deliveries and pending acks of the options
// (WithAckWait, WithMaxDeliver, WithMaxAckPending), filtered to
// the two event types, delivering everything from the start of the stream
// when it is first created.
func (c *Consumer) ConsumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:     Subscriber,
		Description: "fulfillment: stock, order status and notifications; inbox-deduplicated",
		FilterSubjects: []string{
			broker.Subject(EventPaymentSucceeded),
			broker.Subject(EventRefundSucceeded),
		},
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.cfg.ackWait,
		MaxDeliver:    c.cfg.maxDeliver,
		MaxAckPending: c.cfg.maxAckPending,
	}
}

// Declare creates the durable consumer or updates it to ConsumerConfig. It
// is idempotent; call it at start, after broker.EnsureStreams.
func (c *Consumer) Declare(ctx context.Context) (jetstream.Consumer, error) {
	cons, err := c.js.CreateOrUpdateConsumer(ctx, broker.StreamEvents, c.ConsumerConfig())
	if err != nil {
		return nil, fmt.Errorf("declare consumer %s on %s: %w", Subscriber, broker.StreamEvents, err)
	}
	return cons, nil
}

// Message is an event as the consumer reads it from the broker.
type Message struct {
	// ID is the event id (Nats-Msg-Id), the inbox key.
	ID       string
	Type     string
	TenantID uuid.UUID
	Payload  []byte
}

// permanentError marks a message that no retry can process (a malformed
// payload, an order that does not exist): it is terminated, not redelivered.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

func permanent(format string, args ...any) error {
	return &permanentError{err: fmt.Errorf(format, args...)}
}

// Process handles one message in one transaction: the inbox claim first,
// then the effect, committed together. It returns Duplicate, with nothing
// changed, for a message id processed before.
func (c *Consumer) Process(ctx context.Context, m Message) (Outcome, error) {
	var outcome Outcome
	err := postgres.InTx(ctx, c.pool, func(tx pgx.Tx) error {
		first, err := inbox.Claim(ctx, tx, m.TenantID, Subscriber, m.ID)
		if err != nil {
			return err
		}
		if !first {
			// The transaction changed nothing; committing it is committing
			// nothing.
			outcome = Duplicate
			return nil
		}
		switch m.Type {
		case EventPaymentSucceeded:
			outcome, err = c.fulfill(ctx, tx, m)
		case EventRefundSucceeded:
			outcome, err = c.noteRefund(ctx, tx, m)
		default:
			outcome = Ignored
		}
		return err
	})
	if err != nil {
		return "", err
	}
	return outcome, nil
}

// The parts of the producers' payloads fulfillment reads.
type (
	paymentPayload struct {
		ID      uuid.UUID `json:"id"`
		OrderID uuid.UUID `json:"order_id"`
	}
	refundPayload struct {
		OrderID        uuid.UUID `json:"order_id"`
		PaymentID      uuid.UUID `json:"payment_id"`
		AmountRefunded int64     `json:"amount_refunded"`
		PaymentAmount  int64     `json:"payment_amount"`
		Refund         struct {
			ID     uuid.UUID `json:"id"`
			Amount int64     `json:"amount"`
		} `json:"refund"`
	}
)

// Notification bodies: our own wire types, never generated rows.
type (
	receiptJSON struct {
		OrderID   uuid.UUID  `json:"order_id"`
		PaymentID uuid.UUID  `json:"payment_id"`
		Amount    int64      `json:"amount"`
		Currency  string     `json:"currency"`
		Items     []lineJSON `json:"items"`
	}
	lineJSON struct {
		SKU      string `json:"sku"`
		Name     string `json:"name,omitempty"`
		Quantity int32  `json:"quantity"`
		InStock  *int64 `json:"in_stock,omitempty"`
	}
	backorderJSON struct {
		OrderID uuid.UUID  `json:"order_id"`
		Short   []lineJSON `json:"short"`
	}
	refundJSON struct {
		OrderID        uuid.UUID `json:"order_id"`
		PaymentID      uuid.UUID `json:"payment_id"`
		RefundID       uuid.UUID `json:"refund_id"`
		Amount         int64     `json:"amount"`
		AmountRefunded int64     `json:"amount_refunded"`
		Full           bool      `json:"full"`
	}
)

// fulfill ships a paid order or backorders it, through the orders package,
// which owns stock and the order's status; fulfillment records the notice.
func (c *Consumer) fulfill(ctx context.Context, tx pgx.Tx, m Message) (Outcome, error) {
	var p paymentPayload
	if err := json.Unmarshal(m.Payload, &p); err != nil || p.OrderID == uuid.Nil {
		return "", permanent("payment.succeeded %s: payload has no order_id: %v", m.ID, err)
	}
	sh, err := c.orders.Ship(ctx, tx, m.TenantID, p.OrderID)
	switch {
	case errors.Is(err, orders.ErrNotFound):
		return "", permanent("payment.succeeded %s: tenant %s has no order %s", m.ID, m.TenantID, p.OrderID)
	case errors.Is(err, orders.ErrNoLines):
		return "", permanent("payment.succeeded %s: %v", m.ID, err)
	case err != nil:
		return "", err
	}
	order := sh.Order
	switch sh.Result {
	case orders.NotPaid:
		c.logger.InfoContext(ctx, "order not fulfilled: it is not paid", "event_id", m.ID, "order_id", order.ID, "status", order.Status)
		return Skipped, nil
	case orders.Backordered:
		short := make([]lineJSON, len(sh.Short))
		for i, l := range sh.Short {
			short[i] = lineJSON{SKU: l.SKU, Quantity: l.Quantity, InStock: &l.InStock}
		}
		if err := c.notify(ctx, tx, order, m, KindBackorder, backorderJSON{OrderID: order.ID, Short: short}); err != nil {
			return "", err
		}
		c.logger.WarnContext(ctx, "order backordered: not enough stock", "event_id", m.ID, "order_id", order.ID, "short_lines", len(short))
		return Backordered, nil
	}
	lines := make([]lineJSON, len(sh.Lines))
	for i, l := range sh.Lines {
		lines[i] = lineJSON{SKU: l.SKU, Name: l.Name, Quantity: l.Quantity}
	}
	return Fulfilled, c.notify(ctx, tx, order, m, KindReceipt, receiptJSON{
		OrderID: order.ID, PaymentID: p.ID, Amount: order.AmountTotal, Currency: order.Currency, Items: lines,
	})
}

// noteRefund records a refund notice. The payments service already moved
// the order to (partially_)refunded in the refund's own transaction.
func (c *Consumer) noteRefund(ctx context.Context, tx pgx.Tx, m Message) (Outcome, error) {
	var p refundPayload
	if err := json.Unmarshal(m.Payload, &p); err != nil || p.OrderID == uuid.Nil {
		return "", permanent("refund.succeeded %s: payload has no order_id: %v", m.ID, err)
	}
	order, err := c.orders.GetTx(ctx, tx, m.TenantID, p.OrderID)
	if errors.Is(err, orders.ErrNotFound) {
		return "", permanent("refund.succeeded %s: tenant %s has no order %s", m.ID, m.TenantID, p.OrderID)
	}
	if err != nil {
		return "", err
	}
	return RefundNoted, c.notify(ctx, tx, order, m, KindRefund, refundJSON{
		OrderID: order.ID, PaymentID: p.PaymentID, RefundID: p.Refund.ID, Amount: p.Refund.Amount,
		AmountRefunded: p.AmountRefunded, Full: p.AmountRefunded == p.PaymentAmount,
	})
}

func (c *Consumer) notify(ctx context.Context, tx pgx.Tx, order orders.Order, m Message, kind string, body any) error {
	id, err := uuid.NewV7()
	if err != nil {
		return fmt.Errorf("notification id: %w", err)
	}
	eventID, err := uuid.Parse(m.ID)
	if err != nil {
		return permanent("message id %q is not an event id: %v", m.ID, err)
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("encode %s notification: %w", kind, err)
	}
	err = dbsqlc.New(tx).NotificationInsert(ctx, dbsqlc.NotificationInsertParams{
		ID: id, TenantID: order.TenantID, OrderID: order.ID, Kind: kind, EventID: eventID, Body: raw, CreatedAt: c.nowUTC(),
	})
	if err != nil {
		return fmt.Errorf("record %s notification for order %s: %w", kind, order.ID, err)
	}
	return nil
}

func (c *Consumer) nowUTC() time.Time { return c.now().UTC().Truncate(time.Microsecond) }
