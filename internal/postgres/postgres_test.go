package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/testdb"
	"github.com/oncepay/oncepay/internal/testkit"
)

type bundle struct {
	pool *pgxpool.Pool
}

func setup(t *testing.T) *bundle {
	t.Helper()
	pool := testdb.Pool(t)
	// A deferred unique constraint is checked at COMMIT: the way to make a
	// commit fail on demand.
	_, err := pool.Exec(context.Background(), `CREATE TABLE t (v int, CONSTRAINT t_v_unique UNIQUE (v) DEFERRABLE INITIALLY DEFERRED)`)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{pool: pool}
}

func (b *bundle) count(t *testing.T) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM t`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestInTxCommits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	err := postgres.InTx(context.Background(), b.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), `INSERT INTO t VALUES (1)`)
		return err
	})
	if err != nil || b.count(t) != 1 {
		t.Fatalf("InTx = %v, rows = %d; want committed", err, b.count(t))
	}
}

func TestInTxRollsBackOnError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	boom := errors.New("boom")
	err := postgres.InTx(context.Background(), b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(context.Background(), `INSERT INTO t VALUES (1)`); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) || b.count(t) != 0 {
		t.Fatalf("InTx = %v, rows = %d; want boom and nothing written", err, b.count(t))
	}
}

func TestInTxRollsBackOnPanic(t *testing.T) {
	t.Parallel()
	b := setup(t)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic was swallowed")
			}
		}()
		_ = postgres.InTx(context.Background(), b.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(context.Background(), `INSERT INTO t VALUES (1)`); err != nil {
				return err
			}
			panic("boom")
		})
	}()
	if b.count(t) != 0 {
		t.Fatal("a panicking transaction committed")
	}
	// The connection went back to the pool clean: the pool still works.
	if err := postgres.InTx(context.Background(), b.pool, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

// A failed COMMIT is an error, never a silent success: the caller must not
// report work that did not commit.
func TestInTxReturnsCommitFailure(t *testing.T) {
	t.Parallel()
	b := setup(t)
	err := postgres.InTx(context.Background(), b.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), `INSERT INTO t VALUES (1), (1)`) // fine until COMMIT
		return err
	})
	if err == nil {
		t.Fatal("InTx returned nil for a failed commit")
	}
	if !postgres.IsUniqueViolation(err, "t_v_unique") || postgres.IsUniqueViolation(err, "other") {
		t.Fatalf("commit error %v is not classified as a t_v_unique violation", err)
	}
	if b.count(t) != 0 {
		t.Fatal("rows from a failed commit are visible")
	}
}

// A cancelled context still rolls back and returns the connection.
func TestInTxCancelledContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	err := postgres.InTx(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO t VALUES (1)`); err != nil {
			return err
		}
		cancel()
		return ctx.Err()
	})
	if !errors.Is(err, context.Canceled) || b.count(t) != 0 {
		t.Fatalf("InTx = %v, rows = %d", err, b.count(t))
	}
}

func TestIsLockTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.pool.Exec(ctx, `INSERT INTO t VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	holder, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if _, err := holder.Exec(ctx, `SELECT * FROM t FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	err = postgres.InTx(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '50ms'`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT * FROM t FOR UPDATE`)
		return err
	})
	if !postgres.IsLockTimeout(err) {
		t.Fatalf("err = %v, want a lock timeout", err)
	}
	if postgres.IsLockTimeout(errors.New("other")) || postgres.IsUniqueViolation(errors.New("other"), "") {
		t.Fatal("plain errors are classified as PostgreSQL errors")
	}
}

func TestMigrateDownAndUp(t *testing.T) {
	t.Parallel()
	url := testdb.URL(t)
	m, err := postgres.NewMigrator(url)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	latest, err := postgres.LatestVersion()
	if err != nil || latest == 0 {
		t.Fatalf("LatestVersion = %d, %v", latest, err)
	}
	if v, dirty, err := m.Version(); err != nil || v != latest || dirty {
		t.Fatalf("Version = %d, %t, %v; want %d", v, dirty, err, latest)
	}
	if err := m.Down(int(latest)); err != nil {
		t.Fatal(err)
	}
	if v, _, err := m.Version(); err != nil || v != 0 {
		t.Fatalf("after down: version %d, %v", v, err)
	}
	if err := m.Up(); err != nil {
		t.Fatal(err)
	}
	pool, err := postgres.Open(context.Background(), url, postgres.PoolConfig{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := postgres.SchemaCurrent(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
}

// TestInTxRollbackIsBounded cuts the database off in the middle of a
// transaction: the peer accepts bytes and never answers, as a partitioned
// or frozen server does. The rollback after fn's error must give up after
// RollbackTimeout instead of holding the caller forever.
func TestInTxRollbackIsBounded(t *testing.T) {
	t.Parallel()
	setup(t) // the database exists and has table t
	dbURL := testdb.URL(t)
	proxy := testkit.StartFaultProxy(t, testkit.Upstream(t, dbURL))
	pool, err := postgres.Open(context.Background(), proxy.Through(t, dbURL), postgres.PoolConfig{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	errFn := errors.New("fn failed")
	done := make(chan error, 1)
	go func() {
		done <- postgres.InTx(context.Background(), pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(context.Background(), `SELECT 1`); err != nil {
				return err
			}
			proxy.Blackhole(t)
			return errFn
		})
	}()
	select {
	case err := <-done:
		if !errors.Is(err, errFn) {
			t.Fatalf("InTx = %v, want fn's error", err)
		}
		proxy.Heal() // so that closing the pool does not wait on the dead link
	case <-time.After(3 * postgres.RollbackTimeout):
		proxy.Heal()
		t.Fatalf("InTx still rolling back after %s against a database that never answers", 3*postgres.RollbackTimeout)
	}
}
