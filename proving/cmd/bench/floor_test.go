package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/tenants"
)

// The floors write to a database of their own: what sql and sql-naive
// create (orders, records, events) lands there, none of it in the API's
// database, whose dispatcher would otherwise publish the floors' events
// during the floors' own measurement; and a floor database left by an
// earlier run is replaced, not reused.
func TestTheFloorsWriteToADatabaseOfTheirOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	apiURL, api := benchDatabase(t)
	seedDemo(t, api)
	s, err := newSQLCreate(ctx, api, tenants.DemoTenants()[0].APIKey)
	if err != nil {
		t.Fatal(err)
	}
	name := "floor_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	t.Cleanup(func() {
		if err := dropDatabase(context.Background(), api, name); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	floor, err := openFloor(ctx, api, apiURL, name, s.tenantID, postgres.PoolConfig{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	s.floor = floor
	for i := range 3 {
		if err := s.create(ctx, newKey()); err != nil {
			t.Fatalf("sql create %d: %v", i, err)
		}
		if err := s.createNaive(ctx, newKey()); err != nil {
			t.Fatalf("sql-naive create %d: %v", i, err)
		}
	}
	count := func(p *pgxpool.Pool, table string) int {
		t.Helper()
		var n int
		if err := p.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s WHERE tenant_id = $1", table), s.tenantID).Scan(&n); err != nil {
			t.Fatalf("count %s: %v", table, err)
		}
		return n
	}
	for _, table := range []string{"api_idempotency", "orders", "order_items", "outbox_events"} {
		if n := count(floor, table); n != 6 {
			t.Errorf("the floor database holds %d rows in %s after six creates, want 6", n, table)
		}
		if n := count(api, table); n != 0 {
			t.Errorf("the API's database holds %d rows of the floors in %s, want none", n, table)
		}
	}
	floor.Close()

	// A second run finds the first run's floor database and starts afresh.
	floor, err = openFloor(ctx, api, apiURL, name, s.tenantID, postgres.PoolConfig{MaxConns: 4})
	if err != nil {
		t.Fatalf("open the floor database again: %v", err)
	}
	defer floor.Close()
	if n := count(floor, "products"); n != len(orders.DemoCatalog()) {
		t.Errorf("the floor database holds %d products of the tenant, want its catalog's %d", n, len(orders.DemoCatalog()))
	}
	if n := count(floor, "outbox_events"); n != 0 {
		t.Errorf("a new floor database holds %d events of the last run, want none", n)
	}
	s.floor = floor
	if err := s.create(ctx, newKey()); err != nil {
		t.Fatalf("sql create on the new floor database: %v", err)
	}
	for table, n := range map[string]int{"orders": 1, "outbox_events": 1, "api_idempotency": 1} {
		if got := count(floor, table); got != n {
			t.Errorf("the floor database holds %d rows in %s after one create, want %d", got, table, n)
		}
	}
}

// make bench's own run of the floors (run, as main calls it) writes to the
// floor database, not the API's, and drops it when it is done.
func TestABenchRunLeavesTheFloorsNothingInTheAPIsDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	apiURL, api := benchDatabase(t)
	seedDemo(t, api)
	name := "floor_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	t.Cleanup(func() { _ = dropDatabase(context.Background(), api, name) })
	var out strings.Builder
	args := []string{"--database-url", apiURL, "--floor-database", name, "--scenarios", "sql,sql-naive",
		"--clients", "1", "--requests", "20", "--warmup", "0s"}
	if err := run(ctx, args, func(string) string { return "" }, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	var nOrders, nEvents int
	if err := api.QueryRow(ctx, "SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM outbox_events)").Scan(&nOrders, &nEvents); err != nil {
		t.Fatal(err)
	}
	if nOrders != 0 || nEvents != 0 {
		t.Errorf("after the floors' 40 creates the API's database holds %d orders and %d events, want none\n%s", nOrders, nEvents, out.String())
	}
	var left bool
	if err := api.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left {
		t.Errorf("the floor database %s is still there after the run", name)
	}
}

// seedDemo seeds the demo tenants and their catalogs as api serve does in
// demo mode, on pool.
func seedDemo(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	seeded, err := tenants.NewService(pool, time.Now, tenants.WithDemoKeys(true)).SeedDemo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	store := idempotency.NewStore(operation.PolicyOf(orders.Specs()), time.Now)
	svc := orders.NewService(pool, operation.NewRunner(pool, store, slog.New(slog.DiscardHandler)), time.Now)
	for _, tn := range seeded {
		if err := svc.SeedCatalog(ctx, tn.ID, orders.DemoCatalog()); err != nil {
			t.Fatal(err)
		}
	}
}

// The floor database is never the API's own, and needs a URL to be made.
func TestTheFloorDatabaseIsRefusedWhereItCannotBeMade(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	apiURL, api := benchDatabase(t)
	var current string
	if err := api.QueryRow(ctx, "SELECT current_database()").Scan(&current); err != nil {
		t.Fatal(err)
	}
	if _, err := openFloor(ctx, api, apiURL, current, uuid.New(), postgres.PoolConfig{MaxConns: 2}); err == nil || !strings.Contains(err.Error(), "the API's own database") {
		t.Errorf("the API's own database as the floor: %v, want a refusal", err)
	}
	// A user who may not create databases is told how to run the floors.
	role := "bench_nocreatedb_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	if _, err := api.Exec(ctx, "CREATE ROLE "+role+" LOGIN NOCREATEDB"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := api.Exec(context.Background(), "DROP ROLE IF EXISTS "+role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	cfg, err := pgxpool.ParseConfig(apiURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET ROLE "+role) // whatever the server's authentication
		return err
	}
	weak, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = openFloor(ctx, weak, apiURL, "floor_"+strings.ReplaceAll(uuid.NewString(), "-", ""), uuid.New(), postgres.PoolConfig{MaxConns: 2})
	weak.Close()
	if err == nil || !strings.Contains(err.Error(), `--floor-database ""`) {
		t.Errorf("a user without CREATEDB: %v, want the way out named", err)
	}
	if _, err := withDatabase("host=127.0.0.1 dbname=x", "floor"); err == nil || !strings.Contains(err.Error(), "postgres:// URL") {
		t.Errorf("a keyword/value connection string: %v, want a refusal that names the URL", err)
	}
	got, err := withDatabase("postgres://u:p@127.0.0.1:5432/oncepay?sslmode=disable", "oncepay_bench_floor")
	if err != nil || got != "postgres://u:p@127.0.0.1:5432/oncepay_bench_floor?sslmode=disable" {
		t.Errorf("withDatabase: %q, %v", got, err)
	}
}

// benchDatabase makes a migrated database for t as make bench has one: on
// DATABASE_URL's server, reached as its user, who may create databases
// (the floor database is made beside it), dropped when t ends.
func benchDatabase(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	raw := os.Getenv("DATABASE_URL")
	if raw == "" {
		t.Fatal("DATABASE_URL is not set: run `make test`, which starts a private PostgreSQL, or point DATABASE_URL at a server where you may create databases")
	}
	admin, err := postgres.Open(ctx, raw, postgres.PoolConfig{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	name := "bench_api_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dropDatabase(context.Background(), admin, name); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	url, err := withDatabase(raw, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := postgres.Migrate(ctx, url, nil); err != nil {
		t.Fatal(err)
	}
	pool, err := postgres.Open(ctx, url, postgres.PoolConfig{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return url, pool
}
