package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4/database"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

// 000009 puts tenant_id first in every tenant-owned key. A database of the
// version before it migrates forward with every row: order items get their
// order's tenant, inbox rows the tenant of their event (or of the
// notification it left, or the nil tenant for a message whose event is long
// gone), and the outbox's order continues where it stopped.
func TestTenantKeysMigrationKeepsRows(t *testing.T) {
	t.Parallel()
	url := testdb.URL(t)
	m, err := postgres.NewMigrator(url)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.To(8); err != nil { // before 000009
		t.Fatal(err)
	}
	ctx := context.Background()
	pool, err := postgres.Open(ctx, url, postgres.PoolConfig{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	const tenant, order, payment, event, notified, orphan = "0192f1c6-0000-7000-8000-000000000001", "0192f1c6-0000-7000-8000-000000000002",
		"0192f1c6-0000-7000-8000-000000000003", "0192f1c6-0000-7000-8000-000000000004", "0192f1c6-0000-7000-8000-000000000005",
		"0192f1c6-0000-7000-8000-000000000006"
	for _, q := range []string{
		`INSERT INTO tenants VALUES ('` + tenant + `', 'migrated', 'Migrated', now())`,
		`INSERT INTO orders VALUES ('` + order + `', '` + tenant + `', 'k', '\x00', 'paid', 'EUR', 100, now(), now())`,
		`INSERT INTO order_items VALUES ('` + order + `', 1, 'mug', 'Mug', 1, 100, 100)`,
		`INSERT INTO payments (id, tenant_id, order_id, idempotency_key, request_hash, provider_key, status, amount, currency, payment_method, created_at, updated_at)
			VALUES ('` + payment + `', '` + tenant + `', '` + order + `', 'p', '\x00', 'pk', 'succeeded', 100, 'EUR', 'pm_card_ok', now(), now())`,
		`INSERT INTO refunds (id, tenant_id, payment_id, idempotency_key, request_hash, provider_key, status, amount, created_at, updated_at)
			VALUES (gen_random_uuid(), '` + tenant + `', '` + payment + `', 'r', '\x00', 'rk', 'succeeded', 50, now(), now())`,
		`INSERT INTO outbox_events (id, tenant_id, event_type, aggregate_type, aggregate_id, idempotency_key, payload, occurred_at)
			VALUES ('` + event + `', '` + tenant + `', 'order.created', 'order', '` + order + `', 'k', '{}', now())`,
		`INSERT INTO notifications VALUES (gen_random_uuid(), '` + tenant + `', '` + order + `', 'receipt', '` + notified + `', '{}', now())`,
		`INSERT INTO processed_messages VALUES ('` + event + `', 'fulfillment', now()), ('` + notified + `', 'fulfillment', now()), ('` + orphan + `', 'fulfillment', now())`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	var seqBefore int64
	if err := pool.QueryRow(ctx, `SELECT max(seq) FROM outbox_events`).Scan(&seqBefore); err != nil {
		t.Fatal(err)
	}
	if err := m.Up(); err != nil {
		t.Fatal(err)
	}
	pool.Reset() // the cached statements know the old tables
	var rows string
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM orders) || ' ' || (SELECT count(*) FROM order_items WHERE tenant_id = '`+tenant+`')
		|| ' ' || (SELECT count(*) FROM payments) || ' ' || (SELECT count(*) FROM refunds) || ' ' || (SELECT count(*) FROM notifications)
		|| ' ' || (SELECT count(*) FROM outbox_events)`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != "1 1 1 1 1 1" {
		t.Errorf("orders, items of the tenant, payments, refunds, notifications, events = %s, want one of each", rows)
	}
	got := map[string]string{}
	r, err := pool.Query(ctx, `SELECT message_id, tenant_id::text FROM processed_messages`)
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		var id, tid string
		if err := r.Scan(&id, &tid); err != nil {
			t.Fatal(err)
		}
		got[id] = tid
	}
	if r.Err() != nil {
		t.Fatal(r.Err())
	}
	want := map[string]string{event: tenant, notified: tenant, orphan: "00000000-0000-0000-0000-000000000000"}
	if !maps.Equal(got, want) {
		t.Errorf("inbox rows after the migration = %v, want %v", got, want)
	}
	var seq int64
	if err := pool.QueryRow(ctx, `INSERT INTO outbox_events (id, tenant_id, event_type, aggregate_type, aggregate_id, idempotency_key, payload, occurred_at)
		VALUES (gen_random_uuid(), '`+tenant+`', 'order.created', 'order', '`+order+`', 'k2', '{}', now()) RETURNING seq`).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	if seq != seqBefore+1 {
		t.Errorf("the next event's seq = %d, want %d (where the identity stopped)", seq, seqBefore+1)
	}
}

// The service's connections are "oncepay" in pg_stat_activity, unless the
// URL names them: several instances on one database can be told apart (the
// chaos run finds the API that waits on its locks that way).
func TestApplicationNameFromTheURL(t *testing.T) {
	t.Parallel()
	url := testdb.URL(t)
	ctx := context.Background()
	for _, tc := range []struct{ url, want string }{
		{url, postgres.ApplicationName},
		{url + "&application_name=oncepay-api-7", "oncepay-api-7"},
	} {
		pool, err := postgres.Open(ctx, tc.url, postgres.PoolConfig{})
		if err != nil {
			t.Fatal(err)
		}
		var got string
		err = pool.QueryRow(ctx, `SELECT current_setting('application_name')`).Scan(&got)
		pool.Close()
		if err != nil || got != tc.want {
			t.Errorf("application_name = %q, %v; want %q", got, err, tc.want)
		}
	}
}

// A process that finds the migration lock taken waits for it longer than
// golang-migrate's own 15 seconds (MigrateLockTimeout): a second API
// replica started with the first on a fresh Citus database, whose
// migrations take longer than that, must wait for them, not exit.
func TestMigrateWaitsForAnotherProcessesLock(t *testing.T) {
	t.Parallel()
	raw := testdb.URL(t)
	// Another process migrating: golang-migrate's own driver holding its
	// lock on the database.
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Scheme = "pgx5"
	// Connecting takes (and gives back) the lock once to create the
	// version table; it is Up whose wait golang-migrate bounds.
	mg, err := postgres.NewMigrator(raw)
	if err != nil {
		t.Fatal(err)
	}
	defer mg.Close()
	other, err := database.Open(u.String())
	if err != nil {
		t.Fatal(err)
	}
	// Closed first (deferred last): its session's lock goes with it, so
	// a Migrator still waiting for it can close too.
	defer other.Close()
	if err := other.Lock(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mg.Up() }()
	select {
	case err := <-done:
		t.Fatalf("Migrate returned while another process held the lock: %v", err)
	case <-time.After(16 * time.Second): // past golang-migrate's default lock timeout
	}
	if err := other.Unlock(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Migrate after the lock was released: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Migrate did not finish after the lock was released")
	}
}

// TestMigrateGivesUpWithItsContext: golang-migrate would wait for another
// session's migration lock without end (the wait while connecting has no
// bound); Migrate returns when its context ends, and meanwhile says which
// session holds the lock.
func TestMigrateGivesUpWithItsContext(t *testing.T) {
	t.Parallel()
	raw := testdb.URL(t)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Scheme = "pgx5"
	q := u.Query()
	q.Set("application_name", "the-other-migrator")
	u.RawQuery = q.Encode()
	other, err := database.Open(u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.Lock(); err != nil {
		t.Fatal(err)
	}
	// A session holding several advisory locks (as Citus's does while it
	// distributes a table) is named once, with its count.
	cfg, err := pgx.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "a-session-with-many-locks"
	many, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = many.Close(context.Background()) }()
	if _, err := many.Exec(context.Background(), `SELECT pg_advisory_lock(k) FROM generate_series(101, 103) AS k`); err != nil {
		t.Fatal(err)
	}
	var log testkit.Buffer
	bound := postgres.MigrateWaitReport + 2*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- postgres.Migrate(ctx, raw, slog.New(slog.NewTextHandler(&log, nil))) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Migrate while another session holds the lock = %v, want the context's end", err)
		}
	case <-time.After(bound + 10*time.Second):
		t.Fatal("Migrate did not return after its context ended")
	}
	if s := log.String(); !strings.Contains(s, "migrations still running") || !strings.Contains(s, "the-other-migrator") {
		t.Fatalf("Migrate's wait did not name the lock's holder; log:\n%s", s)
	}
	for _, line := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		if strings.Contains(line, "migrations still running") &&
			(strings.Count(line, "a-session-with-many-locks") != 1 || !strings.Contains(line, "advisory locks: 3")) {
			t.Fatalf("a session with 3 advisory locks is not named once with its count:\n%s", line)
		}
	}
}

// A session the server ends under a statement (an operator's
// pg_terminate_backend, as the chaos run does to the APIs' connections) is
// the database being unavailable, not a failure of the work: the request
// is answered 503 and may be repeated. So are the other ways a server ends
// or refuses a session, and a lost connection Citus reports; an error about
// the work itself is not.
func TestATerminatedSessionIsUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	pid := conn.Conn().PgConn().PID()
	slept := make(chan error, 1)
	go func() {
		_, err := conn.Exec(ctx, `SELECT pg_sleep(30)`)
		slept <- err
	}()
	testkit.WaitFor(t, 10*time.Second, "the statement to run", func() bool {
		var n int
		err := b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND query LIKE '%pg_sleep%' AND state = 'active'`, pid).Scan(&n)
		return err == nil && n == 1
	})
	var terminated bool
	if err := b.pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&terminated); err != nil || !terminated {
		t.Fatalf("pg_terminate_backend: %v, %v", terminated, err)
	}
	err = <-slept
	if !postgres.IsUnavailable(err) || !postgres.IsSessionEnded(err) {
		t.Fatalf("the terminated statement's error %v (%T) is not classified as unavailable", err, err)
	}
	if _, err := conn.Exec(ctx, `SELECT 1`); !postgres.IsUnavailable(err) {
		t.Fatalf("the terminated connection's next statement: %v, want unavailable", err)
	}

	for _, code := range []string{"57P01", "57P02", "57P03", "08006", "08003", "08000"} {
		if err := fmt.Errorf("query: %w", &pgconn.PgError{Code: code}); !postgres.IsUnavailable(err) {
			t.Errorf("SQLSTATE %s is not classified as unavailable", code)
		}
	}
	for _, code := range []string{"23505", "55P03", "57014", "40001", "XX000", "28P01", "08P01"} {
		if err := fmt.Errorf("query: %w", &pgconn.PgError{Code: code}); postgres.IsUnavailable(err) || postgres.IsSessionEnded(err) {
			t.Errorf("SQLSTATE %s is classified as unavailable", code)
		}
	}
	// A Citus coordinator whose worker connection failed at COMMIT (the
	// chaos run's terminated worker backends): the outcome is for the
	// retry to find, as for any session that ended under a statement.
	citus := &pgconn.PgError{Code: "XX000", Message: "could not commit transaction for shard 102157 on at least one active node"}
	if err := fmt.Errorf("commit transaction: %w", citus); !postgres.IsUnavailable(err) || !postgres.IsSessionEnded(err) {
		t.Errorf("Citus's %q is not classified as unavailable", citus.Message)
	}
	if err := fmt.Errorf("query: %w", &pgconn.PgError{Code: "XX000", Message: "could not open relation"}); postgres.IsUnavailable(err) {
		t.Errorf("another internal error is classified as unavailable")
	}
}

// Citus raises "could not commit transaction for shard ..." both for a
// worker connection that failed at COMMIT and for a deferred constraint or
// trigger that failed there; IsSessionEnded reads it as the former, which
// holds only while the schema defers nothing.
func TestTheSchemaDefersNothing(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t)
	rows, err := pool.Query(context.Background(), `
		SELECT c.conrelid::regclass::text || ' ' || c.conname FROM pg_constraint c
		  JOIN pg_namespace n ON n.oid = c.connamespace
		 WHERE n.nspname = 'public' AND c.condeferrable
		UNION ALL
		SELECT t.tgrelid::regclass::text || ' ' || t.tgname FROM pg_trigger t
		  JOIN pg_class r ON r.oid = t.tgrelid JOIN pg_namespace n ON n.oid = r.relnamespace
		 WHERE n.nspname = 'public' AND t.tgdeferrable`)
	if err != nil {
		t.Fatal(err)
	}
	deferred, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(deferred) > 0 {
		t.Errorf("deferred constraints or triggers %v: a failure of theirs at COMMIT would be answered 503 on Citus (postgres.IsSessionEnded); make them immediate or tell the two apart", deferred)
	}
}
