package app_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/app"
)

// The service's sweeper reaches every kind of record through the package
// that owns its table, each with its own retention: records just past their
// retention are deleted, one just inside it is kept, and the report counts
// each kind apart. Each kind has another number of expired records, so two
// owners' deletes wired the wrong way round show.
func TestSweeperDeletesEachKindThroughItsOwner(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	p := app.DefaultRetention()
	var tenantID string
	if err := b.pool.QueryRow(ctx, `SELECT id::text FROM tenants WHERE slug = 'acme'`).Scan(&tenantID); err != nil {
		t.Fatal(err)
	}
	kinds := []struct {
		table, name string // name: the column the records are told apart by
		// keep is the retention, counted from the time in $3; an
		// idempotency record stores its own expiry, which is $3 there.
		keep    time.Duration
		expired int
		insert  string // $1 tenant, $2 name, $3 time
	}{
		{"api_idempotency", "idempotency_key", 0, 1, `INSERT INTO api_idempotency (tenant_id, operation, idempotency_key, request_hash, state, recovery_point,
			locked_until, request_id, status_code, response_headers, response_body, created_at, updated_at, expires_at)
			VALUES ($1, 'orders.create', $2, '\x00', 'completed', 'finished', NULL, '', 201, '{}', '{}', $3, $3, $3)`},
		{"outbox_events", "idempotency_key", p.PublishedEvents, 2, `INSERT INTO outbox_events (id, tenant_id, event_type, aggregate_type, aggregate_id,
			idempotency_key, payload, occurred_at, published_at)
			SELECT g, $1, 'order.created', 'order', g, $2, '{}', $3, $3 FROM gen_random_uuid() g`},
		{"webhook_receipts", "delivery_id", p.WebhookReceipts, 3, `INSERT INTO webhook_receipts (delivery_id, event_type, payload, received_at, processed_at)
			SELECT $2, 'charge.succeeded', '{}', $3, $3 WHERE $1::uuid IS NOT NULL`},
		{"processed_messages", "message_id", p.ProcessedMessages, 4, `INSERT INTO processed_messages (tenant_id, message_id, subscriber, processed_at)
			SELECT $1, $2, 'fulfillment', $3`},
	}
	// Records this old are states the service reaches only with time, so
	// they are written by hand. The margin is far more than the time between
	// now and the sweep.
	const margin = time.Hour
	now := b.clock.Now()
	for _, k := range kinds {
		for i := range k.expired {
			if _, err := b.pool.Exec(ctx, k.insert, tenantID, fmt.Sprintf("expired-%d", i), now.Add(-k.keep-margin)); err != nil {
				t.Fatalf("%s: %v", k.table, err)
			}
		}
		if _, err := b.pool.Exec(ctx, k.insert, tenantID, "kept", now.Add(-k.keep+margin)); err != nil {
			t.Fatalf("%s: %v", k.table, err)
		}
	}

	rep, err := b.app.Sweeper().SweepOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kinds {
		if rep.Deleted[k.table] != int64(k.expired) {
			t.Errorf("%s: the report counts %d deleted, want %d (report %v)", k.table, rep.Deleted[k.table], k.expired, rep.Deleted)
		}
		left := b.count(t, `SELECT count(*) FROM `+k.table)
		kept := b.count(t, `SELECT count(*) FROM `+k.table+` WHERE `+k.name+` = 'kept'`)
		if left != 1 || kept != 1 {
			t.Errorf("%s: %d records left (%d of them the one inside its retention), want only that one", k.table, left, kept)
		}
	}
}
