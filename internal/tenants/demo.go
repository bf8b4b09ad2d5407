package tenants

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"

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

// demoKeyHashes are the stored forms of the demo keys.
var demoKeyHashes = func() map[[sha256.Size]byte]bool {
	m := make(map[[sha256.Size]byte]bool)
	for _, d := range DemoTenants() {
		m[HashKey(d.APIKey)] = true
	}
	return m
}()

// isDemoKey reports whether h is the hash of a public demo key.
func isDemoKey(h [sha256.Size]byte) bool { return demoKeyHashes[h] }

// SeedDemo creates the demo tenants and their keys, and returns the tenants
// in the order of DemoTenants. It is idempotent itself: running it again
// (every start in demo mode) changes nothing, except that a demo key revoked
// since (api keys revoke, before serving the database outside demo mode)
// works again: demo mode is where the public keys work. Their catalogs
// belong to the orders feature, which seeds them
// (orders.Service.SeedCatalog).
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
			if _, err := insertKey(ctx, tx, t.ID, d.APIKey, s.now()); err != nil {
				return err
			}
			h := HashKey(d.APIKey)
			if err := dbsqlc.New(tx).APIKeyRenew(ctx, h[:]); err != nil {
				return fmt.Errorf("renew demo key: %w", err)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("seed demo tenant %s: %w", d.Slug, err)
		}
		out = append(out, t)
	}
	return out, nil
}

// LiveDemoKeys returns those of the public demo keys that work in the
// database now, in the order of DemoTenants: a database seeded in demo mode
// keeps them until an operator revokes them (api keys revoke), and api serve
// outside demo mode refuses to start while any works.
func (s *Service) LiveDemoKeys(ctx context.Context) ([]string, error) {
	var hashes [][]byte
	for _, d := range DemoTenants() {
		h := HashKey(d.APIKey)
		hashes = append(hashes, h[:])
	}
	prefixes, err := dbsqlc.New(s.pool).APIKeyLiveByHashes(ctx, dbsqlc.APIKeyLiveByHashesParams{KeyHashes: hashes, Now: s.now()})
	if err != nil {
		return nil, fmt.Errorf("look up demo keys: %w", err)
	}
	var live []string
	for _, d := range DemoTenants() {
		if slices.Contains(prefixes, d.APIKey[:min(len(d.APIKey), keyPrefixLen)]) {
			live = append(live, d.APIKey)
		}
	}
	return live, nil
}
