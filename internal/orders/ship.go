package orders

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/orders/internal/dbsqlc"
)

// ErrNoLines is returned by Ship for an order without lines: nothing could
// ever be shipped, and no retry changes that.
var ErrNoLines = errors.New("order has no lines")

// ShipResult says what Ship did.
type ShipResult int

// The results of Ship.
const (
	// Shipped: every line taken out of stock, the order fulfilled.
	Shipped ShipResult = iota + 1
	// NotPaid: the order is not paid (not yet, already fulfilled, or refunded
	// first); nothing was done.
	NotPaid
	// Backordered: a line is short of stock (or its product is gone);
	// nothing was taken and the order stays paid.
	Backordered
)

// Line is one line of a shipment.
type Line struct {
	SKU      string
	Name     string
	Quantity int32
	// InStock is what the catalog held when the line was short.
	InStock int64
}

// Shipment is what Ship did to an order.
type Shipment struct {
	Result ShipResult
	Order  Order
	// Lines are every line of the order (Shipped, Backordered).
	Lines []Line
	// Short are the lines that lacked stock (Backordered).
	Short []Line
}

// Ship fulfills one of the tenant's paid orders in tx: it locks the order
// and its products (in SKU order, so concurrent shipments cannot deadlock)
// and either takes every line out of stock and moves the order to
// fulfilled, or, when any line is short, takes nothing and leaves the order
// paid. Stock never goes negative (products.stock also has CHECK (stock >=
// 0)). Only a paid order ships: an order refunded before its payment's
// event arrived is not shipped, a business-level guard that outlives any
// consumer's inbox.
func (s *Service) Ship(ctx context.Context, tx pgx.Tx, tenantID, id uuid.UUID) (Shipment, error) {
	q := dbsqlc.New(tx)
	row, err := q.OrderGetForUpdate(ctx, dbsqlc.OrderGetForUpdateParams{TenantID: tenantID, ID: id})
	if err != nil {
		return Shipment{}, notFound(err, "lock order")
	}
	sh := Shipment{Order: orderFromRows(row, nil)}
	if sh.Order.Status != StatusPaid {
		sh.Result = NotPaid
		return sh, nil
	}
	stock, err := q.OrderLockStock(ctx, dbsqlc.OrderLockStockParams{TenantID: tenantID, OrderID: id})
	if err != nil {
		return Shipment{}, fmt.Errorf("lock stock of order %s: %w", id, err)
	}
	for _, st := range stock {
		sh.Lines = append(sh.Lines, Line{SKU: st.Sku, Name: st.Name, Quantity: st.Quantity})
		if st.Stock < int64(st.Quantity) {
			sh.Short = append(sh.Short, Line{SKU: st.Sku, Name: st.Name, Quantity: st.Quantity, InStock: st.Stock})
		}
	}
	if len(stock) == 0 || int(stock[0].OrderLines) != len(stock) {
		// A line names a product the catalog no longer has: it cannot ship.
		if sh.Short, err = missingLines(ctx, q, tenantID, id, stock, sh.Short); err != nil {
			return Shipment{}, err
		}
	}
	if len(sh.Short) > 0 {
		sh.Result = Backordered
		return sh, nil
	}
	taken, err := q.OrderTakeStock(ctx, dbsqlc.OrderTakeStockParams{TenantID: tenantID, OrderID: id})
	if err != nil {
		return Shipment{}, fmt.Errorf("take stock for order %s: %w", id, err)
	}
	if taken != int64(len(sh.Lines)) { // cannot happen under the row locks; never ship half an order
		return Shipment{}, fmt.Errorf("take stock for order %s: %d of %d lines taken", id, taken, len(sh.Lines))
	}
	moved, err := s.Advance(ctx, tx, tenantID, id, StatusFulfilled)
	if err != nil {
		return Shipment{}, err
	}
	if !moved { // the order is locked and paid; a refusal here is a bug
		return Shipment{}, fmt.Errorf("mark order %s fulfilled: status did not advance", id)
	}
	sh.Result = Shipped
	sh.Order.Status = StatusFulfilled
	return sh, nil
}

// missingLines adds to short the lines of the order whose product is not in
// the catalog (they have no row in stock).
func missingLines(ctx context.Context, q *dbsqlc.Queries, tenantID, orderID uuid.UUID, stock []dbsqlc.OrderLockStockRow, short []Line) ([]Line, error) {
	items, err := q.OrderItemsGet(ctx, dbsqlc.OrderItemsGetParams{TenantID: tenantID, OrderID: orderID})
	if err != nil {
		return nil, fmt.Errorf("load items of order %s: %w", orderID, err)
	}
	found := make(map[string]bool, len(stock))
	for _, st := range stock {
		found[st.Sku] = true
	}
	for _, it := range items {
		if !found[it.Sku] {
			short = append(short, Line{SKU: it.Sku, Name: it.Name, Quantity: it.Quantity})
		}
	}
	if len(short) == 0 { // an order without lines: nothing to ship is nothing to take
		return nil, fmt.Errorf("order %s: %w", orderID, ErrNoLines)
	}
	return short, nil
}
