package fulfillment_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/broker"
	"github.com/oncepay/oncepay/internal/broker/brokertest"
	"github.com/oncepay/oncepay/internal/fulfillment"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/testkit"
)

// testBundle is the pipeline end to end on one database and one embedded
// JetStream: outbox rows, the dispatcher, the stream, the fulfillment
// consumer, and the recorder of what the consumer did.
type testBundle struct {
	pool     *pgxpool.Pool
	nats     *brokertest.Bundle
	logger   *slog.Logger
	clock    *testkit.Clock
	rec      *recorder
	tenantID uuid.UUID
}

// recorder is the consumer's AfterCommit hook: it records every outcome by
// message id, and drops acks when told to (a crash between commit and ack).
type recorder struct {
	mu       sync.Mutex
	outcomes map[string][]fulfillment.Outcome
	dropAcks int
}

func (r *recorder) afterCommit(id string, o fulfillment.Outcome) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outcomes[id] = append(r.outcomes[id], o)
	if r.dropAcks > 0 {
		r.dropAcks--
		return fmt.Errorf("crash before ack of %s", id)
	}
	return nil
}

func (r *recorder) get(id uuid.UUID) []fulfillment.Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.outcomes[id.String()])
}

func (r *recorder) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, o := range r.outcomes {
		n += len(o)
	}
	return n
}

// Products of the test tenant and their initial stock.
const (
	skuMug    = "mug"
	skuKettle = "kettle"
	mugStock  = 10
)

func setup(t *testing.T, streams broker.StreamsConfig) *testBundle {
	t.Helper()
	b := &testBundle{
		pool:  testkit.Pool(t),
		clock: testkit.NewClock(),
		rec:   &recorder{outcomes: make(map[string][]fulfillment.Outcome)},
	}
	b.nats = brokertest.Start(t, streams)
	b.logger = b.nats.Logger
	b.tenantID = testkit.NewTenant(t, b.pool).ID
	// The catalog is the orders feature's table; no service method sets
	// a product's stock, which these tests need small.
	if _, err := b.pool.Exec(context.Background(), `INSERT INTO products (tenant_id, sku, name, unit_amount, currency, stock)
		VALUES ($1, $2, 'Mug', 1500, 'EUR', $3), ($1, $4, 'Kettle', 5900, 'EUR', 1000)`,
		b.tenantID, skuMug, mugStock, skuKettle); err != nil {
		t.Fatalf("insert products: %v", err)
	}
	return b
}

// dispatcher returns a dispatcher that reacts within milliseconds (opts
// come after, so they override that), closed when the test ends.
func (b *testBundle) dispatcher(t *testing.T, opts ...outbox.DispatcherOption) *outbox.Dispatcher {
	t.Helper()
	opts = append([]outbox.DispatcherOption{
		outbox.WithPollInterval(50 * time.Millisecond),
		outbox.WithPublishTimeout(500 * time.Millisecond),
		outbox.WithBackoff(20*time.Millisecond, 200*time.Millisecond),
		outbox.WithMaxAttempts(1000),
	}, opts...)
	d, err := outbox.NewDispatcher(b.pool, b.nats.JS, b.logger, b.clock.Now, opts...)
	if err != nil {
		t.Fatalf("new dispatcher: %v", err)
	}
	t.Cleanup(d.Close)
	return d
}

// runDispatcher runs a fast dispatcher until the test ends.
func (b *testBundle) runDispatcher(t *testing.T) {
	t.Helper()
	d := b.dispatcher(t)
	runUntilCleanup(t, d.Run)
}

// newOrderService is the orders feature the consumer ships through.
func newOrderService(pool *pgxpool.Pool, logger *slog.Logger, now func() time.Time) *orders.Service {
	store := idempotency.NewStore(operation.PolicyOf(orders.Specs()), now, idempotency.WithLease(30*time.Second))
	return orders.NewService(pool, operation.NewRunner(pool, store, logger), now)
}

// runConsumer declares the consumer, built with opts and the recorder's
// hook, and runs it until the test ends.
func (b *testBundle) runConsumer(t *testing.T, opts ...fulfillment.ConsumerOption) *fulfillment.Consumer {
	t.Helper()
	opts = append(opts, fulfillment.WithHooks(fulfillment.Hooks{AfterCommit: b.rec.afterCommit}))
	c := fulfillment.New(b.pool, b.nats.JS, newOrderService(b.pool, b.logger, b.clock.Now), b.logger, b.clock.Now, opts...)
	if _, err := c.Declare(context.Background()); err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, c.Run)
	return c
}

func runUntilCleanup(t *testing.T, fn func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
}

type line struct {
	sku string
	qty int
}

// paidOrder commits what the payments service commits when a charge
// succeeds: a paid order and its payment.succeeded event, in one
// transaction. It returns the order and event ids.
func (b *testBundle) paidOrder(t *testing.T, lines ...line) (orderID, eventID uuid.UUID) {
	t.Helper()
	return b.paidOrderIn(context.Background(), t, lines...)
}

// paidOrderIn is paidOrder committed in ctx: inside ctx's span, the event
// stores its trace context.
func (b *testBundle) paidOrderIn(ctx context.Context, t *testing.T, lines ...line) (orderID, eventID uuid.UUID) {
	t.Helper()
	orderID, paymentID := uuid.New(), uuid.New()
	err := postgres.InTx(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, tenant_id, idempotency_key, request_hash, status, currency, amount_total, created_at, updated_at)
			VALUES ($1, $2, $3, '\x00', 'paid', 'EUR', 1000, now(), now())`, orderID, b.tenantID, "order-"+orderID.String()); err != nil {
			return err
		}
		for i, l := range lines {
			if _, err := tx.Exec(ctx, `INSERT INTO order_items (tenant_id, order_id, line, sku, name, quantity, unit_amount, amount)
				VALUES ($5, $1, $2, $3, $3, $4, 100, 100 * $4)`, orderID, i+1, l.sku, l.qty, b.tenantID); err != nil {
				return err
			}
		}
		var err error
		eventID, err = outbox.Append(ctx, tx, outbox.Event{
			TenantID: b.tenantID, Type: fulfillment.EventPaymentSucceeded, AggregateType: "payment", AggregateID: paymentID,
			IdempotencyKey: "pay-" + orderID.String(), OccurredAt: b.clock.Now(),
			Payload: map[string]any{"id": paymentID, "order_id": orderID, "status": "succeeded", "amount": 1000, "currency": "EUR"},
		})
		return err
	})
	if err != nil {
		t.Fatalf("commit paid order: %v", err)
	}
	return orderID, eventID
}

// refundEvent commits a refund.succeeded event for orderID.
func (b *testBundle) refundEvent(t *testing.T, orderID uuid.UUID, amount, refunded, paid int64) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	refundID := uuid.New()
	err := postgres.InTx(context.Background(), b.pool, func(tx pgx.Tx) error {
		var err error
		id, err = outbox.Append(context.Background(), tx, outbox.Event{
			TenantID: b.tenantID, Type: fulfillment.EventRefundSucceeded, AggregateType: "refund", AggregateID: refundID,
			IdempotencyKey: "refund-" + refundID.String(), OccurredAt: b.clock.Now(),
			Payload: map[string]any{
				"refund":     map[string]any{"id": refundID, "amount": amount, "status": "succeeded"},
				"payment_id": uuid.New(), "order_id": orderID, "amount_refunded": refunded, "payment_amount": paid,
			},
		})
		return err
	})
	if err != nil {
		t.Fatalf("commit refund event: %v", err)
	}
	return id
}

func (b *testBundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("count %q: %v", query, err)
	}
	return n
}

func (b *testBundle) stock(t *testing.T, sku string) int {
	return b.count(t, `SELECT stock FROM products WHERE tenant_id = $1 AND sku = $2`, b.tenantID, sku)
}

func (b *testBundle) status(t *testing.T, orderID uuid.UUID) string {
	t.Helper()
	var s string
	if err := b.pool.QueryRow(context.Background(), `SELECT status FROM orders WHERE id = $1`, orderID).Scan(&s); err != nil {
		t.Fatalf("order status: %v", err)
	}
	return s
}

func (b *testBundle) notifications(t *testing.T, orderID uuid.UUID, kind string) int {
	return b.count(t, `SELECT count(*) FROM notifications WHERE order_id = $1 AND kind = $2`, orderID, kind)
}

// settled waits until the consumer has nothing pending or unacknowledged.
func (b *testBundle) settled(t *testing.T) {
	t.Helper()
	testkit.WaitFor(t, 20*time.Second, "the consumer to have nothing pending", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := b.nats.JS.Consumer(ctx, broker.StreamEvents, fulfillment.Subscriber)
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
}

func outcomesEqual(got []fulfillment.Outcome, want ...fulfillment.Outcome) bool {
	return slices.Equal(got, want)
}
