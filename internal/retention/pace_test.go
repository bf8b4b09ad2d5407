package retention_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/oncepay/oncepay/internal/retention"
	"github.com/oncepay/oncepay/internal/testdb"
)

// With a backlog the sweeper rests after every full batch, in proportion to
// how long the batch took, and not after the last (partial) one: deleting
// takes duty of the time. At duty 1 it never rests.
func TestSweepPacesABacklog(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		duty   float64
		pauses int
	}{{0.25, 3}, {1, 0}} {
		pool := testdb.Pool(t)
		ctx := context.Background()
		tenant := uuid.New()
		if _, err := pool.Exec(ctx, `INSERT INTO tenants (id, slug, name, created_at) VALUES ($1, 't', 'T', now())`, tenant); err != nil {
			t.Fatal(err)
		}
		// Three full batches of 10 and one of 1.
		if _, err := pool.Exec(ctx, `INSERT INTO api_idempotency (tenant_id, operation, idempotency_key, request_hash, state, recovery_point,
			locked_until, request_id, status_code, response_headers, response_body, created_at, updated_at, expires_at)
			SELECT $1, 'orders.create', 'k' || g, '\x00', 'completed', 'finished', NULL, '', 201, '{}', '{}', now(), now(), now() - interval '1 day'
			FROM generate_series(1, 31) g`, tenant); err != nil {
			t.Fatal(err)
		}
		s := retention.NewSweeper(pool, tables(), retention.DefaultPolicy(), slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now,
			retention.WithBatchSize(10), retention.WithStuckAfter(time.Hour), retention.WithDutyCycle(c.duty))
		var pauses []time.Duration
		retention.SetSleep(s, func(_ context.Context, d time.Duration) error {
			pauses = append(pauses, d)
			return nil
		})
		rep, err := s.SweepOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Deleted["api_idempotency"] != 31 {
			t.Fatalf("duty %v: deleted %v, want 31 records", c.duty, rep.Deleted)
		}
		if len(pauses) != c.pauses {
			t.Fatalf("duty %v: %d pauses %v, want %d", c.duty, len(pauses), pauses, c.pauses)
		}
		for _, p := range pauses {
			if p <= 0 {
				t.Fatalf("duty %v: pause %v, want a positive one", c.duty, p)
			}
		}
	}
	s := retention.NewSweeper(nil, retention.Tables{}, retention.DefaultPolicy(), slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now, retention.WithDutyCycle(0.25))
	if got := retention.Pause(s, 10*time.Millisecond); got != 30*time.Millisecond {
		t.Fatalf("pause after a 10 ms batch at duty 1/4 = %v, want 30 ms", got)
	}
}

// The sweeper deletes tenant by tenant (one shard per statement on Citus):
// one sweep removes the expired records of every tenant.
func TestSweepVisitsEveryTenant(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t)
	ctx := context.Background()
	for i := range 3 {
		tenant := uuid.New()
		if _, err := pool.Exec(ctx, `INSERT INTO tenants (id, slug, name, created_at) VALUES ($1, $2, 'T', now())`, tenant, fmt.Sprint("t", i)); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO api_idempotency (tenant_id, operation, idempotency_key, request_hash, state, recovery_point,
			locked_until, request_id, status_code, response_headers, response_body, created_at, updated_at, expires_at)
			SELECT $1, 'orders.create', 'k' || g, '\x00', 'completed', 'finished', NULL, '', 201, '{}', '{}', now(), now(), now() - interval '1 day'
			FROM generate_series(1, 4) g`, tenant); err != nil {
			t.Fatal(err)
		}
	}
	s := retention.NewSweeper(pool, tables(), retention.DefaultPolicy(), slog.New(slog.DiscardHandler), time.Now,
		retention.WithBatchSize(3), retention.WithStuckAfter(time.Hour), retention.WithDutyCycle(1))
	rep, err := s.SweepOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM api_idempotency`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if rep.Deleted["api_idempotency"] != 12 || left != 0 {
		t.Fatalf("deleted %v, %d left; want the 12 records of 3 tenants gone", rep.Deleted, left)
	}
}
