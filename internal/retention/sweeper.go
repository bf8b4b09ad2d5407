package retention

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/postgres"
)

// Sweeper deletes expired records in small batches.
type Sweeper struct {
	pool   *pgxpool.Pool
	policy Policy
	batch  int
	// stuckAfter is how long a pending record may sit with an expired lease
	// before it is reported as stuck.
	stuckAfter time.Duration
	logger     *slog.Logger
	now        func() time.Time
	observe    func(Report)
	// duty is the share of wall time the sweeper spends in delete
	// statements while there is more to delete (0 < duty <= 1).
	duty float64
	// sleep waits out a pause (a timer; tests record the pauses instead).
	sleep func(ctx context.Context, d time.Duration) error
}

// SweeperOption configures a Sweeper.
type SweeperOption func(*Sweeper)

// WithReportObserver receives the report of every successful sweep, e.g.
// for metrics.
func WithReportObserver(fn func(Report)) SweeperOption {
	return func(s *Sweeper) { s.observe = fn }
}

// WithDutyCycle paces a sweep with a backlog: after each full batch the
// sweeper pauses so that deleting takes at most duty (0 < duty <= 1) of the
// wall time; 1 never pauses. The pause grows with the batch's duration, so
// a busy database, whose batches take longer, gets longer breaks. Deleting a
// month of records is never urgent; the traffic of today is.
func WithDutyCycle(duty float64) SweeperOption {
	return func(s *Sweeper) { s.duty = min(max(duty, 0.01), 1) }
}

// DefaultDutyCycle is the pacing of a sweep with a backlog: 1/16 of the
// time deleting, measured in docs/BENCHMARKS.md (sweep comparison).
const DefaultDutyCycle = 0.0625

// NewSweeper returns a Sweeper that deletes at most batch rows per
// statement, paced by DefaultDutyCycle unless an option says otherwise.
func NewSweeper(pool *pgxpool.Pool, policy Policy, batch int, stuckAfter time.Duration, logger *slog.Logger, now func() time.Time, opts ...SweeperOption) *Sweeper {
	s := &Sweeper{pool: pool, policy: policy, batch: batch, stuckAfter: stuckAfter, logger: logger, now: now, observe: func(Report) {}, duty: DefaultDutyCycle, sleep: sleep}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Report counts what one sweep did.
type Report struct {
	// Deleted counts deleted rows per kind.
	Deleted map[string]int64
	// Stuck counts pending idempotency records whose lease ran out more than
	// stuckAfter ago: unsettled operations, kept, and worth a look.
	Stuck int64
}

// Bounds of one delete statement: a batch never holds its locks long, and a
// row some request holds is skipped, not waited for.
const (
	batchStatementTimeout = 5 * time.Second
	batchLockTimeout      = 100 * time.Millisecond
)

// SweepOnce deletes every expired record, a batch per transaction, until
// none is left or ctx ends. Several sweepers may run at once: they skip the
// rows the others hold.
func (s *Sweeper) SweepOnce(ctx context.Context) (Report, error) {
	now := s.now().UTC()
	rep := Report{Deleted: map[string]int64{}}
	kinds := []struct {
		name   string
		delete func(q *dbsqlc.Queries) (int64, error)
	}{
		{"api_idempotency", func(q *dbsqlc.Queries) (int64, error) {
			// Each record carries its own expiry, set from the policy of its
			// operation when it was finished.
			return q.RetentionDeleteIdempotency(ctx, dbsqlc.RetentionDeleteIdempotencyParams{Cutoff: now, MaxRows: int32(s.batch)})
		}},
		{"outbox_events", func(q *dbsqlc.Queries) (int64, error) {
			return q.RetentionDeletePublishedEvents(ctx, dbsqlc.RetentionDeletePublishedEventsParams{Cutoff: now.Add(-s.policy.PublishedEvents), MaxRows: int32(s.batch)})
		}},
		{"webhook_receipts", func(q *dbsqlc.Queries) (int64, error) {
			return q.RetentionDeleteWebhookReceipts(ctx, dbsqlc.RetentionDeleteWebhookReceiptsParams{Cutoff: now.Add(-s.policy.WebhookReceipts), MaxRows: int32(s.batch)})
		}},
		{"processed_messages", func(q *dbsqlc.Queries) (int64, error) {
			return q.RetentionDeleteProcessedMessages(ctx, dbsqlc.RetentionDeleteProcessedMessagesParams{Cutoff: now.Add(-s.policy.ProcessedMessages), MaxRows: int32(s.batch)})
		}},
	}
	for _, k := range kinds {
		for {
			var n int64
			started := time.Now()
			err := postgres.InTx(ctx, s.pool, func(tx pgx.Tx) error {
				// synchronous_commit off: a batch does not wait for its WAL
				// flush. If a crash loses it, its rows come back and the next
				// sweep deletes them again; nothing depends on their absence.
				if _, err := tx.Exec(ctx, `SELECT set_config('statement_timeout', $1, true), set_config('lock_timeout', $2, true),
					set_config('synchronous_commit', 'off', true)`,
					fmt.Sprint(batchStatementTimeout.Milliseconds()), fmt.Sprint(batchLockTimeout.Milliseconds())); err != nil {
					return err
				}
				var err error
				n, err = k.delete(dbsqlc.New(tx))
				return err
			})
			if err != nil {
				return rep, fmt.Errorf("sweep %s: %w", k.name, err)
			}
			rep.Deleted[k.name] += n
			if n < int64(s.batch) {
				break
			}
			if err := s.pace(ctx, time.Since(started)); err != nil {
				return rep, err
			}
		}
	}
	stuck, err := dbsqlc.New(s.pool).RetentionCountStuck(ctx, now.Add(-s.stuckAfter))
	if err != nil {
		return rep, fmt.Errorf("count stuck operations: %w", err)
	}
	rep.Stuck = stuck
	s.observe(rep)
	if stuck > 0 {
		s.logger.WarnContext(ctx, "unsettled operations kept past their lease; the recoverer has not finished them",
			"stuck", stuck, "stuck_after", s.stuckAfter)
	}
	return rep, nil
}

// pace pauses after a full batch that took took, so that deleting stays
// within the duty cycle; it returns early with ctx's error.
func (s *Sweeper) pace(ctx context.Context, took time.Duration) error {
	if p := s.pause(took); p > 0 {
		return s.sleep(ctx, p)
	}
	return nil
}

// pause is how long to rest after a batch that took took: deleting for
// took and resting for the pause spends duty of the time deleting.
func (s *Sweeper) pause(took time.Duration) time.Duration {
	if s.duty >= 1 {
		return 0
	}
	return time.Duration(float64(took) * (1 - s.duty) / s.duty)
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Run sweeps every interval, with jitter so several processes spread out,
// until ctx is cancelled.
func (s *Sweeper) Run(ctx context.Context, interval time.Duration) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval/2 + rand.N(interval)):
		}
		rep, err := s.SweepOnce(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.logger.ErrorContext(ctx, "sweep", "error", err.Error())
			continue
		}
		s.logger.InfoContext(ctx, "swept expired records", "deleted", rep.Deleted, "stuck", rep.Stuck)
	}
}
