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

func (migrator) Migrate(_ context.Context, _ *sql.DB, c pgtestdb.Config) error {
	return postgres.Migrate(c.URL())
}

// URL returns the URL of a fresh, migrated database for t.
func URL(t testing.TB) string {
	t.Helper()
	raw := os.Getenv("DATABASE_URL")
	if raw == "" {
		t.Fatal("DATABASE_URL is not set: run `make test`, which starts a private PostgreSQL, or point DATABASE_URL at a server where you may create databases")
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

// Pool returns a pool on a fresh, migrated database for t, closed when t ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := postgres.Open(context.Background(), URL(t), postgres.PoolConfig{MaxConns: 40})
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
