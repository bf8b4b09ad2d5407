// Package orders owns the product catalog, its stock and orders: the local
// mutation of the service, and the order's lifecycle.
//
// Creating an order is the textbook idempotent write, an operation of one
// step (operation.Phases; create.go): one transaction claims the
// idempotency key, inserts the order, appends the order.created outbox event
// and stores the response. Besides the idempotency record, which expires, an
// order keeps the key that created it under a unique constraint for its
// whole life: a genuine late retry after the record is gone still finds the
// original order.
//
// The lifecycle is a typed Status with forward-only transitions decided here
// (Transitions); payments and fulfillment move an order only through
// this package (Service.Advance, Service.Ship), inside their own
// transactions. No other package touches the orders, order_items or products
// tables: their queries are in internal/orders/internal/dbsqlc.
package orders

import (
	"errors"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/orders/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/retention"
)

// The operations of this package: POST /v1/orders and POST
// /v1/orders/{id}/cancel.
const (
	OpCreate idempotency.Operation = "orders.create"
	OpCancel idempotency.Operation = "orders.cancel"
)

// Specs declares the package's operations for the service's registry.
// orders.create keeps its records 7 days, well past any client's retry
// loop; after that, the order's own unique (tenant, idempotency key) still
// returns the original order. orders.cancel keeps them as long; after that
// a cancel of a cancelled order answers as the first did (cancel.go).
func Specs() []operation.Spec {
	return []operation.Spec{
		{Name: OpCreate, Retention: 7 * retention.Day, Covers: []retention.Horizon{retention.HorizonClientRetry}},
		{Name: OpCancel, Retention: 7 * retention.Day, Covers: []retention.Horizon{retention.HorizonClientRetry}},
	}
}

// ErrNotFound is returned for an order the tenant does not have (another
// tenant's order is not found either).
var ErrNotFound = errors.New("no such order")

// Status is where an order is in its lifecycle. It only moves forward,
// along Transitions:
//
//	awaiting_payment   -> paid, cancelled
//	paid               -> fulfilled, partially_refunded, refunded
//	fulfilled          -> partially_refunded, refunded
//	partially_refunded -> refunded
//
// A paid order may be refunded before it ships (it is never shipped then);
// nothing is ever taken back. A cancelled order is final: it is never paid.
type Status string

// The statuses, in lifecycle order.
const (
	StatusAwaitingPayment   Status = "awaiting_payment"
	StatusPaid              Status = "paid"
	StatusFulfilled         Status = "fulfilled"
	StatusPartiallyRefunded Status = "partially_refunded"
	StatusRefunded          Status = "refunded"
	StatusCancelled         Status = "cancelled"
)

// Statuses returns every status in lifecycle order: every transition leads
// to a later one (the orders.status CHECK and the OpenAPI enum list the
// same; tests keep them equal).
func Statuses() []Status {
	return []Status{StatusAwaitingPayment, StatusPaid, StatusFulfilled, StatusPartiallyRefunded, StatusRefunded, StatusCancelled}
}

// Transitions is the lifecycle: the statuses an order in each status may
// move to, and nothing else.
func Transitions() map[Status][]Status {
	return map[Status][]Status{
		StatusAwaitingPayment:   {StatusPaid, StatusCancelled},
		StatusPaid:              {StatusFulfilled, StatusPartiallyRefunded, StatusRefunded},
		StatusFulfilled:         {StatusPartiallyRefunded, StatusRefunded},
		StatusPartiallyRefunded: {StatusRefunded},
	}
}

// Valid reports whether s is a status of the lifecycle.
func (s Status) Valid() bool { return slices.Contains(Statuses(), s) }

// Predecessors returns the statuses an order may move to s from. An unknown
// status, and the first one, have none.
func (s Status) Predecessors() []Status {
	var from []Status
	for _, st := range Statuses() {
		if st.CanMoveTo(s) {
			from = append(from, st)
		}
	}
	return from
}

// CanMoveTo reports whether an order in s may move to next.
func (s Status) CanMoveTo(next Status) bool { return slices.Contains(Transitions()[s], next) }

// EventOrderCreated is the outbox event type of a new order.
const EventOrderCreated = "order.created"

// Limits of an order request. Larger values are refused as validation errors,
// never truncated.
const (
	MaxItems    = 50
	MaxQuantity = 1000
	MaxSKULen   = 64
)

// SupportedCurrencies are the ISO 4217 codes the service accepts. A product
// is sold in one currency; an order must use the currency of its products.
func SupportedCurrencies() []string { return []string{"EUR", "USD", "GBP", "CHF"} }

// Product is a catalog entry.
type Product struct {
	SKU        string
	Name       string
	UnitAmount int64
	Currency   string
	Stock      int64
}

// Item is one line of an order, priced from the catalog when it was created.
type Item struct {
	SKU        string
	Name       string
	Quantity   int
	UnitAmount int64
	Amount     int64
}

// Order is a tenant's order. Its Items are loaded for the API's answers;
// the methods other features call inside their transactions (LockForPayment)
// leave them out.
type Order struct {
	ID          uuid.UUID
	TenantID    uuid.UUID
	Status      Status
	Currency    string
	AmountTotal int64
	Items       []Item
	CreatedAt   time.Time
}

// CreateInput is a validated order request: what the client asked for. Prices
// come from the catalog, never from the client.
type CreateInput struct {
	Currency string
	Items    []ItemInput
}

// ItemInput is one requested line.
type ItemInput struct {
	SKU      string
	Quantity int
}

func productFromRow(r dbsqlc.Product) Product {
	return Product{SKU: r.Sku, Name: r.Name, UnitAmount: r.UnitAmount, Currency: r.Currency, Stock: r.Stock}
}

func orderFromRows(o dbsqlc.Order, items []dbsqlc.OrderItem) Order {
	out := Order{
		ID:          o.ID,
		TenantID:    o.TenantID,
		Status:      Status(o.Status),
		Currency:    o.Currency,
		AmountTotal: o.AmountTotal,
		CreatedAt:   o.CreatedAt,
		Items:       make([]Item, 0, len(items)),
	}
	for _, it := range items {
		out.Items = append(out.Items, Item{
			SKU: it.Sku, Name: it.Name, Quantity: int(it.Quantity), UnitAmount: it.UnitAmount, Amount: it.Amount,
		})
	}
	return out
}
