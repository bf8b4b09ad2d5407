// Package orders owns the product catalog and orders: the local mutation of
// the service. Creating an order is the textbook idempotent write (the brief's
// "local mutation" flow): one transaction claims the idempotency key, inserts
// the order, appends the order.created outbox event and stores the response.
//
// Besides the idempotency record, which expires, an order keeps the key that
// created it under a unique constraint for its whole life: a genuine late
// retry after the record is gone still finds the original order (drill 8).
package orders

import (
	"time"

	"github.com/google/uuid"

	"github.com/oncepay/oncepay/internal/dbsqlc"
)

// Order statuses. An order only moves forward through them.
const (
	StatusAwaitingPayment   = "awaiting_payment"
	StatusPaid              = "paid"
	StatusFulfilled         = "fulfilled"
	StatusPartiallyRefunded = "partially_refunded"
	StatusRefunded          = "refunded"
)

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

// Order is a tenant's order.
type Order struct {
	ID          uuid.UUID
	Status      string
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
		Status:      o.Status,
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
