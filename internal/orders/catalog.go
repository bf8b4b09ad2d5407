package orders

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/orders/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/postgres"
)

// DemoCatalog returns the catalog every demo tenant gets.
func DemoCatalog() []Product {
	return []Product{
		{SKU: "espresso-beans-1kg", Name: "Espresso beans, 1 kg", UnitAmount: 2490, Currency: "EUR", Stock: 100_000},
		{SKU: "pour-over-kettle", Name: "Pour-over kettle", UnitAmount: 5900, Currency: "EUR", Stock: 100_000},
		{SKU: "ceramic-dripper", Name: "Ceramic dripper", UnitAmount: 2200, Currency: "EUR", Stock: 100_000},
		{SKU: "paper-filters-100", Name: "Paper filters, 100 pcs", UnitAmount: 450, Currency: "EUR", Stock: 100_000},
		{SKU: "burr-grinder", Name: "Burr grinder", UnitAmount: 14900, Currency: "EUR", Stock: 100_000},
		{SKU: "travel-mug", Name: "Travel mug", UnitAmount: 1800, Currency: "EUR", Stock: 100_000},
	}
}

// SeedCatalog adds products to the tenant's catalog, in one transaction. It
// is idempotent itself: a SKU the tenant has already keeps its price and its
// stock, so seeding again (every start in demo mode) never gives back stock
// that orders took.
func (s *Service) SeedCatalog(ctx context.Context, tenantID uuid.UUID, products []Product) error {
	return postgres.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		q := dbsqlc.New(tx)
		for _, p := range products {
			if err := q.ProductInsert(ctx, dbsqlc.ProductInsertParams{
				TenantID: tenantID, Sku: p.SKU, Name: p.Name, UnitAmount: p.UnitAmount, Currency: p.Currency, Stock: p.Stock,
			}); err != nil {
				return fmt.Errorf("seed product %s: %w", p.SKU, err)
			}
		}
		return nil
	})
}
