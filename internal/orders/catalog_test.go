package orders_test

import (
	"context"
	"maps"
	"testing"

	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/testkit"
)

// bySKU indexes products by SKU.
func bySKU(products []orders.Product) map[string]orders.Product {
	out := make(map[string]orders.Product, len(products))
	for _, p := range products {
		out[p.SKU] = p
	}
	return out
}

// SeedCatalog runs at every start in demo mode: seeding again adds no
// product, changes no price, and keeps the stock that orders took. Another
// tenant's catalog is its own.
func TestSeedCatalogIsIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t) // the demo tenants, their catalogs seeded once
	ctx := context.Background()
	want := bySKU(orders.DemoCatalog())
	if got := b.catalog(t, b.acme); !maps.Equal(got, want) {
		t.Fatalf("acme's catalog = %+v, want the demo catalog %+v", got, want)
	}

	// Orders take stock; seeding again must not give it back.
	mug := want["travel-mug"]
	if _, err := b.pool.Exec(ctx, `UPDATE products SET stock = stock - 7 WHERE tenant_id = $1 AND sku = $2`, b.acme.ID, mug.SKU); err != nil {
		t.Fatal(err)
	}
	mug.Stock -= 7
	want[mug.SKU] = mug
	changed := orders.DemoCatalog()
	for i := range changed {
		changed[i].UnitAmount++
		changed[i].Stock = 1
	}
	if err := b.svc.SeedCatalog(ctx, b.acme.ID, changed); err != nil {
		t.Fatalf("seed again: %v", err)
	}
	if got := b.catalog(t, b.acme); !maps.Equal(got, want) {
		t.Fatalf("after seeding again, acme's catalog = %+v, want %+v", got, want)
	}

	fresh := testkit.NewTenant(t, b.pool)
	if got := b.catalog(t, fresh); len(got) != 0 {
		t.Fatalf("a new tenant's catalog = %+v, want none", got)
	}
	if err := b.svc.SeedCatalog(ctx, fresh.ID, changed[:1]); err != nil {
		t.Fatal(err)
	}
	if got := b.catalog(t, fresh); !maps.Equal(got, bySKU(changed[:1])) {
		t.Fatalf("the new tenant's catalog = %+v, want %+v", got, changed[:1])
	}
}
