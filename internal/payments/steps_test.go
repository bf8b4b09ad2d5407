package payments_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/testkit"
	"github.com/oncepay/oncepay/proving/pspsim"
)

const lease = 30 * time.Second

// bundle is the payments service on a database of the test's own, charging
// at a real simulator over loopback HTTP, with the hooks that stand for a
// crash at each point of an attempt and a record of which steps committed
// and which provider calls were made.
type bundle struct {
	pool      *pgxpool.Pool
	clock     *testkit.Clock
	sim       *pspsim.Server
	simURL    string
	orders    *orders.Service
	svc       *payments.Service
	recoverer *operation.Recoverer
	tenant    testkit.Tenant

	// crash, when set, is where the next attempt "dies": "rollback" (its
	// first step's transaction fails), "before" or "after" the provider call.
	crash atomic.Pointer[string]

	mu        sync.Mutex
	committed []idempotency.RecoveryPoint
	calls     []string // provider calls as "call:result"
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{pool: testkit.Pool(t), clock: testkit.NewClock()}
	b.tenant = testkit.SeedDemo(t, b.pool)["acme"]
	logger := testkit.Logger(t)
	sim, err := pspsim.New(pspsim.Config{APIKey: "sk_sim_test"}, logger, b.clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)
	b.sim, b.simURL = sim, srv.URL

	crashes := func(want string) bool {
		c := b.crash.Load()
		return c != nil && *c == want && b.crash.CompareAndSwap(c, nil)
	}
	policy := operation.PolicyOf(orders.Specs(), payments.Specs())
	store := idempotency.NewStore(policy, b.clock.Now, idempotency.WithLease(lease))
	ops := operation.NewRunner(b.pool, store, logger, operation.WithHooks(operation.Hooks{
		BeforeCall: func(idempotency.Operation, idempotency.RecoveryPoint) error {
			if crashes("before") {
				return errors.New("injected crash before the provider call")
			}
			return nil
		},
		AfterCall: func(idempotency.Operation, idempotency.RecoveryPoint) error {
			if crashes("after") {
				return errors.New("injected crash after the provider call")
			}
			return nil
		},
		BeforeCommit: func(op idempotency.Operation, point idempotency.RecoveryPoint) error {
			if op == orders.OpCreate {
				return nil
			}
			if point == idempotency.PointStarted && crashes("rollback") {
				return errors.New("injected: the first step's transaction is lost")
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			b.committed = append(b.committed, point)
			return nil
		},
	}))
	provider := payments.NewProvider(srv.URL, payments.WithAPIKey("sk_sim_test"), payments.WithCallObserver(func(call, result string) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.calls = append(b.calls, call+":"+result)
	}))
	b.orders = orders.NewService(b.pool, ops, b.clock.Now)
	if err := b.orders.SeedCatalog(context.Background(), b.tenant.ID, orders.DemoCatalog()); err != nil {
		t.Fatal(err)
	}
	b.svc = payments.NewService(b.pool, ops, b.orders, provider, logger, b.clock.Now)
	b.recoverer = operation.NewRecoverer(ops, b.svc.Operations()...)
	return b
}

// took returns the steps that committed and the provider calls made since
// the last call.
func (b *bundle) took() ([]idempotency.RecoveryPoint, []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	steps, calls := b.committed, b.calls
	b.committed, b.calls = nil, nil
	return steps, calls
}

func (b *bundle) request(t *testing.T, op idempotency.Operation, key string, path []string, body string) idempotency.Request {
	t.Helper()
	fp, err := idempotency.NewFingerprint(op, path, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return idempotency.Request{TenantID: b.tenant.ID, Operation: op, Key: idempotency.Key(key), Fingerprint: fp, RequestID: "req-" + key}
}

// order creates an order of one travel mug (1800 EUR cents).
func (b *bundle) order(t *testing.T, key string) uuid.UUID {
	t.Helper()
	body := `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":1}]}`
	resp, err := b.orders.Create(context.Background(), b.request(t, orders.OpCreate, key, nil, body),
		orders.CreateInput{Currency: "EUR", Items: []orders.ItemInput{{SKU: "travel-mug", Quantity: 1}}})
	if err != nil || resp.Status != http.StatusCreated {
		t.Fatalf("create order: %+v, %v", resp, err)
	}
	return idOf(t, resp)
}

func (b *bundle) pay(orderID uuid.UUID, key, method string) (idempotency.Response, error) {
	body := fmt.Sprintf(`{"payment_method":%q}`, method)
	fp, _ := idempotency.NewFingerprint(payments.OpPay, []string{orderID.String()}, []byte(body))
	return b.svc.Pay(context.Background(), idempotency.Request{TenantID: b.tenant.ID, Operation: payments.OpPay, Key: idempotency.Key(key), Fingerprint: fp, RequestID: "req-" + key}, orderID, method)
}

func (b *bundle) refund(paymentID uuid.UUID, key string, amount int64) (idempotency.Response, error) {
	body := fmt.Sprintf(`{"amount":%d}`, amount)
	fp, _ := idempotency.NewFingerprint(payments.OpRefund, []string{paymentID.String()}, []byte(body))
	return b.svc.Refund(context.Background(), idempotency.Request{TenantID: b.tenant.ID, Operation: payments.OpRefund, Key: idempotency.Key(key), Fingerprint: fp, RequestID: "req-" + key}, paymentID, amount)
}

// paid pays a fresh order and returns the payment's id.
func (b *bundle) paid(t *testing.T) uuid.UUID {
	t.Helper()
	resp, err := b.pay(b.order(t, "order-paid"), "pay-paid", pspsim.PaymentMethodOK)
	if err != nil || resp.Status != http.StatusCreated {
		t.Fatalf("pay: %+v, %v", resp, err)
	}
	b.took()
	return idOf(t, resp)
}

func idOf(t *testing.T, resp idempotency.Response) uuid.UUID {
	t.Helper()
	var v struct {
		ID uuid.UUID `json:"id"`
	}
	if err := json.Unmarshal(resp.Body, &v); err != nil || v.ID == uuid.Nil {
		t.Fatalf("answer %d %s has no id: %v", resp.Status, resp.Body, err)
	}
	return v.ID
}

// charges counts the provider's succeeded charges, and refunds its
// succeeded refunds, over every reference.
func (b *bundle) charges() (charges, refunds int) {
	l := b.sim.Ledger("")
	for _, c := range l.Charges {
		if c.Status == pspsim.StatusSucceeded {
			charges++
		}
	}
	for _, r := range l.Refunds {
		if r.Status == pspsim.StatusSucceeded {
			refunds++
		}
	}
	return charges, refunds
}

// record reads an idempotency record's state and recovery point ("" when
// there is none).
func (b *bundle) record(t *testing.T, op idempotency.Operation, key string) (state, point string) {
	t.Helper()
	err := b.pool.QueryRow(context.Background(), `SELECT state, recovery_point FROM api_idempotency WHERE operation = $1 AND idempotency_key = $2`,
		string(op), key).Scan(&state, &point)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return state, point
}

func (b *bundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// crashAt arms the crash of the next attempt.
func (b *bundle) crashAt(where string) { b.crash.Store(&where) }

// A crash at each recovery point of payments.create leaves the record (and
// the payment and the provider) as the case says. The client's retry after
// the lease and the Recoverer both resume from exactly that point (no step
// before it runs again), and the order is charged once.
func TestPaymentResumesFromEachRecoveryPoint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// crash is where the first attempt dies ("" for none).
		crash string
		// record and payments are what it leaves: the record's state and
		// point ("" when none), and the order's payments.
		state, point string
		payments     int
		// chargedBefore is whether the provider charged before the resume.
		chargedBefore bool
		// resumed are the steps a resume commits, and calls the provider
		// calls it makes.
		resumed []idempotency.RecoveryPoint
		calls   []string
		// recovers is whether the Recoverer has anything to resume.
		recovers bool
	}{
		{name: "started: the first step never committed", crash: "rollback",
			resumed: []idempotency.RecoveryPoint{idempotency.PointStarted, payments.PointPaymentCreated},
			calls:   []string{"charge:succeeded"}},
		{name: "payment_created: crash before the charge", crash: "before", state: "pending", point: string(payments.PointPaymentCreated), payments: 1,
			resumed: []idempotency.RecoveryPoint{payments.PointPaymentCreated},
			calls:   []string{"find_charge:not_found", "charge:succeeded"}, recovers: true},
		{name: "payment_created: crash after the charge", crash: "after", state: "pending", point: string(payments.PointPaymentCreated), payments: 1, chargedBefore: true,
			resumed: []idempotency.RecoveryPoint{payments.PointPaymentCreated},
			calls:   []string{"find_charge:found"}, recovers: true},
		{name: "finished", state: "completed", point: string(idempotency.PointFinished), payments: 1, chargedBefore: true},
	} {
		for _, by := range []string{"retry", "recoverer"} {
			t.Run(tc.name+", resumed by the "+by, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				orderID := b.order(t, "order-1")
				if tc.crash != "" {
					b.crashAt(tc.crash)
					if resp, err := b.pay(orderID, "pay-1", pspsim.PaymentMethodOK); err == nil {
						t.Fatalf("the crashed attempt answered %d", resp.Status)
					}
				} else if resp, err := b.pay(orderID, "pay-1", pspsim.PaymentMethodOK); err != nil || resp.Status != http.StatusCreated {
					t.Fatalf("pay = %+v, %v", resp, err)
				}
				b.took()
				if state, point := b.record(t, payments.OpPay, "pay-1"); state != tc.state || point != tc.point {
					t.Fatalf("record = %q at %q, want %q at %q", state, point, tc.state, tc.point)
				}
				if n := b.count(t, `SELECT count(*) FROM payments WHERE order_id = $1`, orderID); n != tc.payments {
					t.Fatalf("payments = %d, want %d", n, tc.payments)
				}
				if c, _ := b.charges(); (c == 1) != tc.chargedBefore || c > 1 {
					t.Fatalf("provider charges before the resume = %d, want charged: %v", c, tc.chargedBefore)
				}
				b.clock.Advance(lease + time.Second) // a crash keeps its lease; wait it out

				switch by {
				case "retry":
					resp, err := b.pay(orderID, "pay-1", pspsim.PaymentMethodOK)
					if err != nil || resp.Status != http.StatusCreated {
						t.Fatalf("retry = %+v, %v", resp, err)
					}
					if resp.Replayed != (tc.crash == "") {
						t.Fatalf("retry replayed = %v, want %v", resp.Replayed, tc.crash == "")
					}
				case "recoverer":
					n, err := b.recoverer.RecoverOnce(context.Background(), 10)
					if err != nil || (n == 1) != tc.recovers {
						t.Fatalf("RecoverOnce = %d, %v; want something to recover: %v", n, err, tc.recovers)
					}
					if !tc.recovers {
						// Nothing to resume: the client's retry finishes it.
						if resp, err := b.pay(orderID, "pay-1", pspsim.PaymentMethodOK); err != nil || resp.Status != http.StatusCreated {
							t.Fatalf("retry after an idle recoverer = %+v, %v", resp, err)
						}
					}
				}
				steps, calls := b.took()
				if by == "recoverer" && !tc.recovers {
					steps, calls = tc.resumed, tc.calls // what the retry did; the recoverer did nothing
				}
				if !slices.Equal(steps, tc.resumed) || !slices.Equal(calls, tc.calls) {
					t.Fatalf("the resume committed %v with provider calls %v; want %v and %v", steps, calls, tc.resumed, tc.calls)
				}
				if c, _ := b.charges(); c != 1 {
					t.Fatalf("provider charges = %d, want exactly 1", c)
				}
				if state, point := b.record(t, payments.OpPay, "pay-1"); state != "completed" || point != string(idempotency.PointFinished) {
					t.Fatalf("record = %q at %q, want completed at finished", state, point)
				}
				o, err := b.orders.Get(context.Background(), b.tenant.ID, orderID)
				if err != nil || o.Status != orders.StatusPaid {
					t.Fatalf("order = %+v, %v; want paid", o, err)
				}
				if n := b.count(t, `SELECT count(*) FROM outbox_events WHERE event_type = $1`, payments.EventPaymentSucceeded); n != 1 {
					t.Fatalf("payment.succeeded events = %d, want 1", n)
				}
			})
		}
	}
}

// The same for refunds.create: a crash at each recovery point is resumed
// from there by the retry and by the Recoverer, and the provider refunds
// once.
func TestRefundResumesFromEachRecoveryPoint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		crash          string
		state, point   string
		refunds        int
		refundedBefore bool
		resumed        []idempotency.RecoveryPoint
		calls          []string
		recovers       bool
	}{
		{name: "started: the first step never committed", crash: "rollback",
			resumed: []idempotency.RecoveryPoint{idempotency.PointStarted, payments.PointRefundCreated},
			calls:   []string{"refund:succeeded"}},
		{name: "refund_created: crash before the refund", crash: "before", state: "pending", point: string(payments.PointRefundCreated), refunds: 1,
			resumed: []idempotency.RecoveryPoint{payments.PointRefundCreated},
			calls:   []string{"find_refund:not_found", "refund:succeeded"}, recovers: true},
		{name: "refund_created: crash after the refund", crash: "after", state: "pending", point: string(payments.PointRefundCreated), refunds: 1, refundedBefore: true,
			resumed: []idempotency.RecoveryPoint{payments.PointRefundCreated},
			calls:   []string{"find_refund:found"}, recovers: true},
		{name: "finished", state: "completed", point: string(idempotency.PointFinished), refunds: 1, refundedBefore: true},
	} {
		for _, by := range []string{"retry", "recoverer"} {
			t.Run(tc.name+", resumed by the "+by, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				paymentID := b.paid(t)
				if tc.crash != "" {
					b.crashAt(tc.crash)
					if resp, err := b.refund(paymentID, "refund-1", 500); err == nil {
						t.Fatalf("the crashed attempt answered %d", resp.Status)
					}
				} else if resp, err := b.refund(paymentID, "refund-1", 500); err != nil || resp.Status != http.StatusCreated {
					t.Fatalf("refund = %+v, %v", resp, err)
				}
				b.took()
				if state, point := b.record(t, payments.OpRefund, "refund-1"); state != tc.state || point != tc.point {
					t.Fatalf("record = %q at %q, want %q at %q", state, point, tc.state, tc.point)
				}
				if n := b.count(t, `SELECT count(*) FROM refunds WHERE payment_id = $1`, paymentID); n != tc.refunds {
					t.Fatalf("refunds = %d, want %d", n, tc.refunds)
				}
				if _, r := b.charges(); (r == 1) != tc.refundedBefore || r > 1 {
					t.Fatalf("provider refunds before the resume = %d, want refunded: %v", r, tc.refundedBefore)
				}
				b.clock.Advance(lease + time.Second)

				switch by {
				case "retry":
					resp, err := b.refund(paymentID, "refund-1", 500)
					if err != nil || resp.Status != http.StatusCreated || resp.Replayed != (tc.crash == "") {
						t.Fatalf("retry = %+v, %v", resp, err)
					}
				case "recoverer":
					n, err := b.recoverer.RecoverOnce(context.Background(), 10)
					if err != nil || (n == 1) != tc.recovers {
						t.Fatalf("RecoverOnce = %d, %v; want something to recover: %v", n, err, tc.recovers)
					}
					if !tc.recovers {
						if resp, err := b.refund(paymentID, "refund-1", 500); err != nil || resp.Status != http.StatusCreated {
							t.Fatalf("retry after an idle recoverer = %+v, %v", resp, err)
						}
					}
				}
				steps, calls := b.took()
				if by == "recoverer" && !tc.recovers {
					steps, calls = tc.resumed, tc.calls
				}
				if !slices.Equal(steps, tc.resumed) || !slices.Equal(calls, tc.calls) {
					t.Fatalf("the resume committed %v with provider calls %v; want %v and %v", steps, calls, tc.resumed, tc.calls)
				}
				if _, r := b.charges(); r != 1 {
					t.Fatalf("provider refunds = %d, want exactly 1", r)
				}
				if n := b.count(t, `SELECT count(*) FROM payments WHERE id = $1 AND amount_refunded = 500 AND refund_reserved = 500`, paymentID); n != 1 {
					t.Fatal("the payment does not show 500 refunded and reserved")
				}
				if n := b.count(t, `SELECT count(*) FROM outbox_events WHERE event_type = $1`, payments.EventRefundSucceeded); n != 1 {
					t.Fatalf("refund.succeeded events = %d, want 1", n)
				}
			})
		}
	}
}

// Each step's outcomes: what payments.create answers and records for every
// kind of provider answer and every refusal of its first step, to the
// letter: the stored refusal's detail, and the stored payment's amount,
// currency, method and order.
func TestPayStepOutcomes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		method  string
		prepare func(t *testing.T, b *bundle, orderID uuid.UUID)
		status  int
		code    problem.Code
		// detail is the answer's detail, given the order's id and the id
		// of the payment under the key ("" for a 201).
		detail func(orderID, paymentID uuid.UUID) string
		// stored: the answer is the record's final outcome (else the key is
		// free or pending for a retry).
		stored  bool
		payment payments.Status // "" when there is none
		order   orders.Status
		event   string
	}{
		{name: "charged", method: pspsim.PaymentMethodOK, status: 201, stored: true, payment: payments.StatusSucceeded, order: orders.StatusPaid, event: payments.EventPaymentSucceeded},
		{name: "declined", method: pspsim.PaymentMethodDeclined, status: 402, code: problem.CardDeclined, stored: true, payment: payments.StatusFailed, order: orders.StatusAwaitingPayment, event: payments.EventPaymentFailed,
			detail: func(_, p uuid.UUID) string {
				return fmt.Sprintf("The card was declined (card_declined). Payment %s failed; a new attempt needs a new Idempotency-Key.", p)
			}},
		{name: "refused by the provider", method: "pm_unknown", status: 422, code: problem.PaymentRejected, stored: true, payment: payments.StatusFailed, order: orders.StatusAwaitingPayment, event: payments.EventPaymentFailed,
			detail: func(_, p uuid.UUID) string {
				return fmt.Sprintf("The payment provider refused payment %s (invalid_payment_method); check the payment method. A new attempt needs a new Idempotency-Key.", p)
			}},
		{name: "order already paid", method: pspsim.PaymentMethodOK, status: 409, code: problem.OrderAlreadyPaid, stored: true, payment: payments.StatusSucceeded, order: orders.StatusPaid,
			detail: func(o, _ uuid.UUID) string {
				return fmt.Sprintf("Order %s is already paid or has a payment in progress.", o)
			},
			prepare: func(t *testing.T, b *bundle, orderID uuid.UUID) {
				if resp, err := b.pay(orderID, "pay-first", pspsim.PaymentMethodOK); err != nil || resp.Status != 201 {
					t.Fatalf("first payment: %+v, %v", resp, err)
				}
			}},
		{name: "provider outcome unknown", method: pspsim.PaymentMethodOK, status: 503, code: problem.PaymentProviderUnavailable, payment: payments.StatusPending, order: orders.StatusAwaitingPayment,
			prepare: func(t *testing.T, b *bundle, _ uuid.UUID) {
				if err := b.sim.SetFaults(pspsim.Faults{FailNext: 1}); err != nil {
					t.Fatal(err)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			orderID := b.order(t, "order-1")
			if tc.prepare != nil {
				tc.prepare(t, b, orderID)
			}
			resp, err := b.pay(orderID, "pay-1", tc.method)
			status, code := resp.Status, problem.Code("")
			if err != nil {
				code = problem.CodeOf(err)
				status = problem.Status(code)
			} else if resp.Status >= 400 {
				var p struct {
					Code problem.Code `json:"code"`
				}
				_ = json.Unmarshal(resp.Body, &p)
				code = p.Code
			}
			if status != tc.status || code != tc.code {
				t.Fatalf("pay = %d %s (%v), want %d %s", status, code, err, tc.status, tc.code)
			}
			var paymentID uuid.UUID
			_ = b.pool.QueryRow(context.Background(), `SELECT id FROM payments WHERE idempotency_key = 'pay-1'`).Scan(&paymentID)
			if tc.detail != nil {
				var p struct {
					Detail string `json:"detail"`
				}
				if err := json.Unmarshal(resp.Body, &p); err != nil || p.Detail != tc.detail(orderID, paymentID) {
					t.Errorf("answer's detail %q (%v), want %q", p.Detail, err, tc.detail(orderID, paymentID))
				}
			}
			if tc.status == 201 {
				var p struct {
					ID            string `json:"id"`
					OrderID       string `json:"order_id"`
					Currency      string `json:"currency"`
					PaymentMethod string `json:"payment_method"`
					Amount        int64  `json:"amount"`
				}
				if err := json.Unmarshal(resp.Body, &p); err != nil || p.ID != paymentID.String() || p.OrderID != orderID.String() ||
					p.Amount != 1800 || p.Currency != "EUR" || p.PaymentMethod != tc.method {
					t.Errorf("answer %s (%v), want payment %s of order %s: 1800 EUR by %s", resp.Body, err, paymentID, orderID, tc.method)
				}
			}
			if state, _ := b.record(t, payments.OpPay, "pay-1"); (state != "pending" && state != "") != tc.stored {
				t.Fatalf("record state %q; want the answer stored: %v", state, tc.stored)
			}
			var got payments.Status
			_ = b.pool.QueryRow(context.Background(), `SELECT status FROM payments WHERE order_id = $1 AND idempotency_key = 'pay-1'`, orderID).Scan((*string)(&got))
			if tc.name == "order already paid" {
				_ = b.pool.QueryRow(context.Background(), `SELECT status FROM payments WHERE order_id = $1`, orderID).Scan((*string)(&got))
			}
			if got != tc.payment {
				t.Fatalf("payment status %q, want %q", got, tc.payment)
			}
			if o, err := b.orders.Get(context.Background(), b.tenant.ID, orderID); err != nil || o.Status != tc.order {
				t.Fatalf("order = %v, %v; want %s", o.Status, err, tc.order)
			}
			if tc.event != "" && tc.name != "order already paid" {
				if n := b.count(t, `SELECT count(*) FROM outbox_events WHERE event_type = $1`, tc.event); n != 1 {
					t.Fatalf("%s events = %d, want 1", tc.event, n)
				}
			}
		})
	}
}

// An order that is not the tenant's is 404 and nothing is stored: the key
// stays free (the answer is raised before anything executes).
func TestPayUnknownOrderStoresNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pay(uuid.New(), "pay-1", pspsim.PaymentMethodOK)
	if problem.CodeOf(err) != problem.NotFound {
		t.Fatalf("pay of an unknown order = %v, want not_found", err)
	}
	if state, _ := b.record(t, payments.OpPay, "pay-1"); state != "" {
		t.Fatalf("record %q left behind; the key must stay free", state)
	}
}

// Each refusal of refunds.create's first step is stored, and reserves
// nothing.
func TestRefundStepOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	paymentID := b.paid(t)
	for _, tc := range []struct {
		key    string
		amount int64
		status int
		// detail is the refusal's detail, given the payment's id.
		detail string
	}{
		{"too-much", 1801, 422, "A refund of 1801 would exceed what remains of payment %s (0 of 1800 already refunded or in progress)."},
		{"part", 800, 201, ""},
		{"rest-too-much", 1001, 422, "A refund of 1001 would exceed what remains of payment %s (800 of 1800 already refunded or in progress)."},
		{"rest", 1000, 201, ""},
	} {
		resp, err := b.refund(paymentID, tc.key, tc.amount)
		if err != nil || resp.Status != tc.status {
			t.Fatalf("refund %s = %+v, %v; want %d", tc.key, resp, err, tc.status)
		}
		var answer struct {
			Detail    string `json:"detail"`
			PaymentID string `json:"payment_id"`
			Amount    int64  `json:"amount"`
		}
		if err := json.Unmarshal(resp.Body, &answer); err != nil {
			t.Fatalf("refund %s: answer %s: %v", tc.key, resp.Body, err)
		}
		if tc.detail != "" && answer.Detail != fmt.Sprintf(tc.detail, paymentID) {
			t.Errorf("refund %s: detail %q, want %q", tc.key, answer.Detail, fmt.Sprintf(tc.detail, paymentID))
		}
		if tc.status == 201 && (answer.PaymentID != paymentID.String() || answer.Amount != tc.amount) {
			t.Errorf("refund %s: answer %s, want a refund of %d of payment %s", tc.key, resp.Body, tc.amount, paymentID)
		}
		if state, _ := b.record(t, payments.OpRefund, tc.key); state == "pending" || state == "" {
			t.Fatalf("refund %s: record %q, want its answer stored", tc.key, state)
		}
	}
	if n := b.count(t, `SELECT count(*) FROM payments WHERE id = $1 AND amount_refunded = 1800 AND refund_reserved = 1800`, paymentID); n != 1 {
		t.Fatal("the payment is not refunded in full by exactly the two accepted refunds")
	}
	var order orders.Status
	if err := b.pool.QueryRow(context.Background(), `SELECT o.status FROM orders o JOIN payments p ON p.tenant_id = o.tenant_id AND p.order_id = o.id WHERE p.id = $1`, paymentID).Scan((*string)(&order)); err != nil || order != orders.StatusRefunded {
		t.Fatalf("order %q, %v; want refunded", order, err)
	}
	declined, err := b.pay(b.order(t, "order-2"), "pay-2", pspsim.PaymentMethodDeclined)
	if err != nil || declined.Status != 402 {
		t.Fatalf("declined payment: %+v, %v", declined, err)
	}
	var declinedID uuid.UUID
	if err := b.pool.QueryRow(context.Background(), `SELECT id FROM payments WHERE idempotency_key = 'pay-2'`).Scan(&declinedID); err != nil {
		t.Fatal(err)
	}
	resp, err := b.refund(declinedID, "refund-declined", 100)
	want := fmt.Sprintf(`"detail":"Payment %s is failed; only succeeded payments can be refunded."`, declinedID)
	if err != nil || resp.Status != 409 || !strings.Contains(string(resp.Body), want) {
		t.Fatalf("refund of a failed payment = %d %s, %v; want 409 payment_not_refundable with %s", resp.Status, resp.Body, err, want)
	}
	if _, err := b.refund(uuid.New(), "refund-unknown", 100); problem.CodeOf(err) != problem.NotFound {
		t.Fatalf("refund of an unknown payment = %v, want not_found", err)
	}
}
