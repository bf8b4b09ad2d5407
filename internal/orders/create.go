package orders

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/orders/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/problem"
)

// createSteps is orders.create as a step table: one step, the claim's
// transaction, with nothing outside the service to call.
func (s *Service) createSteps() operation.Steps[CreateInput] {
	return operation.Steps[CreateInput]{
		idempotency.PointStarted: {Batch: s.createOrder},
	}
}

// Create executes orders.create for req at most once. The returned response
// is either this execution's (201) or a stored one (Replayed). A late retry
// whose record expired gets the original order as it is now, with the status
// of the original outcome (201; see docs/CONTRACT.md).
func (s *Service) Create(ctx context.Context, req idempotency.Request, in CreateInput) (idempotency.Response, error) {
	return s.create.Run(ctx, req, in)
}

// createOrder is the transaction of orders.create, in two round trips: it
// reads the catalog's rows for the requested SKUs and the order the key may
// have created already, with the key's claim; then it prices the lines,
// and queues the order, its lines, order.created and the stored answer,
// which the loop sends with COMMIT. The order is built here, its id and time
// included, and encoded once: the answer's body and the event's payload are
// the same bytes.
//
// A key that has its order although its idempotency record is gone (the
// record expired and a genuine late retry arrived) is answered with that
// order as it is now, provided the request is the same one; the claim's lock
// makes sure no other request of the key creates it meanwhile.
func (s *Service) createOrder(ctx context.Context, b *operation.Batch, a *operation.Attempt[CreateInput]) (operation.Outcome, error) {
	req, in := a.Request(), a.Data
	q := dbsqlc.New(b)
	products := q.ProductGetMany(ctx, []dbsqlc.ProductGetManyParams{{TenantID: req.TenantID, Skus: skus(in)}})
	byKey := q.OrderGetByIdempotencyKey(ctx, []dbsqlc.OrderGetByIdempotencyKeyParams{{TenantID: req.TenantID, IdempotencyKey: string(req.Key)}})
	itemsByKey := q.OrderItemsGetByIdempotencyKey(ctx, []dbsqlc.OrderItemsGetByIdempotencyKeyParams{{TenantID: req.TenantID, IdempotencyKey: string(req.Key)}})
	if err := b.Send(ctx); err != nil {
		return operation.Outcome{}, err
	}
	var rows []dbsqlc.Product
	var err error
	products.Query(func(_ int, r []dbsqlc.Product, e error) { rows, err = r, e })
	if err != nil {
		return operation.Outcome{}, fmt.Errorf("load products: %w", err)
	}
	var prev dbsqlc.Order
	byKey.QueryRow(func(_ int, r dbsqlc.Order, e error) { prev, err = r, e })
	switch {
	case errors.Is(err, pgx.ErrNoRows): // a new key
	case err != nil:
		return operation.Outcome{}, fmt.Errorf("load order by idempotency key: %w", err)
	default:
		// A late retry: the key created its order, and its record expired.
		if err := a.LateRetry("order", prev.ID.String(), prev.RequestHash); err != nil {
			return operation.Outcome{}, err
		}
		var items []dbsqlc.OrderItem
		itemsByKey.Query(func(_ int, r []dbsqlc.OrderItem, e error) { items, err = r, e })
		if err != nil {
			return operation.Outcome{}, fmt.Errorf("load order items by idempotency key: %w", err)
		}
		order := orderFromRows(prev, items)
		body, err := encodeJSON(orderJSONFrom(order))
		if err != nil {
			return operation.Outcome{}, err
		}
		return finishCreated(ctx, b, a, order, body)
	}

	lines, total, err := priceFrom(rows, in)
	if err != nil {
		return operation.Outcome{}, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return operation.Outcome{}, fmt.Errorf("order id: %w", err)
	}
	now := s.nowUTC()
	row := dbsqlc.Order{ID: id, TenantID: req.TenantID, IdempotencyKey: string(req.Key), RequestHash: req.Fingerprint[:],
		Status: string(StatusAwaitingPayment), Currency: in.Currency, AmountTotal: total, CreatedAt: now, UpdatedAt: now}
	order := orderFromRows(row, itemRows(row, lines))
	body, err := encodeJSON(orderJSONFrom(order))
	if err != nil {
		return operation.Outcome{}, err
	}
	q.OrderInsert(ctx, []dbsqlc.OrderInsertParams{{ID: row.ID, TenantID: row.TenantID,
		IdempotencyKey: row.IdempotencyKey, RequestHash: row.RequestHash, Currency: row.Currency, AmountTotal: row.AmountTotal, CreatedAt: now}})
	lines.TenantID, lines.OrderID = row.TenantID, row.ID
	q.OrderItemsInsert(ctx, []dbsqlc.OrderItemsInsertParams{lines})
	if _, _, err := outbox.Queue(ctx, b, outbox.Event{
		TenantID:       req.TenantID,
		Type:           EventOrderCreated,
		AggregateType:  "order",
		AggregateID:    order.ID,
		IdempotencyKey: string(req.Key),
		OccurredAt:     now,
		Payload:        json.RawMessage(body),
	}); err != nil {
		return operation.Outcome{}, err
	}
	return finishCreated(ctx, b, a, order, body)
}

// finishCreated stores the answer of a created order, body its encoding.
func finishCreated(ctx context.Context, b *operation.Batch, a *operation.Attempt[CreateInput], order Order, body []byte) (operation.Outcome, error) {
	return a.Finish(ctx, b, idempotency.Response{
		Status:      http.StatusCreated,
		ContentType: "application/json",
		Location:    "/v1/orders/" + order.ID.String(),
		Body:        body,
	}, &idempotency.Resource{Type: "order", ID: order.ID})
}

// skus are the SKUs of the requested lines.
func skus(in CreateInput) []string {
	skus := make([]string, len(in.Items))
	for i, it := range in.Items {
		skus[i] = it.SKU
	}
	return skus
}

// priceFrom prices the requested lines from the catalog's rows for them:
// the client names products and quantities, never prices. An unknown SKU
// and a product sold in another currency are validation errors of their
// line.
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

// itemRows are the order's line rows as the insert of lines stores them.
func itemRows(o dbsqlc.Order, lines dbsqlc.OrderItemsInsertParams) []dbsqlc.OrderItem {
	items := make([]dbsqlc.OrderItem, len(lines.Lines))
	for i := range lines.Lines {
		items[i] = dbsqlc.OrderItem{TenantID: o.TenantID, OrderID: o.ID, Line: lines.Lines[i], Sku: lines.Skus[i], Name: lines.Names[i],
			Quantity: lines.Quantities[i], UnitAmount: lines.UnitAmounts[i], Amount: lines.Amounts[i]}
	}
	return items
}
