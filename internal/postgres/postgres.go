// Package postgres owns the connection pool, the transaction helper, the
// classification of PostgreSQL errors and the schema migrations.
//
// The service's deduplication rests on it: the dedup decision, the business
// mutation, the outbox row and the stored response commit in one transaction
// run by InTx, and a unique constraint decides races.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PoolConfig tunes the pool. Zero values take the documented defaults.
type PoolConfig struct {
	// MaxConns bounds the open connections (default 20).
	MaxConns int32
	// LockTimeout bounds every wait for a row or transaction lock (default
	// 2s). It is what makes a concurrent duplicate request wait only briefly:
	// after it, the duplicate gets 409 request_in_progress instead of holding a
	// connection for as long as the first request takes.
	LockTimeout time.Duration
	// StatementTimeout bounds each statement on the server (default 30s).
	// The server enforces it, so it cannot end a wait for a server that no
	// longer answers: that is what the callers' context deadlines are for.
	StatementTimeout time.Duration
	// ConnectTimeout bounds opening one connection: the dial, TLS and the
	// startup and authentication exchange (default DefaultConnectTimeout,
	// 5s). Without it a server that accepts and never answers would hold a
	// new connection, and with it a slot of the pool, until the server's own
	// authentication_timeout (a minute), or forever if nobody is there. A
	// connect_timeout in the database URL wins over it.
	ConnectTimeout time.Duration
	// Tracer sees every query, batch and connect (e.g. otelpgx's, which
	// puts a span on each inside a traced request). Default none: pgx calls
	// no tracer at all.
	Tracer pgx.QueryTracer
}

// ApplicationName is the application_name of the service's connections
// when DATABASE_URL does not set one.
const ApplicationName = "oncepay"

// DefaultConnectTimeout bounds opening a connection unless
// PoolConfig.ConnectTimeout or the URL's connect_timeout says otherwise.
const DefaultConnectTimeout = 5 * time.Second

// Open connects a pool to databaseURL and checks that the server answers.
func Open(ctx context.Context, databaseURL string, pc PoolConfig) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	if pc.MaxConns == 0 {
		pc.MaxConns = 20
	}
	if pc.LockTimeout == 0 {
		pc.LockTimeout = 2 * time.Second
	}
	if pc.StatementTimeout == 0 {
		pc.StatementTimeout = 30 * time.Second
	}
	if pc.ConnectTimeout == 0 {
		pc.ConnectTimeout = DefaultConnectTimeout
	}
	cfg.MaxConns = pc.MaxConns
	if cfg.ConnConfig.ConnectTimeout == 0 { // the URL did not set connect_timeout
		cfg.ConnConfig.ConnectTimeout = pc.ConnectTimeout
	}
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = fmt.Sprint(pc.LockTimeout.Milliseconds())
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = fmt.Sprint(pc.StatementTimeout.Milliseconds())
	// The service's connections are "oncepay" in pg_stat_activity unless
	// the URL names them (application_name=...): several instances on one
	// database can then be told apart, e.g. by an operator looking for the
	// instance that holds a lock.
	if _, named := cfg.ConnConfig.RuntimeParams["application_name"]; !named {
		cfg.ConnConfig.RuntimeParams["application_name"] = ApplicationName
	}
	if pc.Tracer != nil {
		cfg.ConnConfig.Tracer = pc.Tracer
	}
	// UUIDs as their 16 bytes, never through their string form (uuid.go).
	cfg.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
		registerUUID(conn.TypeMap())
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("create pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ping database: %w", err)
	}
	return pool, nil
}

// TxBeginner is what InTx needs: *pgxpool.Pool, *pgx.Conn and pgx.Tx (which
// begins a savepoint) all satisfy it.
type TxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// RollbackTimeout bounds the rollback of a failed transaction. The rollback
// runs after the caller's own deadline may have passed, so it gets a budget of
// its own; a database that does not answer within it has its connection
// closed instead (pgx closes a connection whose command was cut off), which
// ends the transaction on the server just as well.
const RollbackTimeout = 5 * time.Second

// InTx runs fn in a transaction and commits it when fn returns nil. Any error
// from fn, or a panic, rolls back. A failed commit is returned, never dropped:
// the caller must not report success for work that did not commit.
//
// The rollback runs under context.WithoutCancel so that a cancelled request
// still returns its connection to the pool in a clean state, bounded by
// RollbackTimeout so that a dead peer cannot hold the caller forever.
func InTx(ctx context.Context, db TxBeginner, fn func(tx pgx.Tx) error) (err error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	rollback := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), RollbackTimeout)
		defer cancel()
		_ = tx.Rollback(rctx)
	}
	defer func() {
		if p := recover(); p != nil {
			rollback()
			panic(p)
		}
		if err != nil {
			rollback()
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit transaction: %w", err)
	}
	return nil
}

// PostgreSQL error codes the service reacts to.
const (
	codeUniqueViolation  = "23505"
	codeLockNotAvailable = "55P03"
	// Class 28, invalid authorization specification: a wrong password, a
	// role that does not exist, a pg_hba.conf that refuses the client.
	classInvalidAuthorization = "28"
	codeInvalidCatalogName    = "3D000" // the database does not exist
	// A session the server ended: IsSessionEnded.
	codeAdminShutdown        = "57P01"
	codeCrashShutdown        = "57P02"
	codeCannotConnectNow     = "57P03"
	classConnectionException = "08"
	codeProtocolViolation    = "08P01"
	codeInternalError        = "XX000"
)

// IsRejected reports whether err is the server refusing a connection for
// a reason that asking again will not change: the credentials, the role or
// the database of the URL. A server that is not up yet, or that is starting
// or shutting down, is not rejecting: trying again may succeed.
func IsRejected(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	return strings.HasPrefix(pgErr.Code, classInvalidAuthorization) || pgErr.Code == codeInvalidCatalogName
}

// IsUniqueViolation reports whether err is a unique violation of the named
// constraint (any constraint when constraint is empty). On Citus a
// worker's violation reaches the client without the constraint's name
// (the shard's, orders_tenant_idempotency_key_102008, is in the message
// only): name none there.
func IsUniqueViolation(err error, constraint string) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != codeUniqueViolation {
		return false
	}
	return constraint == "" || pgErr.ConstraintName == constraint
}

// IsUnavailable reports whether err says that the database could not be
// reached, did not answer in time or ended the session, rather than that
// it refused the work: a deadline that ran out (the caller's, or the
// connect timeout), a connection that could not be opened, one that broke
// mid-statement, or a session the server itself ended (IsSessionEnded).
// The work may or may not have happened; repeating it (with the same
// idempotency key) is safe, and the answer is 503, not 500.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) ||
		errors.As(err, &connectErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, pgconn.ErrConnClosed) || IsSessionEnded(err)
}

// IsSessionEnded reports whether err is the server ending the session or
// the connection under the statement: an operator's pg_terminate_backend
// or a fast shutdown (57P01 admin_shutdown), another backend's crash
// (57P02 crash_shutdown), a server still starting or recovering (57P03
// cannot_connect_now), or a connection exception (class 08; Citus reports
// a lost connection from the coordinator to a worker as 08006
// connection_failure). None of them is about the work itself: the same
// statement on a new session may well succeed. A protocol violation
// (08P01), although of class 08, is a bug of a client and stays one. Nor
// is any other internal error (XX000) but the one a Citus coordinator
// raises when a worker's connection failed at COMMIT (citusCommitFailed).
func IsSessionEnded(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case codeAdminShutdown, codeCrashShutdown, codeCannotConnectNow:
		return true
	case codeProtocolViolation:
		return false
	}
	if pgErr.Code == codeInternalError && strings.HasPrefix(pgErr.Message, citusCommitFailed) {
		return true
	}
	return strings.HasPrefix(pgErr.Code, classConnectionException)
}

// citusCommitFailed begins the error a Citus coordinator raises at COMMIT
// when a worker's connection of the transaction failed (XX000, "could not
// commit transaction for shard 102157 on at least one active node"). Citus
// raises it for a deferred constraint or trigger that fails at COMMIT too,
// but the schema has none (TestTheSchemaDefersNothing): here it is always
// the connection, the session's end seen from the coordinator, and the
// transaction's outcome is for the retry to find.
const citusCommitFailed = "could not commit transaction for shard "

// IsLockTimeout reports whether err is a lock wait that ran out of
// lock_timeout: another transaction holds the row for longer than we wait.
func IsLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == codeLockNotAvailable
}
