package operation

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/postgres"
)

// Batch is a step's transaction written against a pipeline (Step.Batch):
// the statements a step queues into it (the sqlc batch queries, named
// ...Queued, through dbsqlc.New(b)) are sent together by Send, one round
// trip for all of them, and their results are read after it. The loop
// queues BEGIN and the record's lock ahead of the step's first statement
// and COMMIT after its last, so a step that queues its reads, sends them
// and then queues its writes and the record's update costs two round trips:
//
//	Send: BEGIN, the record's lock (the claim of a new key, or Reacquire),
//	      the step's reads
//	      the step decides from its reads, and queues
//	the loop: the step's writes, the record's update
//	      (Attempt.Next, Finish or Refuse), COMMIT
//
// Nothing is decided between the statements of one send, so each must be
// right whatever the ones before it did, or fail: a failed statement makes
// PostgreSQL skip the rest, COMMIT included, and the transaction rolls back.
// A rare branch that needs more reads sends again (a round trip more).
//
// The first Send also reads the record's lock. Its error, which the step
// returns as it is, may be the record's own answer: a key that has a record
// already, or a record finished meanwhile. The loop then answers from the
// record, and nothing the step did commits. The record's update needs that
// lock (idempotency.ErrNotLocked before the first Send).
type Batch struct {
	conn *pgxpool.Conn
	// queued is what was queued since the last Send; sent is the last one
	// sent, whose results the step reads until the next Send.
	queued, sent *postgres.Pipeline
	// lock reads the record's lock, at the first Send.
	lock func() error
	// decided is the record's answer when the lock found it finished.
	decided *idempotency.Response
}

// errTaken is the first Send's error when the claim of a new key found a
// record: the loop decides what that record means (claimTaken).
var errTaken = errors.New("operation: the key has a record")

// errDecided is the first Send's error when Reacquire found the record
// finished meanwhile: the loop answers with its stored outcome.
var errDecided = errors.New("operation: the record was finished meanwhile")

// Send sends every statement queued since the last Send in one round trip;
// their results are read afterwards, in the order they were queued. The
// results of the send before it can no longer be read.
func (b *Batch) Send(ctx context.Context) error {
	if err := b.closeSent(); err != nil {
		return err
	}
	b.queued.Send(ctx)
	b.sent, b.queued = b.queued, postgres.NewPipeline(b.conn)
	if lock := b.lock; lock != nil {
		b.lock = nil
		return lock()
	}
	return nil
}

// closeSent reads what is left of the last send: its first error, if any.
func (b *Batch) closeSent() error {
	if b.sent == nil {
		return nil
	}
	err := b.sent.Close()
	b.sent = nil
	return err
}

// SendBatch queues the statements of a sqlc batch query (their DBTX).
func (b *Batch) SendBatch(ctx context.Context, batch *pgx.Batch) pgx.BatchResults {
	return b.queued.SendBatch(ctx, batch)
}

// Exec refuses: a statement outside a batch query would be a round trip of
// its own (postgres.ErrNotQueued).
func (b *Batch) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return b.queued.Exec(ctx, sql, args...)
}

// Query refuses, as Exec.
func (b *Batch) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return b.queued.Query(ctx, sql, args...)
}

// QueryRow refuses, as Exec.
func (b *Batch) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return b.queued.QueryRow(ctx, sql, args...)
}

// inBatch runs a step's transaction on conn as Batch describes.
// committing reports an error that is COMMIT's, whose outcome is unknown
// (a dropped connection).
func (p *Phases[T]) inBatch(ctx context.Context, conn *pgxpool.Conn, a *Attempt[T], point idempotency.RecoveryPoint,
	body func(context.Context, *Batch, *Attempt[T]) (Outcome, error)) (out Outcome, committing bool, err error) {
	// Whatever stops before COMMIT did leaves a transaction open.
	defer postgres.RollbackOpen(ctx, conn)
	b := &Batch{conn: conn, queued: postgres.NewPipeline(conn)}
	b.queued.Queue("BEGIN")
	if a.Claim == nil {
		claim, err := p.r.store.QueueClaim(ctx, b, a.req)
		if err != nil {
			return Outcome{}, false, err
		}
		b.lock = func() error {
			if claim.Taken() {
				return errTaken
			}
			c, err := claim.Claim(ctx, conn) // fresh: the lock is the insert's
			if err != nil {
				return err
			}
			a.Claim = c
			return nil
		}
	} else {
		reacquired := a.Claim.QueueReacquire(ctx, b)
		b.lock = func() error {
			stored, err := reacquired.Result()
			if stored != nil {
				b.decided = stored
				return errDecided
			}
			return err
		}
	}
	out, err = body(ctx, b, a)
	if errors.Is(err, errDecided) {
		_ = b.closeSent()
		return Outcome{final: b.decided}, false, nil
	}
	if err != nil {
		_ = b.closeSent()
		return Outcome{}, false, err
	}
	if out.done == nil {
		_ = b.closeSent()
		return Outcome{}, false, fmt.Errorf("%s at %s: a Batch step must end with its record's update (Attempt.Next, Finish or Refuse)", p.op, point)
	}
	if err := p.check(point, out); err != nil {
		_ = b.closeSent()
		return Outcome{}, false, err
	}
	if err := p.r.hooks.beforeCommit(p.op, point); err != nil {
		_ = b.closeSent()
		return Outcome{}, false, err
	}
	b.queued.Queue("COMMIT")
	if err := b.Send(ctx); err != nil {
		return Outcome{}, false, err // an earlier send's statement failed: COMMIT was not sent
	}
	last := b.sent
	b.sent = nil
	err = errors.Join(out.done(), last.Close())
	if err != nil {
		var refused *pgconn.PgError
		if !errors.As(err, &refused) {
			// Not a statement the server refused (which makes it skip the
			// rest, COMMIT included): the connection failed with COMMIT on
			// its way, so whether it committed is unknown.
			return out, true, fmt.Errorf("%s at %s, commit: %w", p.op, point, err)
		}
		return Outcome{}, false, err
	}
	return out, false, nil
}
