package orders

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/problem"
)

// Service creates and reads orders.
type Service struct {
	pool         *pgxpool.Pool
	idem         *idempotency.Store
	logger       *slog.Logger
	now          func() time.Time
	writeTimeout time.Duration
	events       *outbox.Signal
}

// NewService returns a Service. writeTimeout bounds a create once it has
// started: a started create runs to its end even if the client goes away
// (its context is detached from the request), so a lost response never
// leaves half a decision behind and the retry is answered by a replay.
// events is told after every commit that appended an order.created event
// (nil: nobody is told; the dispatcher finds it at its next poll).
func NewService(pool *pgxpool.Pool, idem *idempotency.Store, events *outbox.Signal, logger *slog.Logger, now func() time.Time, writeTimeout time.Duration) *Service {
	return &Service{pool: pool, idem: idem, events: events, logger: logger, now: now, writeTimeout: writeTimeout}
}

// Create executes orders.create for req at most once. The returned response
// is either this execution's (201) or a stored one (Replayed). A late retry
// whose record expired gets the original order as it is now, with the status
// of the original outcome (201; see docs/CONTRACT.md).
func (s *Service) Create(ctx context.Context, req idempotency.Request, in CreateInput) (idempotency.Response, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.writeTimeout)
	defer cancel()

	// Fast path: a finished record is immutable, so a replay needs no lock
	// and no write transaction.
	if resp, err := s.idem.Lookup(ctx, s.pool, req); err != nil || resp != nil {
		if resp != nil {
			return *resp, nil
		}
		return idempotency.Response{}, err
	}

	var resp idempotency.Response
	err := postgres.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		claim, err := s.idem.Begin(ctx, tx, req)
		if err != nil {
			return err
		}
		if claim.Replay != nil {
			resp = *claim.Replay
			return nil
		}
		order, err := s.create(ctx, tx, req, in)
		if err != nil {
			return err
		}
		body, err := encodeJSON(orderJSONFrom(order))
		if err != nil {
			return err
		}
		resp, err = claim.Finish(ctx, tx, idempotency.Response{
			Status:      http.StatusCreated,
			ContentType: "application/json",
			Location:    "/v1/orders/" + order.ID.String(),
			Body:        body,
		}, &idempotency.Resource{Type: "order", ID: order.ID})
		return err
	})
	if err != nil {
		return idempotency.Response{}, err
	}
	if !resp.Replayed {
		s.events.Committed()
	}
	return resp, nil
}

// create inserts the order, its items and its outbox event. When the tenant
// already has an order for this key (a late retry whose idempotency record
// has expired) it returns that order instead, provided the request is the
// same one.
func (s *Service) create(ctx context.Context, tx pgx.Tx, req idempotency.Request, in CreateInput) (Order, error) {
	q := dbsqlc.New(tx)
	skus := make([]string, len(in.Items))
	for i, it := range in.Items {
		skus[i] = it.SKU
	}
	rows, err := q.ProductGetMany(ctx, dbsqlc.ProductGetManyParams{TenantID: req.TenantID, Skus: skus})
	if err != nil {
		return Order{}, fmt.Errorf("load products: %w", err)
	}
	catalog := make(map[string]dbsqlc.Product, len(rows))
	for _, r := range rows {
		catalog[r.Sku] = r
	}
	p := dbsqlc.OrderItemsInsertParams{}
	var total int64
	var fields []problem.FieldError
	for i, it := range in.Items {
		prod, ok := catalog[it.SKU]
		switch {
		case !ok:
			fields = append(fields, problem.FieldError{Field: fmt.Sprintf("items[%d].sku", i), Message: "unknown SKU"})
			continue
		case prod.Currency != in.Currency:
			fields = append(fields, problem.FieldError{Field: fmt.Sprintf("items[%d].sku", i), Message: fmt.Sprintf("priced in %s, not %s", prod.Currency, in.Currency)})
			continue
		}
		amount := prod.UnitAmount * int64(it.Quantity) // both bounded: no overflow
		total += amount
		p.Lines = append(p.Lines, int32(i+1))
		p.Skus = append(p.Skus, prod.Sku)
		p.Names = append(p.Names, prod.Name)
		p.Quantities = append(p.Quantities, int32(it.Quantity))
		p.UnitAmounts = append(p.UnitAmounts, prod.UnitAmount)
		p.Amounts = append(p.Amounts, amount)
	}
	if len(fields) > 0 {
		return Order{}, problem.Validation(fields...)
	}

	id, err := uuid.NewV7()
	if err != nil {
		return Order{}, fmt.Errorf("order id: %w", err)
	}
	now := s.now().UTC().Truncate(time.Microsecond)
	row, err := q.OrderInsert(ctx, dbsqlc.OrderInsertParams{
		ID:             id,
		TenantID:       req.TenantID,
		IdempotencyKey: string(req.Key),
		RequestHash:    req.Fingerprint[:],
		Currency:       in.Currency,
		AmountTotal:    total,
		CreatedAt:      now,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return s.lateRetry(ctx, q, req)
	}
	if err != nil {
		return Order{}, fmt.Errorf("insert order: %w", err)
	}
	p.OrderID = row.ID
	if err := q.OrderItemsInsert(ctx, p); err != nil {
		return Order{}, fmt.Errorf("insert order items: %w", err)
	}
	items := make([]dbsqlc.OrderItem, len(p.Lines))
	for i := range p.Lines {
		items[i] = dbsqlc.OrderItem{OrderID: row.ID, Line: p.Lines[i], Sku: p.Skus[i], Name: p.Names[i],
			Quantity: p.Quantities[i], UnitAmount: p.UnitAmounts[i], Amount: p.Amounts[i]}
	}
	order := orderFromRows(row, items)
	if _, err := outbox.Append(ctx, tx, outbox.Event{
		TenantID:       req.TenantID,
		Type:           EventOrderCreated,
		AggregateType:  "order",
		AggregateID:    order.ID,
		IdempotencyKey: string(req.Key),
		OccurredAt:     now,
		Payload:        orderJSONFrom(order),
	}); err != nil {
		return Order{}, err
	}
	return order, nil
}

// lateRetry answers a request whose key already created an order although no
// idempotency record was found: the record expired and was swept. The
// business-level uniqueness of (tenant, key) on orders decides; the answer is
// the original order as it is now, or a key-reuse error for another request.
func (s *Service) lateRetry(ctx context.Context, q *dbsqlc.Queries, req idempotency.Request) (Order, error) {
	row, err := q.OrderGetByIdempotencyKey(ctx, dbsqlc.OrderGetByIdempotencyKeyParams{TenantID: req.TenantID, IdempotencyKey: string(req.Key)})
	if err != nil {
		return Order{}, fmt.Errorf("load order by idempotency key: %w", err)
	}
	if !bytes.Equal(row.RequestHash, req.Fingerprint[:]) {
		return Order{}, problem.New(problem.IdempotencyKeyReused,
			"This Idempotency-Key already created order %s with a different request.", row.ID)
	}
	items, err := q.OrderItemsGet(ctx, row.ID)
	if err != nil {
		return Order{}, fmt.Errorf("load order items: %w", err)
	}
	s.idem.Observe(req.Operation, idempotency.OutcomeLateRetry)
	s.logger.InfoContext(ctx, "late retry answered with the original order",
		"idempotency_key", string(req.Key), "order_id", row.ID, "request_id", req.RequestID)
	return orderFromRows(row, items), nil
}

// Get returns one of the tenant's orders; another tenant's order is not
// found, exactly like one that does not exist.
func (s *Service) Get(ctx context.Context, tenantID, id uuid.UUID) (Order, error) {
	q := dbsqlc.New(s.pool)
	row, err := q.OrderGet(ctx, dbsqlc.OrderGetParams{TenantID: tenantID, ID: id})
	if err != nil {
		return Order{}, postgres.NotFound(err)
	}
	items, err := q.OrderItemsGet(ctx, row.ID)
	if err != nil {
		return Order{}, fmt.Errorf("load order items: %w", err)
	}
	return orderFromRows(row, items), nil
}

// Cursor is a position in the newest-first list of orders.
type Cursor struct {
	CreatedAt time.Time
	ID        uuid.UUID
}

// List returns up to limit orders older than after (all when nil), newest
// first, and the cursor of the next page (nil at the end).
func (s *Service) List(ctx context.Context, tenantID uuid.UUID, limit int, after *Cursor) ([]Order, *Cursor, error) {
	q := dbsqlc.New(s.pool)
	p := dbsqlc.OrderListNewestParams{TenantID: tenantID, MaxRows: int32(limit + 1)}
	if after != nil {
		p.HasCursor, p.CursorCreatedAt, p.CursorID = true, after.CreatedAt, after.ID
	}
	rows, err := q.OrderListNewest(ctx, p)
	if err != nil {
		return nil, nil, fmt.Errorf("list orders: %w", err)
	}
	var next *Cursor
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[len(rows)-1]
		next = &Cursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	ids := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	items, err := q.OrderItemsGetMany(ctx, ids)
	if err != nil {
		return nil, nil, fmt.Errorf("list order items: %w", err)
	}
	byOrder := make(map[uuid.UUID][]dbsqlc.OrderItem, len(rows))
	for _, it := range items {
		byOrder[it.OrderID] = append(byOrder[it.OrderID], it)
	}
	out := make([]Order, len(rows))
	for i, r := range rows {
		out[i] = orderFromRows(r, byOrder[r.ID])
	}
	return out, next, nil
}

// Products returns the tenant's catalog.
func (s *Service) Products(ctx context.Context, tenantID uuid.UUID) ([]Product, error) {
	rows, err := dbsqlc.New(s.pool).ProductList(ctx, tenantID)
	if err != nil {
		return nil, fmt.Errorf("list products: %w", err)
	}
	out := make([]Product, len(rows))
	for i, r := range rows {
		out[i] = productFromRow(r)
	}
	return out, nil
}
