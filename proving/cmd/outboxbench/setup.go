// What a run stands on: the orders it publishes, the seeded catalog, a
// scratch database of its own, and what it reports of the machine.

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/broker"
	"github.com/oncepay/oncepay/internal/fulfillment"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/postgres"
)

// commitPaidOrder commits what a successful charge commits: the order
// moved to paid and its payment.succeeded event, in one transaction.
func commitPaidOrder(ctx context.Context, pool *pgxpool.Pool, tenantID uuid.UUID, i int) (uuid.UUID, error) {
	orderID, paymentID := uuid.New(), uuid.New()
	var eventID uuid.UUID
	err := postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, tenant_id, idempotency_key, request_hash, status, currency, amount_total, created_at, updated_at)
			VALUES ($1, $2, $3, '\x00', 'paid', 'EUR', 5800, now(), now())`, orderID, tenantID, "bench-order-"+strconv.Itoa(i)); err != nil {
			return fmt.Errorf("insert order: %w", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO order_items (tenant_id, order_id, line, sku, name, quantity, unit_amount, amount)
			VALUES ($1, $2, 1, $3, 'Mug', 2, 2900, 5800)`, tenantID, orderID, fmt.Sprintf("bench-%02d", i%benchProducts)); err != nil {
			return fmt.Errorf("insert order item: %w", err)
		}
		var err error
		eventID, err = outbox.Append(ctx, tx, outbox.Event{
			TenantID: tenantID, Type: fulfillment.EventPaymentSucceeded, AggregateType: "payment", AggregateID: paymentID,
			IdempotencyKey: "bench-pay-" + strconv.Itoa(i), OccurredAt: time.Now(),
			Payload: map[string]any{"id": paymentID, "order_id": orderID, "status": "succeeded", "amount": 5800, "currency": "EUR"},
		})
		return err
	})
	return eventID, err
}

// benchProducts is the size of the benchmark's catalog. Orders cycle
// through it: fulfillment locks the products it takes stock from, so a
// catalog of one would measure a single hot row instead of the pipeline.
const benchProducts = 20

// seed creates the benchmark's tenant and its catalog with ample stock.
func seed(ctx context.Context, pool *pgxpool.Pool) (uuid.UUID, error) {
	id := uuid.New()
	if _, err := pool.Exec(ctx, `INSERT INTO tenants (id, slug, name, created_at) VALUES ($1, 'bench', 'Bench', now())`, id); err != nil {
		return uuid.Nil, fmt.Errorf("seed tenant: %w", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO products (tenant_id, sku, name, unit_amount, currency, stock)
		SELECT $1, format('bench-%s', lpad(g::text, 2, '0')), 'Mug', 2900, 'EUR', 1000000000
		FROM generate_series(0, $2::int - 1) g`, id, benchProducts); err != nil {
		return uuid.Nil, fmt.Errorf("seed products: %w", err)
	}
	return id, nil
}

// scratchDatabase creates a fresh database next to the one adminURL names
// and returns its URL and a function that drops it.
func scratchDatabase(ctx context.Context, adminURL string, keep bool) (string, func(), error) {
	var suffix [4]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return "", nil, err
	}
	name := "outboxbench_" + hex.EncodeToString(suffix[:])
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", nil, fmt.Errorf("connect to %s: %w", redactURL(adminURL), err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close(ctx)
		return "", nil, fmt.Errorf("create scratch database: %w", err)
	}
	u, err := url.Parse(adminURL)
	if err != nil {
		admin.Close(ctx)
		return "", nil, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	u.Path = "/" + name
	drop := func() {
		defer admin.Close(context.Background())
		if keep {
			fmt.Fprintf(os.Stderr, "outboxbench: kept database %s\n", name)
			return
		}
		if _, err := admin.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			fmt.Fprintf(os.Stderr, "outboxbench: drop %s: %v\n", name, err)
		}
	}
	return u.String(), drop, nil
}

func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "DATABASE_URL"
	}
	return u.Redacted()
}

func streamMessages(ctx context.Context, js jetstream.JetStream) (uint64, error) {
	s, err := js.Stream(ctx, broker.StreamEvents)
	if err != nil {
		return 0, fmt.Errorf("stream: %w", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("stream info: %w", err)
	}
	return info.State.Msgs, nil
}

// contention describes how busy the machine was, other processes included:
// the load average and the share of time runnable tasks waited for a CPU
// over the last minute (/proc/pressure/cpu). A shared machine makes the
// numbers worse; this says by how much to distrust them.
func contention() string {
	load := "?"
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			load = f[0]
		}
	}
	pressure := "?"
	if b, err := os.ReadFile("/proc/pressure/cpu"); err == nil {
		for _, f := range strings.Fields(strings.SplitN(string(b), "\n", 2)[0]) {
			if v, ok := strings.CutPrefix(f, "avg60="); ok {
				pressure = v + "%"
			}
		}
	}
	return fmt.Sprintf("load average (1 min) %s on %d CPUs, CPU pressure (some, avg60) %s", load, runtime.NumCPU(), pressure)
}

// machine describes where the benchmark runs.
func machine(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var pg string
	if err := pool.QueryRow(ctx, `SELECT current_setting('server_version')`).Scan(&pg); err != nil {
		return "", fmt.Errorf("server version: %w", err)
	}
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(rest), ":"))
				break
			}
		}
	}
	return fmt.Sprintf("%d CPUs (%s), GOMAXPROCS %d, %s, PostgreSQL %s", runtime.NumCPU(), cpu, runtime.GOMAXPROCS(0), runtime.Version(), pg), nil
}

// orderService is the orders feature the fulfillment consumer ships through,
// built as api serve builds it.
func orderService(pool *pgxpool.Pool, logger *slog.Logger) *orders.Service {
	store := idempotency.NewStore(app.DefaultRetention().Idempotency, time.Now)
	return orders.NewService(pool, operation.NewRunner(pool, store, logger), time.Now)
}
