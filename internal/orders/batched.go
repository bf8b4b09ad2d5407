package orders

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/google/uuid"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/orders/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/postgres"
)

// createBatched is orders.create for a fresh key, in two batches
// (operation.Batched): the catalog's rows for the requested SKUs go with
// the claim; the order, its lines, order.created and the stored response
// with COMMIT. The order is built here, its id and time included, and
// encoded once: the response body and the event's payload are the same
// bytes. createOrder remains the path of a late retry: the order insert
// has no ON CONFLICT here, so an order already there for the key fails the
// batch (unique violation) and the transaction rolls back before anything
// else of it is written.
func (s *Service) createBatched(ctx context.Context, p *postgres.Pipeline, a *operation.Attempt[CreateInput]) (operation.Write[CreateInput], error) {
	req, in := a.Request(), a.Data
	products := dbsqlc.New(p).ProductGetManyQueued(ctx, []dbsqlc.ProductGetManyQueuedParams{{TenantID: req.TenantID, Skus: skus(in)}})
	return func(ctx context.Context, p *postgres.Pipeline, a *operation.Attempt[CreateInput]) (operation.Outcome, func() error, error) {
		var (
			rows []dbsqlc.Product
			err  error
		)
		products.Query(func(_ int, r []dbsqlc.Product, e error) { rows, err = r, e })
		if err != nil {
			return operation.Outcome{}, nil, fmt.Errorf("load products: %w", err)
		}
		lines, total, err := priceFrom(rows, in)
		if err != nil {
			return operation.Outcome{}, nil, err
		}
		id, err := uuid.NewV7()
		if err != nil {
			return operation.Outcome{}, nil, fmt.Errorf("order id: %w", err)
		}
		now := s.nowUTC()
		row := dbsqlc.Order{ID: id, TenantID: req.TenantID, IdempotencyKey: string(req.Key), RequestHash: req.Fingerprint[:],
			Status: string(StatusAwaitingPayment), Currency: in.Currency, AmountTotal: total, CreatedAt: now, UpdatedAt: now}
		order := orderFromRows(row, itemRows(row, lines))
		body, err := encodeJSON(orderJSONFrom(order))
		if err != nil {
			return operation.Outcome{}, nil, err
		}
		q := dbsqlc.New(p)
		inserted := q.OrderInsertQueued(ctx, []dbsqlc.OrderInsertQueuedParams{{ID: row.ID, TenantID: row.TenantID,
			IdempotencyKey: row.IdempotencyKey, RequestHash: row.RequestHash, Currency: row.Currency, AmountTotal: row.AmountTotal, CreatedAt: now}})
		lines.TenantID, lines.OrderID = row.TenantID, row.ID
		items := q.OrderItemsInsertQueued(ctx, []dbsqlc.OrderItemsInsertQueuedParams{dbsqlc.OrderItemsInsertQueuedParams(lines)})
		_, event, err := outbox.Queue(ctx, p, outbox.Event{
			TenantID:       req.TenantID,
			Type:           EventOrderCreated,
			AggregateType:  "order",
			AggregateID:    order.ID,
			IdempotencyKey: string(req.Key),
			OccurredAt:     now,
			Payload:        json.RawMessage(body),
		})
		if err != nil {
			return operation.Outcome{}, nil, err
		}
		check := func() error {
			var err error
			inserted.Exec(func(_ int, e error) { err = e })
			switch {
			case postgres.IsUniqueViolation(err, ""):
				// The key's order is there, its record gone: a late retry.
				// (Its id is a fresh UUIDv7: the other unique key of orders
				// is not the one. No constraint is named: on Citus the
				// worker's error comes without the name.)
				return fmt.Errorf("insert order: %w", operation.ErrSequential)
			case err != nil:
				return fmt.Errorf("insert order: %w", err)
			}
			items.Exec(func(_ int, e error) { err = e })
			if err != nil {
				return fmt.Errorf("insert order items: %w", err)
			}
			return event.Err()
		}
		out, err := a.QueueFinish(ctx, p, idempotency.Response{
			Status:      http.StatusCreated,
			ContentType: "application/json",
			Location:    "/v1/orders/" + order.ID.String(),
			Body:        body,
		}, &idempotency.Resource{Type: "order", ID: order.ID})
		return out, check, err
	}, nil
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
