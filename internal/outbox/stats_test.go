package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/postgres"
)

// Stats counts the unpublished events, how old the oldest of them is, and
// how many of them are stuck; published events count for none of it.
func TestStats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if pending, lag, stuck, err := outbox.Stats(ctx, b.pool); err != nil || pending != 0 || lag != 0 || stuck != 0 {
		t.Fatalf("empty outbox: Stats = %d, %v, %d, %v; want 0, 0, 0", pending, lag, stuck, err)
	}

	// Published two hours ago, due for an hour and stuck, due since now.
	now := time.Now()
	ids := make([]any, 3)
	err := postgres.InTx(ctx, b.pool, func(tx pgx.Tx) error {
		for i, age := range []time.Duration{2 * time.Hour, time.Hour, 0} {
			e := b.event("order.created")
			e.OccurredAt = now.Add(-age).UTC()
			id, err := outbox.Append(ctx, tx, e)
			if err != nil {
				return err
			}
			ids[i] = id
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// States the dispatcher reaches by itself, set by hand.
	if _, err := b.pool.Exec(ctx, `UPDATE outbox_events SET published_at = now() WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `UPDATE outbox_events SET stuck_at = now(), attempts = 10 WHERE id = $1`, ids[1]); err != nil {
		t.Fatal(err)
	}
	pending, lag, stuck, err := outbox.Stats(ctx, b.pool)
	if err != nil || pending != 2 || stuck != 1 || lag < time.Hour || lag > time.Hour+time.Minute {
		t.Fatalf("Stats = %d, %v, %d, %v; want 2 pending, a lag of an hour (the stuck event's), 1 stuck", pending, lag, stuck, err)
	}
}
