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

	"github.com/oncepay/oncepay/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/tenants"
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
	pool        *pgxpool.Pool
	tenantID    uuid.UUID
	fingerprint idempotency.Fingerprint
	retention   time.Duration
	lease       time.Duration
}

// newSQLCreate finds the tenant that owns apiKey and prepares the constant
// parts of every transaction.
func newSQLCreate(ctx context.Context, pool *pgxpool.Pool, apiKey string) (*sqlCreate, error) {
	h := tenants.HashKey(apiKey)
	t, err := dbsqlc.New(pool).TenantGetByAPIKeyHash(ctx, h[:])
	if err != nil {
		return nil, fmt.Errorf("look up the tenant of the API key (is the API running in demo mode?): %w", err)
	}
	fp, err := idempotency.NewFingerprint(idempotency.OpOrdersCreate, nil, []byte(orderBody))
	if err != nil {
		return nil, fmt.Errorf("fingerprint the order body: %w", err)
	}
	return &sqlCreate{
		pool:        pool,
		tenantID:    t.ID,
		fingerprint: fp,
		retention:   idempotency.DefaultPolicy()[idempotency.OpOrdersCreate],
		lease:       30 * time.Second, // the service's default IDEMPOTENCY_LEASE
	}, nil
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

// op returns the benchmark operation: one create under a fresh key.
func (s *sqlCreate) op() op {
	return func(ctx context.Context) error { return s.create(ctx, newKey()) }
}

// lookupOp returns the SQL-equivalent of a replay: the service's unlocked
// fast-path lookup of a finished record, for each of keys in turn; keys must
// have been created through the API already.
func (s *sqlCreate) lookupOp(keys []string) op {
	var next atomic.Uint64
	return func(ctx context.Context) error {
		key := keys[next.Add(1)%uint64(len(keys))]
		row, err := dbsqlc.New(s.pool).IdempotencyGet(ctx, dbsqlc.IdempotencyGetParams{
			TenantID: s.tenantID, Operation: string(idempotency.OpOrdersCreate), IdempotencyKey: key,
		})
		if err != nil {
			return fmt.Errorf("look up replay key: %w", err)
		}
		if row.State != idempotency.StateCompleted || len(row.ResponseBody) == 0 {
			return fmt.Errorf("replay key %s: state %s, want a completed record with a response", key, row.State)
		}
		return nil
	}
}

// create runs the statements of one order creation under key, in the
// service's order.
func (s *sqlCreate) create(ctx context.Context, key string) error {
	const op = idempotency.OpOrdersCreate
	requestID := strings.ReplaceAll(uuid.NewString(), "-", "") // 32 characters, like echo's request ids

	// The fast path: a fresh key has no record.
	_, err := dbsqlc.New(s.pool).IdempotencyGet(ctx, dbsqlc.IdempotencyGetParams{
		TenantID: s.tenantID, Operation: string(op), IdempotencyKey: key,
	})
	if !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("fast-path lookup of a fresh key: want no row, got %w", err)
	}

	return postgres.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		q := dbsqlc.New(tx)
		now := time.Now().UTC().Truncate(time.Microsecond)
		leaseUntil := now.Add(s.lease)
		if _, err := q.IdempotencyInsert(ctx, dbsqlc.IdempotencyInsertParams{
			TenantID:       s.tenantID,
			Operation:      string(op),
			IdempotencyKey: key,
			RequestHash:    s.fingerprint[:],
			LockedUntil:    &leaseUntil,
			RequestID:      requestID,
			CreatedAt:      now,
			ExpiresAt:      now.Add(s.retention),
		}); err != nil {
			return fmt.Errorf("claim key: %w", err)
		}
		products, err := q.ProductGetMany(ctx, dbsqlc.ProductGetManyParams{TenantID: s.tenantID, Skus: []string{"travel-mug"}})
		if err != nil {
			return fmt.Errorf("load products: %w", err)
		}
		if len(products) != 1 {
			return fmt.Errorf("load products: want 1 (travel-mug), got %d", len(products))
		}
		p := products[0]
		id, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("order id: %w", err)
		}
		order, err := q.OrderInsert(ctx, dbsqlc.OrderInsertParams{
			ID:             id,
			TenantID:       s.tenantID,
			IdempotencyKey: key,
			RequestHash:    s.fingerprint[:],
			Currency:       p.Currency,
			AmountTotal:    p.UnitAmount,
			CreatedAt:      now,
		})
		if err != nil {
			return fmt.Errorf("insert order: %w", err)
		}
		if err := q.OrderItemsInsert(ctx, dbsqlc.OrderItemsInsertParams{
			OrderID:     order.ID,
			Lines:       []int32{1},
			Skus:        []string{p.Sku},
			Names:       []string{p.Name},
			Quantities:  []int32{1},
			UnitAmounts: []int64{p.UnitAmount},
			Amounts:     []int64{p.UnitAmount},
		}); err != nil {
			return fmt.Errorf("insert order items: %w", err)
		}
		body, err := json.Marshal(sqlOrderJSON{
			ID: order.ID, Status: order.Status, Currency: order.Currency, AmountTotal: order.AmountTotal,
			Items:     []sqlItemJSON{{SKU: p.Sku, Name: p.Name, Quantity: 1, UnitAmount: p.UnitAmount, Amount: p.UnitAmount}},
			CreatedAt: order.CreatedAt.UTC(),
		})
		if err != nil {
			return fmt.Errorf("encode order: %w", err)
		}
		eventID, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("event id: %w", err)
		}
		if err := q.OutboxInsert(ctx, dbsqlc.OutboxInsertParams{
			ID:             eventID,
			TenantID:       s.tenantID,
			EventType:      "order.created",
			AggregateType:  "order",
			AggregateID:    order.ID,
			IdempotencyKey: key,
			Payload:        body,
			OccurredAt:     now,
		}); err != nil {
			return fmt.Errorf("append event: %w", err)
		}
		location := "/v1/orders/" + order.ID.String()
		headers, err := json.Marshal(sqlStoredHeaders{ContentType: "application/json", Location: location})
		if err != nil {
			return fmt.Errorf("encode stored headers: %w", err)
		}
		status, resourceType := int32(201), "order"
		if err := q.IdempotencyFinish(ctx, dbsqlc.IdempotencyFinishParams{
			State:           idempotency.StateCompleted,
			StatusCode:      &status,
			ResponseHeaders: headers,
			ResponseBody:    body,
			ResourceType:    &resourceType,
			ResourceID:      &order.ID,
			Now:             now,
			ExpiresAt:       now.Add(s.retention),
			TenantID:        s.tenantID,
			Operation:       string(op),
			IdempotencyKey:  key,
		}); err != nil {
			return fmt.Errorf("store response: %w", err)
		}
		return nil
	})
}
