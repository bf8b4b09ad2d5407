package payments

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// PaymentsOfOrder lists, in tx, every payment attempt of one of the
// tenant's orders, oldest first: declined ones, the live one, and any still
// pending. Another tenant's order has none.
func (s *Service) PaymentsOfOrder(ctx context.Context, tx pgx.Tx, tenantID, orderID uuid.UUID) ([]Payment, error) {
	return storeOf(tx).paymentsOfOrder(ctx, tenantID, orderID)
}

// RefundsOfOrder lists, in tx, the refunds of all payments of one of the
// tenant's orders, oldest first. Another tenant's order has none.
func (s *Service) RefundsOfOrder(ctx context.Context, tx pgx.Tx, tenantID, orderID uuid.UUID) ([]Refund, error) {
	return storeOf(tx).refundsOfOrder(ctx, tenantID, orderID)
}
