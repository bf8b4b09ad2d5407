package operation_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/problem"
)

// oneBatch is a one-step operation whose transaction, in a Batch, is body.
func (b *bundle) oneBatch(body func(ctx context.Context, bt *operation.Batch, a *operation.Attempt[string]) (operation.Outcome, error)) *operation.Phases[string] {
	return operation.NewPhases(b.runner, opLocal, operation.Steps[string]{idempotency.PointStarted: {Batch: body}})
}

// A step in a Batch reads the record's lock with its first Send: its
// reads may go before, the record's update only after. One that updates
// its record blind, ends without an update, or fails stores nothing and
// leaves the key free; one that sends more than once commits like one that
// sends once.
func TestBatchStepLocksThenUpdates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	fail := errors.New("invalid after its reads")
	op := b.oneBatch(func(ctx context.Context, bt *operation.Batch, a *operation.Attempt[string]) (operation.Outcome, error) {
		answer := idempotency.Response{Status: http.StatusCreated, ContentType: "text/plain", Body: []byte(a.Data)}
		if a.Data == "update first" {
			return a.Finish(ctx, bt, answer, nil)
		}
		if err := bt.Send(ctx); err != nil {
			return operation.Outcome{}, err
		}
		switch a.Data {
		case "no update":
			return operation.Outcome{}, nil
		case "fail":
			return operation.Outcome{}, fail
		case "twice":
			if err := bt.Send(ctx); err != nil {
				return operation.Outcome{}, err
			}
		}
		return a.Finish(ctx, bt, answer, nil)
	})
	for _, tc := range []struct {
		key     string
		wantErr func(error) bool
	}{
		{"update first", func(err error) bool { return errors.Is(err, idempotency.ErrNotLocked) }},
		{"no update", func(err error) bool { return err != nil && strings.Contains(err.Error(), "record's update") }},
		{"fail", func(err error) bool { return errors.Is(err, fail) }},
	} {
		if _, err := op.Run(ctx, b.request(t, opLocal, tc.key), tc.key); !tc.wantErr(err) {
			t.Errorf("%s: %v", tc.key, err)
		}
		if state, _ := b.record(t, tc.key); state != "" {
			t.Errorf("%s left a %s record; the key must stay free", tc.key, state)
		}
	}
	for _, key := range []string{"once", "twice"} {
		resp, err := op.Run(ctx, b.request(t, opLocal, key), key)
		if err != nil || resp.Status != http.StatusCreated || string(resp.Body) != key {
			t.Errorf("%s: %+v, %v", key, resp, err)
		}
		if state, _ := b.record(t, key); state != "completed" {
			t.Errorf("%s: record %q, want completed", key, state)
		}
	}
}

// A key whose first request is still in its transaction: the claim of the
// same request waits for it and then finds the key taken, and the record
// decides: the same request is answered with the stored outcome, another
// request under the key with idempotency_key_reused.
func TestBatchStepOfAKeyInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	entered, release := make(chan struct{}, 2), make(chan struct{})
	var unblock sync.Once
	t.Cleanup(func() { unblock.Do(func() { close(release) }) }) // before the pool closes, whatever failed
	var runs atomic.Int32
	op := b.oneBatch(func(ctx context.Context, bt *operation.Batch, a *operation.Attempt[string]) (operation.Outcome, error) {
		if err := bt.Send(ctx); err != nil {
			return operation.Outcome{}, err
		}
		runs.Add(1) // only the first request gets here
		entered <- struct{}{}
		<-release
		return a.Finish(ctx, bt, idempotency.Response{Status: http.StatusCreated, ContentType: "text/plain", Body: []byte(a.Data)}, nil)
	})
	r := b.request(t, opLocal, "k")
	other := r
	other.Fingerprint[0] ^= 0xff
	type answer struct {
		resp idempotency.Response
		err  error
	}
	first, same, another := make(chan answer, 1), make(chan answer, 1), make(chan answer, 1)
	run := func(r idempotency.Request, in string, out chan<- answer) {
		resp, err := op.Run(ctx, r, in)
		out <- answer{resp, err}
	}
	go run(r, "first", first)
	<-entered // the first holds its claim...
	go run(r, "first", same)
	go run(other, "other", another)
	waitClaims(t, b, 2) // ...and the other two wait for it in their claims
	unblock.Do(func() { close(release) })
	if a := <-first; a.err != nil || a.resp.Replayed || string(a.resp.Body) != "first" {
		t.Fatalf("first = %+v, %v", a.resp, a.err)
	}
	if a := <-same; a.err != nil || !a.resp.Replayed || string(a.resp.Body) != "first" {
		t.Errorf("the same request in flight = %+v, %v; want the stored answer", a.resp, a.err)
	}
	if a := <-another; problem.CodeOf(a.err) != problem.IdempotencyKeyReused {
		t.Errorf("another request in flight = %+v, %v; want idempotency_key_reused", a.resp, a.err)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the step ran %d times, want once", n)
	}
}

// waitClaims waits until n of the test database's backends are in the
// claim of a key (its INSERT into api_idempotency) and still at it: waiting
// for the row lock of the claim in flight (on Citus, for the worker that
// waits for it).
func waitClaims(t *testing.T, b *bundle, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()
			  AND query LIKE '%INSERT INTO api_idempotency%'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d backends are in a claim after 10s, want %d", waiting, n)
		}
		time.Sleep(5 * time.Millisecond) // polling pg_stat_activity, with the deadline above
	}
}
