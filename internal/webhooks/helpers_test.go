package webhooks_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/httpapi"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/testkit"
	"github.com/oncepay/oncepay/internal/webhooks"
	"github.com/oncepay/oncepay/proving/pspsim"
)

// newClock returns the webhook tests' clock: stopped, so that a delivery
// stamped now is exactly as old as the test says when it is verified.
func newClock() *testkit.Clock {
	return testkit.StoppedClock(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))
}

// secret returns a whsec_ secret and its key bytes, built from seed.
func secret(t testing.TB, seed string) (string, []byte) {
	t.Helper()
	s := "whsec_" + base64.StdEncoding.EncodeToString([]byte(seed+"-0123456789abcdef"))
	key, err := pspsim.ParseWebhookSecret(s)
	if err != nil {
		t.Fatalf("parse test secret: %v", err)
	}
	return s, key
}

// bundle is a receiver served over loopback HTTP and a worker, on a fresh
// database. The verifier accepts the current and the old secret.
type bundle struct {
	pool    *pgxpool.Pool
	clock   *testkit.Clock
	worker  *webhooks.Worker
	url     string
	client  *http.Client
	current []byte
	old     []byte
	unknown []byte
	// notified counts the receiver's wake-ups of the worker (WithNotify).
	notified *atomic.Int64
}

func setup(t *testing.T) *bundle {
	t.Helper()
	pool := testkit.Pool(t)
	clk := newClock()
	logger := testkit.Logger(t)
	curSecret, cur := secret(t, "current")
	oldSecret, old := secret(t, "old")
	_, unknown := secret(t, "unknown")
	v, err := webhooks.NewVerifier([]string{curSecret, oldSecret}, clk.Now, webhooks.WithTolerance(5*time.Minute))
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	worker := newWorker(pool, clk, logger)
	notified := new(atomic.Int64)
	recv := webhooks.NewReceiver(pool, v, logger, clk.Now, webhooks.WithNotify(func() {
		notified.Add(1)
		worker.Notify()
	}))

	e := echo.New()
	e.HideBanner = true
	e.HTTPErrorHandler = httpapi.ErrorHandler(logger)
	e.POST("/webhooks/psp", recv.Handle)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &bundle{
		pool: pool, clock: clk, worker: worker, url: srv.URL + "/webhooks/psp",
		client: &http.Client{Timeout: 30 * time.Second}, current: cur, old: old, unknown: unknown, notified: notified,
	}
}

// newWorker returns a worker with its own payments service, as another
// process would have. The provider is never called on the worker's path.
func newWorker(pool *pgxpool.Pool, clk *testkit.Clock, logger *slog.Logger) *webhooks.Worker {
	store := idempotency.NewStore(operation.PolicyOf(orders.Specs(), payments.Specs()), clk.Now, idempotency.WithLease(30*time.Second))
	ops := operation.NewRunner(pool, store, logger)
	svc := payments.NewService(pool, ops, orders.NewService(pool, ops, clk.Now),
		payments.NewProvider("http://127.0.0.1:1", payments.WithTimeout(time.Second)), logger, clk.Now)
	return webhooks.NewWorker(pool, svc, logger, clk.Now)
}

// post sends body with exactly the given webhook headers.
func (b *bundle) post(t *testing.T, header map[string]string, body []byte) testkit.Response {
	t.Helper()
	r, err := b.try(header, body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// try is post for goroutines other than the test's: it returns the error.
func (b *bundle) try(header map[string]string, body []byte) (testkit.Response, error) {
	req, err := http.NewRequest(http.MethodPost, b.url, bytes.NewReader(body))
	if err != nil {
		return testkit.Response{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return testkit.Send(b.client, req)
}

// signedHeaders returns the headers of a delivery stamped ts and signed with
// every key.
func signedHeaders(id string, ts int64, body []byte, keys ...[]byte) map[string]string {
	sigs := make([]string, len(keys))
	for i, k := range keys {
		sigs[i] = pspsim.SignWebhook(k, id, ts, body)
	}
	return map[string]string{
		webhooks.HeaderID:        id,
		webhooks.HeaderTimestamp: strconv.FormatInt(ts, 10),
		webhooks.HeaderSignature: strings.Join(sigs, " "),
	}
}

// deliver sends body as delivery id, stamped now and signed with the current
// secret, as the provider does.
func (b *bundle) deliver(t *testing.T, id string, body []byte) testkit.Response {
	t.Helper()
	return b.post(t, signedHeaders(id, b.clock.Now().Unix(), body, b.current), body)
}

// wantReceived fails unless r accepted the delivery with the given
// duplicate flag.
func wantReceived(t *testing.T, r testkit.Response, duplicate bool) {
	t.Helper()
	if r.Status != http.StatusOK {
		t.Fatalf("status = %d, want 200; body %s", r.Status, r.Body)
	}
	var got struct {
		Received  *bool `json:"received"`
		Duplicate *bool `json:"duplicate"`
	}
	if err := json.Unmarshal(r.Body, &got); err != nil {
		t.Fatalf("decode %s: %v", r.Body, err)
	}
	if got.Received == nil || !*got.Received || got.Duplicate == nil || *got.Duplicate != duplicate {
		t.Fatalf("answer = %s, want received true, duplicate %v", r.Body, duplicate)
	}
}

func (b *bundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("count %q: %v", query, err)
	}
	return n
}

func (b *bundle) str(t *testing.T, query string, args ...any) string {
	t.Helper()
	var s string
	if err := b.pool.QueryRow(context.Background(), query, args...).Scan(&s); err != nil {
		t.Fatalf("query %q: %v", query, err)
	}
	return s
}

func (b *bundle) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	if _, err := b.pool.Exec(context.Background(), query, args...); err != nil {
		t.Fatalf("exec %q: %v", query, err)
	}
}

func (b *bundle) processOnce(t *testing.T, limit int) int {
	t.Helper()
	n, err := b.worker.ProcessOnce(context.Background(), limit)
	if err != nil {
		t.Fatalf("ProcessOnce: %v", err)
	}
	return n
}

const paymentAmount = 5000

// fixture is one order with one payment.
type fixture struct {
	tenant  uuid.UUID
	order   uuid.UUID
	payment uuid.UUID
}

// payment inserts a tenant, an order and a payment in the given status (the
// order is paid when the payment succeeded, awaiting payment otherwise).
func (b *bundle) payment(t *testing.T, status payments.Status) fixture {
	t.Helper()
	f := fixture{tenant: testkit.NewTenant(t, b.pool).ID, order: uuid.New(), payment: uuid.New()}
	now := b.clock.Now()
	orderStatus := "awaiting_payment"
	var chargeID *string
	if status == payments.StatusSucceeded {
		orderStatus = "paid"
		id := chargeIDOf(f.payment)
		chargeID = &id
	}
	b.exec(t, `INSERT INTO orders (id, tenant_id, idempotency_key, request_hash, status, currency, amount_total, created_at, updated_at)
		VALUES ($1, $2, 'order-key', '\x00', $3, 'EUR', $4, $5, $5)`, f.order, f.tenant, orderStatus, paymentAmount, now)
	b.exec(t, `INSERT INTO payments (id, tenant_id, order_id, idempotency_key, request_hash, provider_key, status, amount, currency, payment_method, provider_charge_id, created_at, updated_at)
		VALUES ($1, $2, $3, 'pay-key', '\x00', $4, $5, $6, 'EUR', 'pm_card_visa', $7, $8, $8)`,
		f.payment, f.tenant, f.order, "pk_"+f.payment.String(), status, paymentAmount, chargeID, now)
	return f
}

// pendingRefund inserts a pending refund of the whole (succeeded) payment;
// reserve says whether the payment reserves its amount, as phase 1 does.
func (b *bundle) pendingRefund(t *testing.T, f fixture, reserve bool) uuid.UUID {
	t.Helper()
	id := uuid.New()
	b.exec(t, `INSERT INTO refunds (id, tenant_id, payment_id, idempotency_key, request_hash, provider_key, status, amount, created_at, updated_at)
		VALUES ($1, $2, $3, 'refund-key', '\x00', $4, 'pending', $5, $6, $6)`, id, f.tenant, f.payment, "rk_"+id.String(), paymentAmount, b.clock.Now())
	if reserve {
		b.exec(t, `UPDATE payments SET refund_reserved = amount WHERE id = $1`, f.payment)
	}
	return id
}

func chargeIDOf(payment uuid.UUID) string {
	return "ch_" + strings.ReplaceAll(payment.String(), "-", "")
}

// chargeEvent is a provider event about the charge of payment (tenant and
// reference are what goes in its metadata).
func chargeEvent(t *testing.T, typ string, tenant uuid.UUID, reference string, chargeID string, created int64) []byte {
	t.Helper()
	status := payments.StatusSucceeded
	var failure any
	if typ == webhooks.EventChargeFailed {
		status, failure = payments.StatusFailed, "card_declined"
	}
	return mustJSON(t, map[string]any{
		"id": "evt_" + uuid.NewString(), "type": typ, "created": created,
		"data": map[string]any{"object": map[string]any{
			"id": chargeID, "amount": paymentAmount, "currency": "EUR", "status": status,
			"failure_code": failure, "amount_refunded": 0, "metadata": map[string]string{"tenant_id": tenant.String(), "reference": reference},
		}},
	})
}

// refundEvent is the provider's charge.refunded for a refund of f's payment.
func refundEvent(t *testing.T, f fixture, reference string, created int64) []byte {
	t.Helper()
	return mustJSON(t, map[string]any{
		"id": "evt_" + uuid.NewString(), "type": webhooks.EventChargeRefunded, "created": created,
		"data": map[string]any{
			"object": map[string]any{
				"id": chargeIDOf(f.payment), "amount": paymentAmount, "currency": "EUR", "status": "succeeded",
				"amount_refunded": paymentAmount, "metadata": map[string]string{"tenant_id": f.tenant.String(), "reference": f.payment.String()},
			},
			"refund": map[string]any{
				"id": "re_" + uuid.NewString(), "charge": chargeIDOf(f.payment), "amount": paymentAmount,
				"status": "succeeded", "metadata": map[string]string{"tenant_id": f.tenant.String(), "reference": reference},
			},
		},
	})
}

// withMember returns the JSON object body with the member at path (object
// keys, outermost first) set to v.
func withMember(t testing.TB, body []byte, path []string, v any) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	obj := m
	for _, k := range path[:len(path)-1] {
		obj = obj[k].(map[string]any)
	}
	obj[path[len(path)-1]] = v
	return mustJSON(t, m)
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// state is what the tests check of one fixture.
type state struct {
	payment          payments.Status
	order            string
	succeeded        int // payment.succeeded events
	failed           int // payment.failed events
	refundsSucceeded int // refund.succeeded events
}

func (b *bundle) state(t *testing.T, f fixture) state {
	t.Helper()
	var s state
	err := b.pool.QueryRow(context.Background(), `
		SELECT p.status, o.status,
		       (SELECT count(*) FROM outbox_events WHERE tenant_id = $1 AND aggregate_id = p.id AND event_type = 'payment.succeeded'),
		       (SELECT count(*) FROM outbox_events WHERE tenant_id = $1 AND aggregate_id = p.id AND event_type = 'payment.failed'),
		       (SELECT count(*) FROM outbox_events e JOIN refunds r ON r.tenant_id = e.tenant_id AND r.id = e.aggregate_id
		         WHERE e.tenant_id = $1 AND r.payment_id = p.id AND e.event_type = 'refund.succeeded')
		FROM payments p JOIN orders o ON o.tenant_id = p.tenant_id AND o.id = p.order_id WHERE p.tenant_id = $1 AND p.id = $2`, f.tenant, f.payment).
		Scan((*string)(&s.payment), &s.order, &s.succeeded, &s.failed, &s.refundsSucceeded)
	if err != nil {
		t.Fatalf("load state: %v", err)
	}
	return s
}
