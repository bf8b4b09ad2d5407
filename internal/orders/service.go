package orders

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/orders/internal/dbsqlc"
)

// Service creates and reads orders, and moves them through their lifecycle
// for the other features.
type Service struct {
	pool        *pgxpool.Pool
	now         func() time.Time
	livePayment LivePayment
	create      *operation.Phases[CreateInput]
	cancel      *operation.Phases[CancelInput]
}

// Option configures a Service.
type Option func(*Service)

// NewService returns a Service whose idempotent operations run on ops.
func NewService(pool *pgxpool.Pool, ops *operation.Runner, now func() time.Time, opts ...Option) *Service {
	s := &Service{pool: pool, now: now}
	for _, o := range opts {
		o(s)
	}
	s.create = operation.NewPhases(ops, OpCreate, s.createSteps())
	s.cancel = operation.NewPhases(ops, OpCancel, s.cancelSteps())
	return s
}

func (s *Service) nowUTC() time.Time { return s.now().UTC().Truncate(time.Microsecond) }

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
