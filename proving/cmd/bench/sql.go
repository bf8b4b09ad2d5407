package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/tenants"
)

// The statements of one order creation, as the service's generated queries
// hold them (internal/idempotency/internal/dbsqlc,
// internal/orders/internal/dbsqlc, internal/outbox/internal/dbsqlc): the
// floor runs the same SQL text. Those packages are reachable from their
// features only, so the text is repeated here, each constant named sql
// and the query it copies; TestFloorSQLIsTheServices fails when one
// drifts from the generated query (db/queries, then `make generate`).
const (
	sqlIdempotencyGet = `SELECT tenant_id, operation, idempotency_key, request_hash, state, recovery_point, locked_until, request_id, status_code, response_headers, response_body, resource_type, resource_id, created_at, updated_at, expires_at, held_at, recoveries, next_recovery_at, trace_context FROM api_idempotency
WHERE tenant_id = $1 AND operation = $2 AND idempotency_key = $3`
	sqlIdempotencyInsert = `INSERT INTO api_idempotency (
    tenant_id, operation, idempotency_key, request_hash, state, recovery_point,
    locked_until, request_id, created_at, updated_at, expires_at, trace_context
) VALUES (
    $1, $2, $3, $4, 'pending', 'started', $5, $6, $7, $7, $8, $9
)
ON CONFLICT (tenant_id, operation, idempotency_key) DO NOTHING
RETURNING tenant_id, operation, idempotency_key, request_hash, state, recovery_point, locked_until, request_id, status_code, response_headers, response_body, resource_type, resource_id, created_at, updated_at, expires_at, held_at, recoveries, next_recovery_at, trace_context`
	sqlProductGetMany = `SELECT tenant_id, sku, name, unit_amount, currency, stock FROM products WHERE tenant_id = $1 AND sku = ANY($2::text[])`
	sqlOrderInsert    = `INSERT INTO orders (id, tenant_id, idempotency_key, request_hash, status, currency, amount_total, created_at, updated_at)
VALUES ($1, $2, $3, $4, 'awaiting_payment', $5, $6, $7, $7)
ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
RETURNING id, tenant_id, idempotency_key, request_hash, status, currency, amount_total, created_at, updated_at`
	sqlOrderItemsInsert = `INSERT INTO order_items (tenant_id, order_id, line, sku, name, quantity, unit_amount, amount)
SELECT o.tenant_id, o.id,
       unnest($1::int[]), unnest($2::text[]), unnest($3::text[]),
       unnest($4::int[]), unnest($5::bigint[]), unnest($6::bigint[])
FROM orders o
WHERE o.tenant_id = $7::uuid AND o.id = $8::uuid`
	sqlOutboxInsert = `INSERT INTO outbox_events (id, tenant_id, event_type, aggregate_type, aggregate_id, idempotency_key, payload, occurred_at, trace_context)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`
	// sqlOrderInsertQueued is OrderInsertQueued: no ON CONFLICT (a taken
	// key fails the batch), nothing returned.
	sqlOrderInsertQueued = `INSERT INTO orders (id, tenant_id, idempotency_key, request_hash, status, currency, amount_total, created_at, updated_at)
VALUES ($1, $2, $3, $4, 'awaiting_payment', $5, $6, $7, $7)`
	sqlIdempotencyFinish = `UPDATE api_idempotency
SET state = $1, recovery_point = 'finished', locked_until = NULL,
    status_code = $2, response_headers = $3, response_body = $4,
    resource_type = $5, resource_id = $6,
    updated_at = $7, expires_at = $8
WHERE tenant_id = $9 AND operation = $10 AND idempotency_key = $11
  AND state = 'pending' AND held_at IS NULL`
)

// sqlCreate runs, directly on the database, the statements the service runs
// for one POST /v1/orders with a fresh key (orders.Service.Create): the
// unlocked fast-path lookup, then one transaction that claims the key, reads
// the catalog, inserts the order, its items and its outbox event, and stores
// the response. It writes real rows, like the service, so the two pay the
// same WAL and the same durable commit. What it leaves out is everything that
// is not SQL: HTTP, routing, authentication, validation, the fingerprint,
// logging.
type sqlCreate struct {
	// pool is the API's database: the replay's lookups (keys the API
	// created), the outbox backlog, the sweep, grown-data and keep-pace
	// comparisons. floor is where the floors write (openFloor; pool
	// itself with --floor-database "").
	pool        *pgxpool.Pool
	floor       *pgxpool.Pool
	tenantID    uuid.UUID
	fingerprint idempotency.Fingerprint
	retention   time.Duration
	lease       time.Duration
}

// newSQLCreate finds the tenant that owns apiKey and prepares the constant
// parts of every transaction.
func newSQLCreate(ctx context.Context, pool *pgxpool.Pool, apiKey string) (*sqlCreate, error) {
	t, err := tenants.NewService(pool, time.Now, tenants.WithCacheTTL(0), tenants.WithDemoKeys(true)).Authenticate(ctx, apiKey)
	if err != nil {
		return nil, fmt.Errorf("look up the tenant of the API key (is the API running in demo mode?): %w", err)
	}
	fp, err := idempotency.NewFingerprint(orders.OpCreate, nil, []byte(orderBody))
	if err != nil {
		return nil, fmt.Errorf("fingerprint the order body: %w", err)
	}
	return &sqlCreate{
		pool:        pool,
		floor:       pool,
		tenantID:    t.ID,
		fingerprint: fp,
		retention:   orders.Specs()[0].Retention,
		lease:       idempotency.DefaultLease, // the service's default IDEMPOTENCY_LEASE
	}, nil
}

// backlogNote reports the tenant's events not yet published, read right
// after a measured phase: a dispatcher that falls behind leaves its work
// after the phase, where the phase's throughput and CPU do not see it.
// (With --floor-database "", the sql floors' events are in it too: the
// API publishes them while the next phases run.) Nothing without a
// database.
func (s *sqlCreate) backlogNote(ctx context.Context) string {
	if s == nil {
		return ""
	}
	var n int64
	err := s.pool.QueryRow(ctx, "SELECT count(*) FROM outbox_events WHERE tenant_id = $1 AND published_at IS NULL AND stuck_at IS NULL", s.tenantID).Scan(&n)
	if err != nil {
		return fmt.Sprintf("  (outbox backlog unknown: %v)", err)
	}
	return fmt.Sprintf("  outbox backlog %d", n)
}

// The response and event shapes of an order, as the service encodes them
// (internal/orders/http.go), so the stored rows have the same size.
type (
	sqlItemJSON struct {
		SKU        string `json:"sku"`
		Name       string `json:"name"`
		Quantity   int    `json:"quantity"`
		UnitAmount int64  `json:"unit_amount"`
		Amount     int64  `json:"amount"`
	}
	sqlOrderJSON struct {
		ID          uuid.UUID     `json:"id"`
		Status      string        `json:"status"`
		Currency    string        `json:"currency"`
		AmountTotal int64         `json:"amount_total"`
		Items       []sqlItemJSON `json:"items"`
		CreatedAt   time.Time     `json:"created_at"`
	}
	sqlStoredHeaders struct {
		ContentType string `json:"Content-Type"`
		Location    string `json:"Location,omitempty"`
	}
)

// op returns the benchmark operation: one create under a fresh key, with
// the service's batching (sql).
func (s *sqlCreate) op() op {
	return func(ctx context.Context) error { return s.create(ctx, newKey()) }
}

// naiveOp returns one create under a fresh key, a round trip per statement
// (sql-naive).
func (s *sqlCreate) naiveOp() op {
	return func(ctx context.Context) error { return s.createNaive(ctx, newKey()) }
}

// lookupOp returns the SQL-equivalent of a replay: the service's unlocked
// fast-path lookup of a finished record, for each of keys in turn; keys must
// have been created through the API already.
func (s *sqlCreate) lookupOp(keys []string) op {
	var next atomic.Uint64
	return func(ctx context.Context) error {
		key := keys[next.Add(1)%uint64(len(keys))]
		row, err := s.lookup(ctx, s.pool, key)
		if err != nil {
			return fmt.Errorf("look up replay key: %w", err)
		}
		if row.state != string(idempotency.StateCompleted) || len(row.body) == 0 {
			return fmt.Errorf("replay key %s: state %s, want a completed record with a response", key, row.state)
		}
		return nil
	}
}

type sqlRecord struct {
	state string
	body  []byte
}

func (s *sqlCreate) lookup(ctx context.Context, db *pgxpool.Pool, key string) (sqlRecord, error) {
	rows, err := db.Query(ctx, sqlIdempotencyGet, s.tenantID, string(orders.OpCreate), key)
	if err != nil {
		return sqlRecord{}, err
	}
	return pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (sqlRecord, error) {
		vals, err := row.Values()
		if err != nil {
			return sqlRecord{}, err
		}
		r := sqlRecord{state: fmt.Sprint(vals[4])}
		r.body, _ = vals[10].([]byte)
		return r, nil
	})
}

// createNaive runs the statements of one order creation under key, each a
// round trip of its own: the lookup, BEGIN, the seven statements, COMMIT
// (nine round trips). It is the sequence before the service batched it,
// kept as a second floor (sql-naive): a service that pipelines must beat it.
func (s *sqlCreate) createNaive(ctx context.Context, key string) error {
	op := string(orders.OpCreate)
	requestID := strings.ReplaceAll(uuid.NewString(), "-", "") // 32 characters, like echo's request ids
	// What the service stores as the trace context of a request it does not
	// trace (tracing.Capture).
	var noTrace []byte

	// The fast path: a fresh key has no record.
	if _, err := s.lookup(ctx, s.floor, key); !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("fast-path lookup of a fresh key: want no row, got %w", err)
	}

	return postgres.InTx(ctx, s.floor, func(tx pgx.Tx) error {
		now := time.Now().UTC().Truncate(time.Microsecond)
		leaseUntil := now.Add(s.lease)
		rows, err := tx.Query(ctx, sqlIdempotencyInsert, s.tenantID, op, key, s.fingerprint[:], &leaseUntil, requestID, now, now.Add(s.retention), noTrace)
		if err != nil {
			return fmt.Errorf("claim key: %w", err)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("claim key: %w", err)
		}
		var (
			sku, name, currency string
			unitAmount          int64
		)
		rows, err = tx.Query(ctx, sqlProductGetMany, s.tenantID, []string{"travel-mug"})
		if err != nil {
			return fmt.Errorf("load products: %w", err)
		}
		n := 0
		for rows.Next() {
			var tenant uuid.UUID
			var stock int64
			if err := rows.Scan(&tenant, &sku, &name, &unitAmount, &currency, &stock); err != nil {
				return fmt.Errorf("load products: %w", err)
			}
			n++
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("load products: %w", err)
		}
		if n != 1 {
			return fmt.Errorf("load products: want 1 (travel-mug), got %d", n)
		}
		id, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("order id: %w", err)
		}
		var (
			orderID          uuid.UUID
			status           string
			createdAt        time.Time
			ignoredTenant    uuid.UUID
			ignoredKey       string
			ignoredHash      []byte
			ignoredCurrency  string
			ignoredTotal     int64
			ignoredUpdatedAt time.Time
		)
		if err := tx.QueryRow(ctx, sqlOrderInsert, id, s.tenantID, key, s.fingerprint[:], currency, unitAmount, now).
			Scan(&orderID, &ignoredTenant, &ignoredKey, &ignoredHash, &status, &ignoredCurrency, &ignoredTotal, &createdAt, &ignoredUpdatedAt); err != nil {
			return fmt.Errorf("insert order: %w", err)
		}
		if _, err := tx.Exec(ctx, sqlOrderItemsInsert, []int32{1}, []string{sku}, []string{name}, []int32{1}, []int64{unitAmount}, []int64{unitAmount}, s.tenantID, orderID); err != nil {
			return fmt.Errorf("insert order items: %w", err)
		}
		body, err := json.Marshal(sqlOrderJSON{
			ID: orderID, Status: status, Currency: currency, AmountTotal: unitAmount,
			Items:     []sqlItemJSON{{SKU: sku, Name: name, Quantity: 1, UnitAmount: unitAmount, Amount: unitAmount}},
			CreatedAt: createdAt.UTC(),
		})
		if err != nil {
			return fmt.Errorf("encode order: %w", err)
		}
		eventID, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("event id: %w", err)
		}
		if _, err := tx.Exec(ctx, sqlOutboxInsert, eventID, s.tenantID, "order.created", "order", orderID, key, body, now, noTrace); err != nil {
			return fmt.Errorf("append event: %w", err)
		}
		location := "/v1/orders/" + orderID.String()
		headers, err := json.Marshal(sqlStoredHeaders{ContentType: "application/json", Location: location})
		if err != nil {
			return fmt.Errorf("encode stored headers: %w", err)
		}
		status201, resourceType := int32(201), "order"
		if _, err := tx.Exec(ctx, sqlIdempotencyFinish, string(idempotency.StateCompleted), &status201, headers, body,
			&resourceType, &orderID, now, now.Add(s.retention), s.tenantID, op, key); err != nil {
			return fmt.Errorf("store response: %w", err)
		}
		return nil
	})
}

// create runs the statements of one order creation under key as the
// service sends them (operation.Batched, orders.createBatched): on one
// connection, the lookup, then BEGIN, the claim and the catalog read in one
// batch, then the order, its items, the event, the stored response and
// COMMIT in another: three round trips.
func (s *sqlCreate) create(ctx context.Context, key string) (err error) {
	op := string(orders.OpCreate)
	requestID := strings.ReplaceAll(uuid.NewString(), "-", "") // 32 characters, like echo's request ids
	// What the service stores as the trace context of a request it does not
	// trace (tracing.Capture).
	var noTrace []byte
	conn, err := s.floor.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	defer func() {
		if err != nil {
			postgres.RollbackOpen(ctx, conn)
		}
	}()
	rows, err := conn.Query(ctx, sqlIdempotencyGet, s.tenantID, op, key)
	if err != nil {
		return fmt.Errorf("fast-path lookup: %w", err)
	}
	if _, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[any]); !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("fast-path lookup of a fresh key: want no row, got %w", err)
	}

	now := time.Now().UTC().Truncate(time.Microsecond)
	leaseUntil := now.Add(s.lease)
	var (
		first               pgx.Batch
		claimed             int
		sku, name, currency string
		unitAmount          int64
		products            int
	)
	first.Queue("BEGIN")
	first.Queue(sqlIdempotencyInsert, s.tenantID, op, key, s.fingerprint[:], &leaseUntil, requestID, now, now.Add(s.retention), noTrace).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			claimed++
		}
		return rows.Err()
	})
	first.Queue(sqlProductGetMany, s.tenantID, []string{"travel-mug"}).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var tenant uuid.UUID
			var stock int64
			if err := rows.Scan(&tenant, &sku, &name, &unitAmount, &currency, &stock); err != nil {
				return err
			}
			products++
		}
		return rows.Err()
	})
	if err := conn.SendBatch(ctx, &first).Close(); err != nil {
		return fmt.Errorf("claim and load products: %w", err)
	}
	if claimed != 1 || products != 1 {
		return fmt.Errorf("claim and load products: claimed %d, products %d; want 1 and 1 (travel-mug)", claimed, products)
	}

	orderID, err := uuid.NewV7()
	if err != nil {
		return fmt.Errorf("order id: %w", err)
	}
	body, err := json.Marshal(sqlOrderJSON{
		ID: orderID, Status: "awaiting_payment", Currency: currency, AmountTotal: unitAmount,
		Items:     []sqlItemJSON{{SKU: sku, Name: name, Quantity: 1, UnitAmount: unitAmount, Amount: unitAmount}},
		CreatedAt: now,
	})
	if err != nil {
		return fmt.Errorf("encode order: %w", err)
	}
	eventID, err := uuid.NewV7()
	if err != nil {
		return fmt.Errorf("event id: %w", err)
	}
	headers, err := json.Marshal(sqlStoredHeaders{ContentType: "application/json", Location: "/v1/orders/" + orderID.String()})
	if err != nil {
		return fmt.Errorf("encode stored headers: %w", err)
	}
	status201, resourceType := int32(201), "order"
	var second pgx.Batch
	second.Queue(sqlOrderInsertQueued, orderID, s.tenantID, key, s.fingerprint[:], currency, unitAmount, now)
	second.Queue(sqlOrderItemsInsert, []int32{1}, []string{sku}, []string{name}, []int32{1}, []int64{unitAmount}, []int64{unitAmount}, s.tenantID, orderID)
	second.Queue(sqlOutboxInsert, eventID, s.tenantID, "order.created", "order", orderID, key, body, now, noTrace)
	second.Queue(sqlIdempotencyFinish, string(idempotency.StateCompleted), &status201, headers, body,
		&resourceType, &orderID, now, now.Add(s.retention), s.tenantID, op, key)
	second.Queue("COMMIT")
	if err := conn.SendBatch(ctx, &second).Close(); err != nil {
		return fmt.Errorf("write order and commit: %w", err)
	}
	return nil
}
