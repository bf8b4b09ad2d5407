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
	sqlProductGetMany                = `SELECT tenant_id, sku, name, unit_amount, currency, stock FROM products WHERE tenant_id = $1 AND sku = ANY($2::text[])`
	sqlOrderGetByIdempotencyKey      = `SELECT id, tenant_id, idempotency_key, request_hash, status, currency, amount_total, created_at, updated_at FROM orders WHERE tenant_id = $1 AND idempotency_key = $2`
	sqlOrderItemsGetByIdempotencyKey = `SELECT i.order_id, i.line, i.sku, i.name, i.quantity, i.unit_amount, i.amount, i.tenant_id FROM order_items i
JOIN orders o ON o.tenant_id = i.tenant_id AND o.id = i.order_id
WHERE o.tenant_id = $1 AND i.tenant_id = $1 AND o.idempotency_key = $2
ORDER BY i.line`
	sqlOrderInsert = `INSERT INTO orders (id, tenant_id, idempotency_key, request_hash, status, currency, amount_total, created_at, updated_at)
VALUES ($1, $2, $3, $4, 'awaiting_payment', $5, $6, $7, $7)`
	sqlOrderItemsInsert = `INSERT INTO order_items (tenant_id, order_id, line, sku, name, quantity, unit_amount, amount)
SELECT o.tenant_id, o.id,
       unnest($1::int[]), unnest($2::text[]), unnest($3::text[]),
       unnest($4::int[]), unnest($5::bigint[]), unnest($6::bigint[])
FROM orders o
WHERE o.tenant_id = $7::uuid AND o.id = $8::uuid`
	sqlOutboxInsert = `INSERT INTO outbox_events (id, tenant_id, event_type, aggregate_type, aggregate_id, idempotency_key, payload, occurred_at, trace_context)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`
	sqlIdempotencyFinish = `UPDATE api_idempotency
SET state = $1, recovery_point = 'finished', locked_until = NULL,
    status_code = $2, response_headers = $3, response_body = $4,
    resource_type = $5, resource_id = $6,
    updated_at = $7, expires_at = $8
WHERE tenant_id = $9 AND operation = $10 AND idempotency_key = $11
  AND state = 'pending' AND held_at IS NULL
RETURNING state`
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

// statement is one of the create's statements with its arguments; read
// reads its rows (nil: none to read).
type statement struct {
	sql  string
	args []any
	read func(pgx.Rows) error
}

// statements are the create's statements under key, as the service runs
// them in its transaction (orders.Service.createOrder): the claim, the
// catalog's rows and the key's order and lines (a fresh key has none),
// then the order, its lines, its event and the stored answer. reads are
// the first send's, writes the second's.
func (s *sqlCreate) statements(key string) (reads, writes func() ([]statement, error)) {
	op := string(orders.OpCreate)
	requestID := strings.ReplaceAll(uuid.NewString(), "-", "") // 32 characters, like echo's request ids
	// What the service stores as the trace context of a request it does not
	// trace (tracing.Capture).
	var noTrace []byte
	now := time.Now().UTC().Truncate(time.Microsecond)
	leaseUntil := now.Add(s.lease)
	var (
		claimed, products, found int
		sku, name, currency      string
		unitAmount               int64
	)
	count := func(n *int) func(pgx.Rows) error {
		return func(rows pgx.Rows) error {
			for rows.Next() {
				*n++
			}
			return rows.Err()
		}
	}
	reads = func() ([]statement, error) {
		return []statement{
			{sqlIdempotencyInsert, []any{s.tenantID, op, key, s.fingerprint[:], &leaseUntil, requestID, now, now.Add(s.retention), noTrace}, count(&claimed)},
			{sqlProductGetMany, []any{s.tenantID, []string{"travel-mug"}}, func(rows pgx.Rows) error {
				for rows.Next() {
					var tenant uuid.UUID
					var stock int64
					if err := rows.Scan(&tenant, &sku, &name, &unitAmount, &currency, &stock); err != nil {
						return err
					}
					products++
				}
				return rows.Err()
			}},
			{sqlOrderGetByIdempotencyKey, []any{s.tenantID, key}, count(&found)},
			{sqlOrderItemsGetByIdempotencyKey, []any{s.tenantID, key}, count(&found)},
		}, nil
	}
	writes = func() ([]statement, error) {
		if claimed != 1 || products != 1 || found != 0 {
			return nil, fmt.Errorf("claimed %d, products %d, the key's order and lines %d; want 1, 1 (travel-mug) and 0", claimed, products, found)
		}
		orderID, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("order id: %w", err)
		}
		body, err := json.Marshal(sqlOrderJSON{
			ID: orderID, Status: "awaiting_payment", Currency: currency, AmountTotal: unitAmount,
			Items:     []sqlItemJSON{{SKU: sku, Name: name, Quantity: 1, UnitAmount: unitAmount, Amount: unitAmount}},
			CreatedAt: now,
		})
		if err != nil {
			return nil, fmt.Errorf("encode order: %w", err)
		}
		eventID, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("event id: %w", err)
		}
		headers, err := json.Marshal(sqlStoredHeaders{ContentType: "application/json", Location: "/v1/orders/" + orderID.String()})
		if err != nil {
			return nil, fmt.Errorf("encode stored headers: %w", err)
		}
		status201, resourceType := int32(201), "order"
		var stored int
		return []statement{
			{sqlOrderInsert, []any{orderID, s.tenantID, key, s.fingerprint[:], currency, unitAmount, now}, nil},
			{sqlOrderItemsInsert, []any{[]int32{1}, []string{sku}, []string{name}, []int32{1}, []int64{unitAmount}, []int64{unitAmount}, s.tenantID, orderID}, nil},
			{sqlOutboxInsert, []any{eventID, s.tenantID, "order.created", "order", orderID, key, body, now, noTrace}, nil},
			{sqlIdempotencyFinish, []any{string(idempotency.StateCompleted), &status201, headers, body,
				&resourceType, &orderID, now, now.Add(s.retention), s.tenantID, op, key}, count(&stored)},
		}, nil
	}
	return reads, writes
}

// fresh checks that a fresh key has no record: the fast-path lookup.
func (s *sqlCreate) fresh(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, key string) error {
	rows, err := db.Query(ctx, sqlIdempotencyGet, s.tenantID, string(orders.OpCreate), key)
	if err != nil {
		return fmt.Errorf("fast-path lookup: %w", err)
	}
	if _, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[any]); !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("fast-path lookup of a fresh key: want no row, got %w", err)
	}
	return nil
}

// createNaive runs the statements of one order creation under key, each a
// round trip of its own: the lookup, BEGIN, the eight statements, COMMIT
// (eleven round trips). It is a second floor (sql-naive): a service that
// pipelines must beat it.
func (s *sqlCreate) createNaive(ctx context.Context, key string) error {
	if err := s.fresh(ctx, s.floor, key); err != nil {
		return err
	}
	reads, writes := s.statements(key)
	return postgres.InTx(ctx, s.floor, func(tx pgx.Tx) error {
		for _, stage := range []func() ([]statement, error){reads, writes} {
			sts, err := stage()
			if err != nil {
				return err
			}
			for _, st := range sts {
				rows, err := tx.Query(ctx, st.sql, st.args...)
				if err != nil {
					return err
				}
				if st.read != nil {
					err = st.read(rows)
				}
				rows.Close()
				if err := errors.Join(err, rows.Err()); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// create runs the statements of one order creation under key as the
// service sends them (orders.Service.createOrder in an operation.Batch): on
// one connection, the lookup, then BEGIN, the claim and the reads in one
// batch, then the order, its items, the event, the stored response and
// COMMIT in another: three round trips.
func (s *sqlCreate) create(ctx context.Context, key string) (err error) {
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
	if err := s.fresh(ctx, conn, key); err != nil {
		return err
	}
	reads, writes := s.statements(key)
	for i, stage := range []func() ([]statement, error){reads, writes} {
		sts, err := stage()
		if err != nil {
			return err
		}
		var b pgx.Batch
		if i == 0 {
			b.Queue("BEGIN")
		}
		for _, st := range sts {
			q := b.Queue(st.sql, st.args...)
			if st.read != nil {
				q.Query(st.read)
			}
		}
		if i == 1 {
			b.Queue("COMMIT")
		}
		if err := conn.SendBatch(ctx, &b).Close(); err != nil {
			return err
		}
	}
	return nil
}
