package tenants

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/tenants/internal/dbsqlc"
)

// Lookup returns the tenant a slug names, for operator commands that name
// tenants by slug. A slug that names none is an error that says so.
func (s *Service) Lookup(ctx context.Context, slug string) (Tenant, error) {
	row, err := dbsqlc.New(s.pool).TenantGetBySlug(ctx, slug)
	if errors.Is(err, pgx.ErrNoRows) {
		return Tenant{}, fmt.Errorf("no tenant %q", slug)
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("load tenant %s: %w", slug, err)
	}
	return tenantFromRow(row), nil
}
