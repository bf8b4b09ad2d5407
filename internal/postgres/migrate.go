package postgres

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // registers pgx5://
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/db"
)

// Migrator applies the embedded migrations (db.Migrations). golang-migrate
// takes an advisory lock, so several processes starting at once are safe:
// the others wait for the first one's migrations (up to MigrateLockTimeout)
// and then find nothing left to do.
type Migrator struct {
	m *migrate.Migrate
}

// MigrateLockTimeout is how long a process waits for the migration lock
// another process holds. golang-migrate's own default, 15 seconds, is less
// than a fresh Citus database takes to migrate here (000011 creates every
// shard on every worker; 16 to 32 s measured): a second API replica started
// with the first gave up with "can't acquire database lock" instead of
// waiting for it.
const MigrateLockTimeout = 5 * time.Minute

// NewMigrator connects golang-migrate to databaseURL (a postgres:// URL).
func NewMigrator(databaseURL string) (*Migrator, error) {
	src, err := iofs.New(db.Migrations, "migrations")
	if err != nil {
		return nil, fmt.Errorf("open embedded migrations: %w", err)
	}
	u, err := url.Parse(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	u.Scheme = "pgx5"
	m, err := migrate.NewWithSourceInstance("iofs", src, u.String())
	if err != nil {
		return nil, fmt.Errorf("connect migrator: %w", err)
	}
	m.LockTimeout = MigrateLockTimeout
	return &Migrator{m: m}, nil
}

// Up applies every pending migration.
func (mg *Migrator) Up() error {
	if err := mg.m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate up: %w", err)
	}
	return nil
}

// Down reverts the last n migrations.
func (mg *Migrator) Down(n int) error {
	if err := mg.m.Steps(-n); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate down: %w", err)
	}
	return nil
}

// To migrates up or down to version.
func (mg *Migrator) To(version uint) error {
	if err := mg.m.Migrate(version); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate to %d: %w", version, err)
	}
	return nil
}

// Version returns the applied version and whether a failed migration left the
// schema dirty. Version 0 means no migration is applied.
func (mg *Migrator) Version() (version uint, dirty bool, err error) {
	version, dirty, err = mg.m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return 0, false, nil
	}
	return version, dirty, err
}

// Close releases the migrator's connection.
func (mg *Migrator) Close() error {
	srcErr, dbErr := mg.m.Close()
	return errors.Join(srcErr, dbErr)
}

// Migrate applies every pending migration to databaseURL, within ctx.
//
// golang-migrate's waits cannot be cancelled (the lock it takes while
// connecting has no bound at all), so Migrate runs it aside and returns when
// ctx ends first: the caller is a process that gives up and exits, which
// ends the migrator's session too. Every MigrateWaitReport meanwhile it logs
// (when logger is not nil) which sessions hold an advisory lock on the
// database: a replica stuck behind another one's migration says whose.
func Migrate(ctx context.Context, databaseURL string, logger *slog.Logger) error {
	done := make(chan error, 1)
	go func() {
		mg, err := NewMigrator(databaseURL)
		if err != nil {
			done <- err
			return
		}
		defer mg.Close()
		done <- mg.Up()
	}()
	tick := time.NewTicker(MigrateWaitReport)
	defer tick.Stop()
	for start := time.Now(); ; {
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return fmt.Errorf("migrations not applied within %s: %w", time.Since(start).Round(time.Second), context.Cause(ctx))
		case <-tick.C:
			if logger != nil {
				logger.Warn("migrations still running", "waited", time.Since(start).Round(time.Second).String(),
					"advisory_lock_holders", advisoryLockHolders(ctx, databaseURL))
			}
		}
	}
}

// MigrateWaitReport is how often Migrate says that it still waits.
const MigrateWaitReport = 10 * time.Second

// advisoryLockHolders describes the sessions holding an advisory lock on the
// database (golang-migrate's lock is one), for Migrate's report.
func advisoryLockHolders(ctx context.Context, databaseURL string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return "unknown: " + err.Error()
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	// One line per session: a session may hold many advisory locks (on
	// Citus, distributing a table takes hundreds).
	rows, err := conn.Query(ctx, `SELECT format('pid %s (%s, %s since %s, advisory locks: %s): %s', a.pid, coalesce(nullif(a.application_name, ''), 'no application_name'),
		       a.state, to_char(a.state_change, 'HH24:MI:SS'), count(*), left(a.query, 80))
		  FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		 WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		 GROUP BY a.pid, a.application_name, a.state, a.state_change, a.query
		 ORDER BY a.pid`)
	if err != nil {
		return "unknown: " + err.Error()
	}
	holders, err := pgx.CollectRows(rows, pgx.RowTo[string])
	switch {
	case err != nil:
		return "unknown: " + err.Error()
	case len(holders) == 0:
		return "none"
	}
	return strings.Join(holders, "; ")
}

// LatestVersion is the highest migration version embedded in the binary.
func LatestVersion() (uint, error) {
	entries, err := fs.Glob(db.Migrations, "migrations/*.up.sql")
	if err != nil {
		return 0, err
	}
	var latest uint
	for _, e := range entries {
		num, _, _ := strings.Cut(path.Base(e), "_")
		v, err := strconv.ParseUint(num, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("migration %s: bad version: %w", e, err)
		}
		latest = max(latest, uint(v))
	}
	return latest, nil
}

// SchemaCurrent reports whether the database has every embedded migration
// applied and none left dirty. It backs /readyz.
func SchemaCurrent(ctx context.Context, pool *pgxpool.Pool) error {
	want, err := LatestVersion()
	if err != nil {
		return err
	}
	var version int64
	var dirty bool
	if err := pool.QueryRow(ctx, `SELECT version, dirty FROM schema_migrations`).Scan(&version, &dirty); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if dirty || uint(version) != want { // #nosec G115 -- schema_migrations versions are the non-negative numbers of our own migration files
		return fmt.Errorf("schema at version %d (dirty=%t), binary expects %d", version, dirty, want)
	}
	return nil
}
