// Package testdb gives each test its own PostgreSQL database, cloned in
// milliseconds from a template that has the embedded migrations applied
// (pgtestdb). The template is rebuilt only when the migrations change; a
// failed test's database is kept for inspection.
//
// Tests need a server: DATABASE_URL names it (`make test` starts a private
// one). Without it they fail with a message saying so; they never skip.
package testdb

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver pgtestdb uses
	"github.com/peterldowns/pgtestdb"
	"github.com/peterldowns/pgtestdb/migrators/common"

	"github.com/oncepay/oncepay/db"
	"github.com/oncepay/oncepay/internal/postgres"
)

// migrator applies the embedded migrations with the same code as production.
type migrator struct{}

func (migrator) Hash() (string, error) {
	return common.HashDirs(db.Migrations, "*.sql", "migrations")
}

func (migrator) Migrate(ctx context.Context, _ *sql.DB, c pgtestdb.Config) error {
	return postgres.Migrate(ctx, c.URL(), nil)
}

// URL returns the URL of a fresh, migrated database for t. When
// DATABASE_URL names the coordinator of a Citus cluster (its database has
// the citus extension and workers), the database is made on every node and
// the migrations distribute its tables.
func URL(t testing.TB) string {
	t.Helper()
	raw := os.Getenv("DATABASE_URL")
	if raw == "" {
		t.Fatal("DATABASE_URL is not set: run `make test`, which starts a private PostgreSQL, or point DATABASE_URL at a server where you may create databases")
	}
	c, err := detectCitus(raw)
	if err != nil {
		t.Fatalf("DATABASE_URL: %v", err)
	}
	if c != nil {
		return citusURL(t, c)
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("parse DATABASE_URL: %v", err)
	}
	pw, _ := u.User.Password()
	opts := u.Query()
	if opts.Get("sslmode") == "" {
		opts.Set("sslmode", "disable")
	}
	conf := pgtestdb.Custom(t, pgtestdb.Config{
		DriverName:                "pgx",
		Host:                      u.Hostname(),
		Port:                      u.Port(),
		User:                      u.User.Username(),
		Password:                  pw,
		Database:                  trimSlash(u.Path),
		Options:                   opts.Encode(),
		ForceTerminateConnections: true,
	}, migrator{})
	return conf.URL()
}

// Pool returns a pool on a fresh, migrated database for t (URL), closed
// when t ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return open(t, URL(t))
}

// CitusURL returns the URL of a fresh, migrated database for t on the Citus
// cluster whose coordinator CITUS_DATABASE_URL names (`make test` starts
// one: scripts/citus.sh). Without one the test fails, saying so.
func CitusURL(t testing.TB) string {
	t.Helper()
	raw := os.Getenv("CITUS_DATABASE_URL")
	if raw == "" {
		t.Fatal("CITUS_DATABASE_URL is not set: run `make test`, which starts a private Citus cluster (scripts/citus.sh), or point it at the coordinator of one where you may create databases")
	}
	c, err := detectCitus(raw)
	if err != nil {
		t.Fatalf("CITUS_DATABASE_URL: %v", err)
	}
	if c == nil {
		t.Fatal("CITUS_DATABASE_URL names no Citus coordinator (no citus extension or no workers in its database)")
	}
	return citusURL(t, c)
}

func open(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := postgres.Open(context.Background(), url, postgres.PoolConfig{MaxConns: 40})
	if err != nil {
		t.Fatalf("open test pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func trimSlash(p string) string {
	if len(p) > 0 && p[0] == '/' {
		return p[1:]
	}
	if p == "" {
		return "postgres"
	}
	return p
}
