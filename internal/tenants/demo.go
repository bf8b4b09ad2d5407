package tenants

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/tenants/internal/dbsqlc"
)

// DemoTenant is a tenant that demo mode creates with a well-known key.
type DemoTenant struct {
	Slug, Name, APIKey string
}

// DemoTenants returns the tenants of the HTTP contract's demo mode.
func DemoTenants() []DemoTenant {
	return []DemoTenant{
		{Slug: "acme", Name: "Acme Corporation", APIKey: "sk_test_acme"},       // #nosec G101 -- the demo keys are public by design and seeded in demo mode only
		{Slug: "globex", Name: "Globex Corporation", APIKey: "sk_test_globex"}, // #nosec G101 -- the demo keys are public by design and seeded in demo mode only
	}
}

// SeedDemo creates the demo tenants and their keys, and returns the tenants
// in the order of DemoTenants. It is idempotent itself: running it again
// (every start in demo mode) changes nothing. Their catalogs belong to the
// orders feature, which seeds them (orders.Service.SeedCatalog).
func (s *Service) SeedDemo(ctx context.Context) ([]Tenant, error) {
	var out []Tenant
	for _, d := range DemoTenants() {
		var t Tenant
		err := postgres.InTx(ctx, s.pool, func(tx pgx.Tx) error {
			var err error
			t, err = insertTenant(ctx, tx, d.Slug, d.Name, s.now())
			if errors.Is(err, ErrTenantExists) {
				row, gerr := dbsqlc.New(tx).TenantGetBySlug(ctx, d.Slug)
				if gerr != nil {
					return fmt.Errorf("load tenant %q: %w", d.Slug, gerr)
				}
				t, err = tenantFromRow(row), nil
			}
			if err != nil {
				return err
			}
			return insertKey(ctx, tx, t.ID, d.APIKey, s.now())
		})
		if err != nil {
			return nil, fmt.Errorf("seed demo tenant %s: %w", d.Slug, err)
		}
		out = append(out, t)
	}
	return out, nil
}
