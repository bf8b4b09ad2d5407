package orders

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/orders/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/problem"
)

// Service creates and reads orders, and moves them through their lifecycle
// for the other features.
type Service struct {
	pool   *pgxpool.Pool
	now    func() time.Time
	create *operation.Local[CreateInput]
}

// NewService returns a Service whose idempotent operations run on ops.
func NewService(pool *pgxpool.Pool, ops *operation.Runner, now func() time.Time) *Service {
	s := &Service{pool: pool, now: now}
	s.create = operation.NewLocal(ops, OpCreate, s.createOrder, operation.WithBatches(s.createBatched))
	return s
}

func (s *Service) nowUTC() time.Time { return s.now().UTC().Truncate(time.Microsecond) }

// Create executes orders.create for req at most once. The returned response
// is either this execution's (201) or a stored one (Replayed). A late retry
// whose record expired gets the original order as it is now, with the status
// of the original outcome (201; see docs/CONTRACT.md).
func (s *Service) Create(ctx context.Context, req idempotency.Request, in CreateInput) (idempotency.Response, error) {
	return s.create.Run(ctx, req, in)
}

// createOrder is the mutation of orders.create: price the lines from the
// catalog, insert the order and its items, append order.created, and answer
// 201 with the order. When the tenant already has an order for this key (a
// late retry whose idempotency record has expired) it answers that order
// instead, provided the request is the same one.
func (s *Service) createOrder(ctx context.Context, tx pgx.Tx, a *operation.Attempt[CreateInput]) (operation.Outcome, error) {
	req, in := a.Claim.Request(), a.Data
	q := dbsqlc.New(tx)
	lines, total, err := price(ctx, q, req.TenantID, in)
	if err != nil {
		return operation.Outcome{}, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return operation.Outcome{}, fmt.Errorf("order id: %w", err)
	}
	now := s.nowUTC()
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
		order, err := s.lateRetry(ctx, q, a)
		if err != nil {
			return operation.Outcome{}, err
		}
		return finishCreated(ctx, tx, a, order)
	}
	if err != nil {
		return operation.Outcome{}, fmt.Errorf("insert order: %w", err)
	}
	lines.TenantID, lines.OrderID = row.TenantID, row.ID
	n, err := q.OrderItemsInsert(ctx, lines)
	if err != nil {
		return operation.Outcome{}, fmt.Errorf("insert order items: %w", err)
	}
	if n != int64(len(lines.Lines)) { // the lines are selected with the order row: never fewer under this transaction
		return operation.Outcome{}, fmt.Errorf("insert order items: %d of %d lines inserted", n, len(lines.Lines))
	}
	order := orderFromRows(row, itemRows(row, lines))
	if _, err := outbox.Append(ctx, tx, outbox.Event{
		TenantID:       req.TenantID,
		Type:           EventOrderCreated,
		AggregateType:  "order",
		AggregateID:    order.ID,
		IdempotencyKey: string(req.Key),
		OccurredAt:     now,
		Payload:        orderJSONFrom(order),
	}); err != nil {
		return operation.Outcome{}, err
	}
	return finishCreated(ctx, tx, a, order)
}

func finishCreated(ctx context.Context, tx pgx.Tx, a *operation.Attempt[CreateInput], order Order) (operation.Outcome, error) {
	body, err := encodeJSON(orderJSONFrom(order))
	if err != nil {
		return operation.Outcome{}, err
	}
	return a.Finish(ctx, tx, idempotency.Response{
		Status:      http.StatusCreated,
		ContentType: "application/json",
		Location:    "/v1/orders/" + order.ID.String(),
		Body:        body,
	}, &idempotency.Resource{Type: "order", ID: order.ID})
}

// price prices the requested lines from the tenant's catalog: the client
// names products and quantities, never prices. An unknown SKU and a product
// sold in another currency are validation errors of their line.
func price(ctx context.Context, q *dbsqlc.Queries, tenantID uuid.UUID, in CreateInput) (dbsqlc.OrderItemsInsertParams, int64, error) {
	rows, err := q.ProductGetMany(ctx, dbsqlc.ProductGetManyParams{TenantID: tenantID, Skus: skus(in)})
	if err != nil {
		return dbsqlc.OrderItemsInsertParams{}, 0, fmt.Errorf("load products: %w", err)
	}
	return priceFrom(rows, in)
}

// skus are the SKUs of the requested lines.
func skus(in CreateInput) []string {
	skus := make([]string, len(in.Items))
	for i, it := range in.Items {
		skus[i] = it.SKU
	}
	return skus
}

// priceFrom prices the requested lines from the catalog's rows for them.
func priceFrom(rows []dbsqlc.Product, in CreateInput) (dbsqlc.OrderItemsInsertParams, int64, error) {
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
		p.Quantities = append(p.Quantities, int32(it.Quantity)) // #nosec G115 -- validateCreate bounds the quantity to MaxQuantity
		p.UnitAmounts = append(p.UnitAmounts, prod.UnitAmount)
		p.Amounts = append(p.Amounts, amount)
	}
	if len(fields) > 0 {
		return dbsqlc.OrderItemsInsertParams{}, 0, problem.Validation(fields...)
	}
	return p, total, nil
}

// lateRetry loads the order the key already created although no idempotency
// record was found: the record expired and was swept. The business-level
// uniqueness of (tenant, key) on orders decides; the answer is the original
// order as it is now, or a key-reuse error for another request.
func (s *Service) lateRetry(ctx context.Context, q *dbsqlc.Queries, a *operation.Attempt[CreateInput]) (Order, error) {
	req := a.Claim.Request()
	row, err := q.OrderGetByIdempotencyKey(ctx, dbsqlc.OrderGetByIdempotencyKeyParams{TenantID: req.TenantID, IdempotencyKey: string(req.Key)})
	if err != nil {
		return Order{}, fmt.Errorf("load order by idempotency key: %w", err)
	}
	if err := a.LateRetry("order", row.ID.String(), row.RequestHash); err != nil {
		return Order{}, err
	}
	items, err := q.OrderItemsGet(ctx, dbsqlc.OrderItemsGetParams{TenantID: row.TenantID, OrderID: row.ID})
	if err != nil {
		return Order{}, fmt.Errorf("load order items: %w", err)
	}
	return orderFromRows(row, items), nil
}

// Get returns one of the tenant's orders; another tenant's order is
// ErrNotFound, exactly like one that does not exist.
func (s *Service) Get(ctx context.Context, tenantID, id uuid.UUID) (Order, error) {
	return getOrder(ctx, dbsqlc.New(s.pool), tenantID, id)
}

// GetTx is Get inside the caller's transaction.
func (s *Service) GetTx(ctx context.Context, tx pgx.Tx, tenantID, id uuid.UUID) (Order, error) {
	return getOrder(ctx, dbsqlc.New(tx), tenantID, id)
}

func getOrder(ctx context.Context, q *dbsqlc.Queries, tenantID, id uuid.UUID) (Order, error) {
	row, err := q.OrderGet(ctx, dbsqlc.OrderGetParams{TenantID: tenantID, ID: id})
	if err != nil {
		return Order{}, notFound(err, "load order")
	}
	items, err := q.OrderItemsGet(ctx, dbsqlc.OrderItemsGetParams{TenantID: row.TenantID, OrderID: row.ID})
	if err != nil {
		return Order{}, fmt.Errorf("load order items: %w", err)
	}
	return orderFromRows(row, items), nil
}

// LockForPayment locks one of the tenant's orders, in tx, for a payment to
// decide on it: concurrent payments of the order (under other keys) queue on
// the lock. The order comes without its items.
func (s *Service) LockForPayment(ctx context.Context, tx pgx.Tx, tenantID, id uuid.UUID) (Order, error) {
	row, err := dbsqlc.New(tx).OrderGetForUpdate(ctx, dbsqlc.OrderGetForUpdateParams{TenantID: tenantID, ID: id})
	if err != nil {
		return Order{}, notFound(err, "lock order")
	}
	return orderFromRows(row, nil), nil
}

// Advance moves the tenant's order id to status to, in tx, if the lifecycle allows it
// from where the order is (Status.Predecessors). It reports whether the
// order moved; an order already at to, or past it, stays as it is.
func (s *Service) Advance(ctx context.Context, tx pgx.Tx, tenantID, id uuid.UUID, to Status) (bool, error) {
	params, err := s.advanceParams(tenantID, id, to)
	if err != nil {
		return false, err
	}
	n, err := dbsqlc.New(tx).OrderAdvanceStatus(ctx, params)
	if err != nil {
		return false, fmt.Errorf("advance order %s to %s: %w", id, to, err)
	}
	return n == 1, nil
}

func (s *Service) advanceParams(tenantID, id uuid.UUID, to Status) (dbsqlc.OrderAdvanceStatusParams, error) {
	from := to.Predecessors()
	if len(from) == 0 {
		return dbsqlc.OrderAdvanceStatusParams{}, fmt.Errorf("advance order %s: nothing moves to %q", id, to)
	}
	names := make([]string, len(from))
	for i, st := range from {
		names[i] = string(st)
	}
	return dbsqlc.OrderAdvanceStatusParams{Status: string(to), Now: s.nowUTC(), TenantID: tenantID, ID: id, FromStatuses: names}, nil
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
	p := dbsqlc.OrderListNewestParams{TenantID: tenantID, MaxRows: int32(limit + 1)} // #nosec G115 -- limit is at most wire.MaxPageSize
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
	items, err := q.OrderItemsGetMany(ctx, dbsqlc.OrderItemsGetManyParams{TenantID: tenantID, OrderIds: ids})
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

// notFound is the one place where this package's queries' pgx.ErrNoRows
// becomes ErrNotFound.
func notFound(err error, what string) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	return fmt.Errorf("%s: %w", what, err)
}
