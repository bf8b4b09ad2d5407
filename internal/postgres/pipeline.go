package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Pipeline gathers statements into one batch, sent to PostgreSQL in one
// round trip: the write path's way to pay for a transaction in two round
// trips instead of one per statement.
//
// It is the DBTX of the sqlc packages' batch queries (the ":batchone",
// ":batchexec" and ":batchmany" ones, named ...Queued): their SendBatch
// queues the statement here and returns its results, which are read once
// Send has sent everything queued so far, and in the order they were
// queued (the protocol answers in that order). Raw statements (BEGIN,
// COMMIT) are queued with Queue. The other DBTX methods refuse: a
// statement outside the batch would be a round trip of its own.
//
// A Pipeline is used by one goroutine, and sent once; a transaction in two
// batches uses two Pipelines on the same connection.
type Pipeline struct {
	conn  Conn
	batch pgx.Batch
	// results is what Send got back; next is the index of the next result
	// to read, and err the first error read (what the rest report too).
	results pgx.BatchResults
	next    int
	err     error
	sent    bool
}

// Conn is what a Pipeline is sent on: a connection (pgx.Conn,
// pgxpool.Conn) or a transaction.
type Conn interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// NewPipeline returns an empty pipeline to be sent on conn.
func NewPipeline(conn Conn) *Pipeline { return &Pipeline{conn: conn} }

// ErrNotQueued is the error of a statement run on a Pipeline outside a
// batch query.
var ErrNotQueued = errors.New("postgres: a pipeline runs batch queries only")

// Queue adds a statement whose result only says whether it succeeded
// (BEGIN, COMMIT): Close reports its error.
func (p *Pipeline) Queue(sql string, args ...any) {
	p.batch.Queue(sql, args...)
}

// SendBatch queues b's statements (a sqlc batch query calls it) and
// returns their results, readable after Send.
func (p *Pipeline) SendBatch(_ context.Context, b *pgx.Batch) pgx.BatchResults {
	first := p.batch.Len()
	p.batch.QueuedQueries = append(p.batch.QueuedQueries, b.QueuedQueries...)
	return &queued{p: p, first: first, n: b.Len()}
}

// Send sends every queued statement in one round trip. Their results are
// read afterwards, in order (each sqlc results' QueryRow, Exec or Query,
// then Close for the rest).
func (p *Pipeline) Send(ctx context.Context) {
	if p.sent {
		panic("postgres: a pipeline is sent once")
	}
	p.sent = true
	p.results = p.conn.SendBatch(ctx, &p.batch)
}

// Close reads the results not read yet and returns the first error of the
// batch, if any (the statements after a failed one are not run: the
// server skips them, COMMIT included).
func (p *Pipeline) Close() error {
	if !p.sent {
		return nil
	}
	for p.next < p.batch.Len() {
		p.skipTo(p.next + 1)
	}
	if err := p.results.Close(); err != nil && p.err == nil {
		p.err = err
	}
	return p.err
}

// skipTo reads (and discards) results up to index i, exclusive.
func (p *Pipeline) skipTo(i int) {
	for p.next < i {
		if _, err := p.results.Exec(); err != nil && p.err == nil {
			p.err = err
		}
		p.next++
	}
}

// result returns the results to read the statement at index i from, after
// reading the ones before it.
func (p *Pipeline) result(i int) (pgx.BatchResults, error) {
	switch {
	case !p.sent:
		return nil, errors.New("postgres: pipeline results read before Send")
	case i < p.next:
		return nil, fmt.Errorf("postgres: pipeline result %d read after result %d", i, p.next-1)
	}
	p.skipTo(i)
	p.next = i + 1
	return p.results, nil
}

// Exec refuses: see ErrNotQueued.
func (p *Pipeline) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, ErrNotQueued
}

// Query refuses: see ErrNotQueued.
func (p *Pipeline) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, ErrNotQueued
}

// QueryRow refuses: see ErrNotQueued.
func (p *Pipeline) QueryRow(context.Context, string, ...any) pgx.Row { return errRow{ErrNotQueued} }

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// queued is the results of one sqlc batch query's statements: n of them
// from index first of the pipeline.
type queued struct {
	p        *Pipeline
	first, n int
	read     int
}

func (q *queued) at() (pgx.BatchResults, error) {
	if q.read >= q.n {
		return nil, errors.New("postgres: more results read than queued")
	}
	br, err := q.p.result(q.first + q.read)
	q.read++
	return br, err
}

func (q *queued) Exec() (pgconn.CommandTag, error) {
	br, err := q.at()
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	return br.Exec()
}

func (q *queued) Query() (pgx.Rows, error) {
	br, err := q.at()
	if err != nil {
		return nil, err
	}
	return br.Query()
}

func (q *queued) QueryRow() pgx.Row {
	br, err := q.at()
	if err != nil {
		return errRow{err}
	}
	return br.QueryRow()
}

// Close leaves the rest of the pipeline's results to the Pipeline: the
// sqlc results close theirs when read, and the batch goes on after them.
func (q *queued) Close() error { return nil }

// Tx is nil: a pipeline's transaction is its BEGIN and COMMIT statements.
func (q *queued) Tx() pgx.Tx { return nil }

// RollbackOpen rolls back the transaction a pipeline left open on conn, if
// any (a batch that failed before its COMMIT, or one whose first batch
// decided to go no further). On a broken connection it does nothing more:
// the pool closes a connection released in the middle of a transaction.
func RollbackOpen(ctx context.Context, conn interface {
	Conn() *pgx.Conn
}) {
	if conn.Conn().PgConn().TxStatus() == 'I' {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), RollbackTimeout)
	defer cancel()
	_, _ = conn.Conn().Exec(rctx, "ROLLBACK")
}
