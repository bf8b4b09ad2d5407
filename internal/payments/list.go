package payments

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/payments/internal/dbsqlc"
)

// PaymentsOfOrder lists, in tx, every payment attempt of one of the
// tenant's orders, oldest first: declined ones, the live one, and any still
// pending. Another tenant's order has none.
func (s *Service) PaymentsOfOrder(ctx context.Context, tx pgx.Tx, tenantID, orderID uuid.UUID) ([]Payment, error) {
	rows, err := dbsqlc.New(tx).PaymentListByOrder(ctx, dbsqlc.PaymentListByOrderParams{TenantID: tenantID, OrderID: orderID})
	if err != nil {
		return nil, fmt.Errorf("list payments of order %s: %w", orderID, err)
	}
	out := make([]Payment, len(rows))
	for i, r := range rows {
		out[i] = paymentFromRow(r)
	}
	return out, nil
}

// RefundsOfOrder lists, in tx, the refunds of all payments of one of the
// tenant's orders, oldest first. Another tenant's order has none.
func (s *Service) RefundsOfOrder(ctx context.Context, tx pgx.Tx, tenantID, orderID uuid.UUID) ([]Refund, error) {
	rows, err := dbsqlc.New(tx).RefundListByOrder(ctx, dbsqlc.RefundListByOrderParams{TenantID: tenantID, OrderID: orderID})
	if err != nil {
		return nil, fmt.Errorf("list refunds of order %s: %w", orderID, err)
	}
	out := make([]Refund, len(rows))
	for i, r := range rows {
		out[i] = refundFromRow(r)
	}
	return out, nil
}
