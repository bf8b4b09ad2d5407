package tenants

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/postgres"
)

// DemoTenant is a tenant that demo mode creates with a well-known key.
type DemoTenant struct {
	Slug, Name, APIKey string
}

// DemoTenants returns the tenants of the HTTP contract's demo mode.
func DemoTenants() []DemoTenant {
	return []DemoTenant{
		{Slug: "acme", Name: "Acme Corporation", APIKey: "sk_test_acme"},
		{Slug: "globex", Name: "Globex Corporation", APIKey: "sk_test_globex"},
	}
}

// DemoProduct is a catalog entry every demo tenant gets.
type DemoProduct struct {
	SKU        string
	Name       string
	UnitAmount int64
	Currency   string
	Stock      int64
}

// DemoCatalog returns the catalog of every demo tenant.
func DemoCatalog() []DemoProduct {
	return []DemoProduct{
		{SKU: "espresso-beans-1kg", Name: "Espresso beans, 1 kg", UnitAmount: 2490, Currency: "EUR", Stock: 100_000},
		{SKU: "pour-over-kettle", Name: "Pour-over kettle", UnitAmount: 5900, Currency: "EUR", Stock: 100_000},
		{SKU: "ceramic-dripper", Name: "Ceramic dripper", UnitAmount: 2200, Currency: "EUR", Stock: 100_000},
		{SKU: "paper-filters-100", Name: "Paper filters, 100 pcs", UnitAmount: 450, Currency: "EUR", Stock: 100_000},
		{SKU: "burr-grinder", Name: "Burr grinder", UnitAmount: 14900, Currency: "EUR", Stock: 100_000},
		{SKU: "travel-mug", Name: "Travel mug", UnitAmount: 1800, Currency: "EUR", Stock: 100_000},
	}
}

// SeedDemo creates the demo tenants, their keys and catalogs. It is
// idempotent itself: running it again (every start in demo mode) changes
// nothing, and it never resets stock that orders have used.
func (s *Service) SeedDemo(ctx context.Context) error {
	for _, d := range DemoTenants() {
		err := postgres.InTx(ctx, s.pool, func(tx pgx.Tx) error {
			q := dbsqlc.New(tx)
			t, err := insertTenant(ctx, tx, d.Slug, d.Name, s.now())
			if errors.Is(err, ErrTenantExists) {
				row, gerr := q.TenantGetBySlug(ctx, d.Slug)
				if gerr != nil {
					return fmt.Errorf("load tenant %q: %w", d.Slug, gerr)
				}
				t, err = Tenant{ID: row.ID, Slug: row.Slug, Name: row.Name}, nil
			}
			if err != nil {
				return err
			}
			if err := insertKey(ctx, tx, t.ID, d.APIKey, s.now()); err != nil {
				return err
			}
			for _, p := range DemoCatalog() {
				if err := q.ProductUpsert(ctx, dbsqlc.ProductUpsertParams{
					TenantID: t.ID, Sku: p.SKU, Name: p.Name, UnitAmount: p.UnitAmount, Currency: p.Currency, Stock: p.Stock,
				}); err != nil {
					return fmt.Errorf("seed product %s: %w", p.SKU, err)
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("seed demo tenant %s: %w", d.Slug, err)
		}
	}
	return nil
}
