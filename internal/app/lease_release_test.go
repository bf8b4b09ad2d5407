package app_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
)

// These tests hold the service to one rule: a key is answered
// request_in_progress only while a process works on its attempt. Whatever
// stops an attempt after phase 1 while its process lives on (an error, a
// panic, a recoverer round that ends) gives the claim's lease back, so the
// client's next retry resumes the attempt instead of waiting out the lease.

// dropAllConnections terminates every database connection of the service
// (application_name oncepay) as the chaos run's pg_backend_terminated fault
// does, and waits until those backends are gone. The pool's idle connections
// are dead from then on, without the pool knowing. It waits for the
// terminated backends by pid, not for the service to have no connection at
// all: the service's own loops open new ones meanwhile, and on a busy Citus
// coordinator a backend takes a while to exit.
func (b *testBundle) dropAllConnections(ctx context.Context) error {
	cfg := b.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = "lease-release-test"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	// The victims first, then their termination: a volatile call in the
	// same WHERE may run before the other conditions, on any backend.
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'oncepay' AND pid <> pg_backend_pid()`)
	if err != nil {
		return err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid`, pids); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)`, pids).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d backends still alive 30 s after pg_terminate_backend", n, len(pids))
		}
		time.Sleep(5 * time.Millisecond) // polling a condition with a deadline
	}
}

// fillPool makes sure the pool has n idle connections (besides those in
// use), so that dropping them all leaves the pool with n dead ones.
func (b *testBundle) fillPool(ctx context.Context, n int) error {
	conns := make([]interface{ Release() }, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := b.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	return nil
}

// untilNot5xx repeats a request while it answers 5xx (each one uses up a dead
// pooled connection, as a client's retries do after the database dropped
// them) and returns the first other answer.
func untilNot5xx(t *testing.T, do func() response) response {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		r := do()
		if r.status < 500 {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d after 15 s: %s", r.status, r.body)
		}
	}
}

// The root cause of the chaos run's remaining client_unresolved: phase 2 of
// a payment or refund failed because PostgreSQL had dropped every connection
// of the service (pg_terminate_backend), and the release of the claim that
// followed went through the same pool, whose idle connections were all
// dead: both of its tries failed ("begin transaction: FATAL: terminating
// connection"), and the key answered 409 request_in_progress for the rest of
// the 30 s lease although nobody worked on it. Release now retries on a
// connection of its own. The retry, immediate or after a take-over of a
// crashed attempt, gets a definite answer, and the provider charged or
// refunded once.
func TestReleaseSurvivesDroppedConnections(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		op       idempotency.Operation
		takeover bool // the failing attempt is a retry that took a crashed one over
	}{
		{"payment", payments.OpPay, false},
		{"refund", payments.OpRefund, false},
		{"payment resumed by a retry", payments.OpPay, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var (
				crash, drop atomic.Bool
				bundle      atomic.Pointer[testBundle]
			)
			crash.Store(tc.takeover)
			b := setupWith(t, []app.Option{app.WithOperationHooks(operation.Hooks{
				AfterCall: func(op idempotency.Operation, _ idempotency.RecoveryPoint) error {
					if op == tc.op && crash.CompareAndSwap(true, false) {
						return errors.New("injected crash after the provider answered")
					}
					return nil
				},
				BeforeCommit: inPhase2(func(op idempotency.Operation) error {
					if op != tc.op || !drop.CompareAndSwap(true, false) {
						return nil
					}
					b := bundle.Load()
					ctx := context.Background()
					if err := b.fillPool(ctx, 8); err != nil {
						return err
					}
					if err := b.dropAllConnections(ctx); err != nil {
						t.Errorf("drop connections: %v", err)
					}
					return errors.New("injected: the database dropped every connection")
				}),
			})})
			bundle.Store(b)

			var send func() response
			switch tc.op {
			case payments.OpPay:
				orderID, _ := b.order(t, "o1")
				send = func() response { return b.pay(t, orderID, "pay-1", "pm_card_ok") }
			case payments.OpRefund:
				paymentID, _ := b.paidOrder(t)
				send = func() response { return b.refund(t, paymentID, "refund-1", 100) }
			}
			if tc.takeover {
				if r := send(); r.status < 500 {
					t.Fatalf("crashed attempt answered %d", r.status)
				}
				b.clock.Advance(31 * time.Second) // past the crashed attempt's lease
			}
			drop.Store(true)
			if r := send(); r.status < 500 {
				t.Fatalf("attempt whose phase 2 lost its connection answered %d %s", r.status, r.body)
			}
			if drop.Load() {
				t.Fatal("phase 2 never ran")
			}
			retry := untilNot5xx(t, send)
			if retry.status == http.StatusConflict {
				t.Fatalf("retry = %d %s: the key stayed in progress although nobody worked on it", retry.status, retry.body)
			}
			if retry.status != http.StatusCreated {
				t.Fatalf("retry = %d %s, want 201", retry.status, retry.body)
			}
			ledger := b.psp.Ledger("")
			if n := len(ledger.Charges); n != 1 {
				t.Fatalf("provider charges = %d, want exactly 1", n)
			}
			if tc.op == payments.OpRefund && len(ledger.Refunds) != 1 {
				t.Fatalf("provider refunds = %d, want exactly 1", len(ledger.Refunds))
			}
		})
	}
}

// A panic after phase 1 (here inside phase 2) is a 500 from the recovering
// middleware while the process lives on: the claim is given back too.
func TestPanicAfterPhase1ReleasesTheClaim(t *testing.T) {
	t.Parallel()
	var panicked atomic.Bool
	b := setupWith(t, []app.Option{app.WithOperationHooks(operation.Hooks{
		BeforeCommit: inPhase2(func(idempotency.Operation) error {
			if panicked.CompareAndSwap(false, true) {
				panic("injected panic in phase 2")
			}
			return nil
		}),
	})})
	orderID, _ := b.order(t, "o1")
	if r := b.pay(t, orderID, "pay-panic", "pm_card_ok"); r.status != http.StatusInternalServerError {
		t.Fatalf("panicking attempt answered %d %s, want 500", r.status, r.body)
	}
	retry := b.pay(t, orderID, "pay-panic", "pm_card_ok")
	if retry.status != http.StatusCreated {
		t.Fatalf("immediate retry = %d %s, want 201 (the claim was released)", retry.status, retry.body)
	}
	if n := b.allCharges(); n != 1 {
		t.Fatalf("provider charges = %d, want 1", n)
	}
}

// A definite refusal of a charge request other than 400 (here 404 with the
// provider's invalid_request_error) is a bug of ours: the
// attempt stays pending for an operator to see, but nothing works on it, so
// it is no "request in progress" either. The retry resumes it (and here meets
// the same refusal).
func TestProviderRefusalReleasesTheClaim(t *testing.T) {
	t.Parallel()
	var chargeCalls atomic.Int32
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/charges":
			chargeCalls.Add(1)
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"type":"invalid_request_error","code":"resource_missing"}}`))
		case r.Method == http.MethodGet && r.URL.Path == "/v1/charges":
			_, _ = w.Write([]byte(`{"data":[]}`))
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"type":"invalid_request_error","code":"not_found"}}`))
		}
	}))
	t.Cleanup(provider.Close)
	b := setup(t, func(c *app.Config) { c.PSPURL = provider.URL })
	orderID, _ := b.order(t, "o1")
	if r := b.pay(t, orderID, "pay-refused", "pm_card_ok"); r.status != http.StatusInternalServerError {
		t.Fatalf("refused charge answered %d %s, want 500", r.status, r.body)
	}
	retry := b.pay(t, orderID, "pay-refused", "pm_card_ok")
	if retry.status == http.StatusConflict {
		t.Fatalf("retry = %d %s: the key stayed in progress although nobody worked on it", retry.status, retry.body)
	}
	if n := chargeCalls.Load(); n != 2 {
		t.Fatalf("charge requests = %d, want 2 (the retry resumed the attempt)", n)
	}
	if n := b.count(t, `SELECT count(*) FROM api_idempotency WHERE idempotency_key = 'pay-refused' AND state = 'pending'`); n != 1 {
		t.Fatalf("pending records = %d, want the attempt kept pending", n)
	}
}

// The recoverer takes one abandoned claim at a time. It used to take a batch
// and lease every claim of it at once: a claim waiting behind another one's
// provider call answered its client request_in_progress although nothing
// worked on it yet, and one still waiting when the round was cancelled
// (shutdown) kept its lease for nothing.
func TestRecovererHoldsOnlyTheClaimItWorksOn(t *testing.T) {
	t.Parallel()
	var (
		crashes atomic.Int32
		block   atomic.Bool
	)
	blocked, proceed := make(chan struct{}), make(chan struct{})
	b := setupWith(t, []app.Option{app.WithOperationHooks(operation.Hooks{
		AfterCall: func(idempotency.Operation, idempotency.RecoveryPoint) error {
			if crashes.Add(1) <= 3 {
				return errors.New("injected crash after the provider answered")
			}
			return nil
		},
		BeforeCommit: inPhase2(func(idempotency.Operation) error {
			if block.CompareAndSwap(true, false) {
				close(blocked)
				<-proceed
			}
			return nil
		}),
	})})
	var orders [3]string
	for i := range orders {
		orders[i], _ = b.order(t, "o"+strconv.Itoa(i))
		// One after the other: the first one's lease runs out first, so the
		// recoverer takes it first.
		if r := b.pay(t, orders[i], "pay-"+strconv.Itoa(i), "pm_card_ok"); r.status < 500 {
			t.Fatalf("crashed attempt %d answered %d", i, r.status)
		}
	}
	b.clock.Advance(31 * time.Second) // every lease ran out: three abandoned attempts
	block.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		wg        sync.WaitGroup
		recovered int
		recErr    error
	)
	wg.Go(func() { recovered, recErr = b.app.Recoverer().RecoverOnce(ctx, 10) })
	select {
	case <-blocked: // the recoverer is in phase 2 of the first attempt
	case <-time.After(20 * time.Second):
		close(proceed)
		t.Fatal("the recoverer never reached phase 2")
	}
	if r := b.pay(t, orders[1], "pay-1", "pm_card_ok"); r.status != http.StatusCreated {
		close(proceed)
		t.Fatalf("client retry while the recoverer works on another attempt = %d %s, want 201", r.status, r.body)
	}
	cancel() // shutdown while the recoverer is busy
	close(proceed)
	wg.Wait()
	if recErr != nil || recovered != 1 {
		t.Fatalf("RecoverOnce = %d, %v; want 1 (the attempt it was working on)", recovered, recErr)
	}
	if r := b.pay(t, orders[2], "pay-2", "pm_card_ok"); r.status != http.StatusCreated {
		t.Fatalf("client retry after the recoverer's round ended = %d %s, want 201", r.status, r.body)
	}
	if r := b.pay(t, orders[0], "pay-0", "pm_card_ok"); r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("client retry of the recovered attempt = %d %s, want a replayed 201", r.status, r.body)
	}
	if n := b.allCharges(); n != 3 {
		t.Fatalf("provider charges = %d, want 3", n)
	}
	if n := b.count(t, `SELECT count(*) FROM payments WHERE status = 'succeeded'`); n != 3 {
		t.Fatalf("succeeded payments = %d, want 3", n)
	}
}

// A crashed attempt keeps its lease (a dead process cannot give it back).
// Its client is told to come back shortly at first, while the owner may just
// be finishing, and then when the lease runs out, rather than every two
// seconds until its attempts are used up; then its retry resumes the attempt.
func TestInProgressRetryAfterIsTheRestOfTheLease(t *testing.T) {
	t.Parallel()
	b := setupWith(t, crashOnce(payments.OpPay))
	orderID, _ := b.order(t, "o1")
	start := time.Now() // the service's clock runs on: a slow test sees the lease shrink
	if r := b.pay(t, orderID, "pay-crash", "pm_card_ok"); r.status < 500 {
		t.Fatalf("crashed request answered %d", r.status)
	}
	retryAfter := func(r response) int {
		t.Helper()
		wantProblem(t, r, http.StatusConflict, "request_in_progress")
		s, err := strconv.Atoi(r.header.Get("Retry-After"))
		if err != nil {
			t.Fatalf("Retry-After %q: %v", r.header.Get("Retry-After"), err)
		}
		return s
	}
	if s := retryAfter(b.pay(t, orderID, "pay-crash", "pm_card_ok")); s < 1 || (s > 2 && time.Since(start) < 2*time.Second) {
		t.Fatalf("Retry-After right after the claim = %d s, want 1-2", s)
	}
	b.clock.Advance(5 * time.Second)
	s := retryAfter(b.pay(t, orderID, "pay-crash", "pm_card_ok"))
	if lo := 24 - int(time.Since(start).Seconds()); s < lo || s > 25 {
		t.Fatalf("Retry-After 5 s into a 30 s lease = %d s, want the rest of the lease (%d to 25 s)", s, lo)
	}
	b.clock.Advance(26 * time.Second)
	if r := b.pay(t, orderID, "pay-crash", "pm_card_ok"); r.status != http.StatusCreated {
		t.Fatalf("retry after Retry-After = %d %s, want 201", r.status, r.body)
	}
	if n := b.allCharges(); n != 1 {
		t.Fatalf("provider charges = %d, want 1", n)
	}
}
