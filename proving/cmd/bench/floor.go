package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/postgres"
)

// defaultFloorDatabase is the database the sql floors write to, next to the
// API's on the same server (--floor-database).
const defaultFloorDatabase = "oncepay_bench_floor"

// openFloor creates the database the sql floors write to, on the server of
// the API's database (apiURL, reached through api), dropping one left by an
// earlier run: the service's schema (its migrations), and a copy of the
// tenant's row and of its catalog, which is all the create's statements
// read. It returns a pool on it with the service's own settings.
//
// The floors run the service's statements on a database of their own so
// that what they write stays out of the service: an event a floor inserts
// into the API's outbox_events is a real event, which the API's dispatcher
// claims, publishes to its broker and marks, during the floor's own
// measurement (slowing the floor down by work the service does, and so
// flattering the ratio) and for the rest of the run (the broker keeping
// every message id of its duplicate window in memory, in the API's peak
// RSS). The floor measures the statements alone; the service is measured
// with everything it does for a create, its dispatch included.
func openFloor(ctx context.Context, api *pgxpool.Pool, apiURL, name string, tenantID uuid.UUID, pc postgres.PoolConfig) (*pgxpool.Pool, error) {
	floorURL, err := withDatabase(apiURL, name)
	if err != nil {
		return nil, err
	}
	var current string
	if err := api.QueryRow(ctx, "SELECT current_database()").Scan(&current); err != nil {
		return nil, fmt.Errorf("floor database: %w", err)
	}
	if current == name {
		return nil, fmt.Errorf("--floor-database %q is the API's own database: name another one, or \"\" to write the floors there", name)
	}
	// A bench killed mid-run may have left it, with sessions on it.
	if err := dropDatabase(ctx, api, name); err != nil {
		return nil, fmt.Errorf("drop the floor database %s: %w", name, err)
	}
	if _, err := api.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create the floor database %s (the sql floors run on a database of their own; a user without CREATEDB can pass --floor-database \"\" to run them on the API's): %w", name, err)
	}
	if err := postgres.Migrate(ctx, floorURL, nil); err != nil {
		return nil, fmt.Errorf("migrate the floor database %s: %w", name, err)
	}
	floor, err := postgres.Open(ctx, floorURL, pc)
	if err != nil {
		return nil, err
	}
	// Both schemas come from the same migrations, so the columns line up.
	t := tenantID.String() // a UUID's text, safe to inline: COPY takes no parameters
	for _, c := range []struct{ table, query string }{
		{"tenants", "SELECT * FROM tenants WHERE id = '" + t + "'"},
		{"products", "SELECT * FROM products WHERE tenant_id = '" + t + "'"},
	} {
		if err := copyRows(ctx, api, floor, c.table, c.query); err != nil {
			floor.Close()
			return nil, err
		}
	}
	return floor, nil
}

// copyRows copies the rows query returns on from into table on to, with COPY.
func copyRows(ctx context.Context, from, to *pgxpool.Pool, table, query string) error {
	src, err := from.Acquire(ctx)
	if err != nil {
		return err
	}
	defer src.Release()
	var buf bytes.Buffer
	if _, err := src.Conn().PgConn().CopyTo(ctx, &buf, "COPY ("+query+") TO STDOUT"); err != nil {
		return fmt.Errorf("read %s for the floor database: %w", table, err)
	}
	dst, err := to.Acquire(ctx)
	if err != nil {
		return err
	}
	defer dst.Release()
	tag, err := dst.Conn().PgConn().CopyFrom(ctx, &buf, "COPY "+pgx.Identifier{table}.Sanitize()+" FROM STDIN")
	if err != nil {
		return fmt.Errorf("copy %s into the floor database: %w", table, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("copy %s into the floor database: no rows for the tenant", table)
	}
	return nil
}

// dropDatabase drops the database name through pool (the floor database at
// the end of a run, so that it does not keep its rows on the bench's
// server), closing the sessions left on it.
func dropDatabase(ctx context.Context, pool *pgxpool.Pool, name string) error {
	_, err := pool.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}

// withDatabase returns the PostgreSQL URL u with its database replaced by
// name. The floor database needs a URL (golang-migrate takes nothing else),
// so a keyword/value connection string is refused with a clear message.
func withDatabase(u, name string) (string, error) {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "postgres" && p.Scheme != "postgresql") {
		return "", errors.New("--floor-database needs the database as a postgres:// URL (--database-url, DATABASE_URL); pass --floor-database \"\" to run the floors on the API's database")
	}
	if strings.TrimSpace(name) == "" {
		return "", errors.New("the floor database needs a name")
	}
	p.Path = "/" + name
	p.RawPath = ""
	return p.String(), nil
}
