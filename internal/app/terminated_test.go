package app_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/testkit"
)

// A request whose database session is ended under it (an operator's or a
// failover's pg_terminate_backend, a restart) met an infrastructure fault,
// not a bug: it is answered 503 service_unavailable with Retry-After, and
// the same request, repeated, succeeds. Here the request waits on a lock
// the test holds on orders, and the test terminates the request's backend
// from another connection while it waits: a read, and a write whose retry
// with the same Idempotency-Key creates the order once.
func TestATerminatedBackendIsAnsweredUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orderID, _ := b.order(t, "terminated-first")
	for _, tc := range []struct {
		name, method, path, key, body string
		want                          int
	}{
		{"read", "GET", "/v1/orders/" + orderID, "", "", http.StatusOK},
		{"write", "POST", "/v1/orders", "terminated-write", orderBody, http.StatusCreated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answer := b.terminatedWhileWaiting(t, tc.method, tc.path, tc.key, tc.body)
			testkit.WantProblem(t, answer, http.StatusServiceUnavailable, "service_unavailable")
			if ra := answer.Header.Get("Retry-After"); ra == "" {
				t.Fatalf("503 without Retry-After; headers %v", answer.Header)
			}
			if r := b.do(t, tc.method, tc.path, acme, tc.key, tc.body); r.status != tc.want {
				t.Fatalf("the same request again: %d %s, want %d", r.status, r.body, tc.want)
			}
		})
	}
	if n := b.count(t, `SELECT count(*) FROM orders WHERE idempotency_key = 'terminated-write'`); n != 1 {
		t.Fatalf("%d orders for the retried key, want 1", n)
	}
}

// terminatedWhileWaiting sends one request while the test holds orders
// locked, waits until the request's statement on orders waits on that lock
// (sqlc puts the query's name in its text: OrderGet, OrderGetBy...),
// terminates its backend, and returns the answer.
func (b *testBundle) terminatedWhileWaiting(t *testing.T, method, path, key, body string) testkit.Response {
	t.Helper()
	ctx := context.Background()
	lock, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(ctx) }()
	if _, err := lock.Exec(ctx, `LOCK TABLE orders IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, b.baseURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+acme)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	answer := make(chan testkit.Response, 1)
	go func() {
		r, err := testkit.Send(b.client, req)
		if err != nil {
			r.Status, r.Body = -1, []byte(err.Error())
		}
		answer <- r
	}()
	// The wait is bounded by the test service's lock timeout (5 s): the
	// request must be caught well within it.
	var terminated int
	testkit.WaitFor(t, 4*time.Second, "the request to wait on the lock", func() bool {
		err := b.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()
			  AND wait_event_type = 'Lock' AND query LIKE '%name: Order%'`).Scan(&terminated)
		return err == nil && terminated > 0
	})
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-answer:
		return r
	case <-time.After(20 * time.Second):
		t.Fatalf("%s %s not answered within 20 s after its backend was terminated", method, path)
	}
	return testkit.Response{}
}
