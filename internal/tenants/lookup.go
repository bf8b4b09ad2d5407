package tenants

import (
	"context"

	"github.com/oncepay/oncepay/internal/tenants/internal/dbsqlc"
)

// Lookup returns the tenant a slug names, for operator commands that name
// tenants by slug, or ErrUnknownTenant.
func (s *Service) Lookup(ctx context.Context, slug string) (Tenant, error) {
	return tenantBySlug(ctx, dbsqlc.New(s.pool), slug)
}
