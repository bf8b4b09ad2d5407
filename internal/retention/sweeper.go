package retention

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/postgres"
)

// DeleteFunc deletes, in tx, up to limit rows of one table that are older
// than cutoff and that the table's owner may forget, and reports how many it
// deleted. It must skip rows other transactions hold (FOR UPDATE SKIP
// LOCKED) rather than wait for them.
type DeleteFunc func(ctx context.Context, tx pgx.Tx, cutoff time.Time, limit int) (int64, error)

// TenantDeleteFunc is a DeleteFunc for a tenant-owned table: it deletes
// only the tenant's rows. The sweeper visits the tenants one by one, so that
// on Citus every delete stays on one tenant's shard (a FOR UPDATE across
// shards is refused there).
type TenantDeleteFunc func(ctx context.Context, tx pgx.Tx, tenant uuid.UUID, cutoff time.Time, limit int) (int64, error)

// Tables are what the sweeper runs. The sweeper owns no table: each record
// kind is deleted by the package that owns its table, and the sweeper
// decides only when (the policy's cutoffs), how much at a time and how fast.
type Tables struct {
	// Tenants lists the tenants whose rows the tenant-owned kinds delete
	// (tenants.IDs).
	Tenants func(ctx context.Context, db *pgxpool.Pool) ([]uuid.UUID, error)
	// Idempotency deletes finished idempotency records whose own expiry is
	// at or before cutoff (idempotency.Store.DeleteExpired).
	Idempotency TenantDeleteFunc
	// PublishedEvents deletes outbox events published at or before cutoff
	// (outbox.DeleteExpired).
	PublishedEvents TenantDeleteFunc
	// WebhookReceipts deletes processed webhook receipts received at or
	// before cutoff (webhooks.DeleteExpired). Receipts belong to no tenant
	// (the provider's deliveries; on Citus a table of the coordinator).
	WebhookReceipts DeleteFunc
	// ProcessedMessages deletes the consumers' inbox rows of messages
	// processed at or before cutoff (inbox.DeleteExpired).
	ProcessedMessages TenantDeleteFunc
	// CountStuck counts pending idempotency records whose lease ran out
	// before cutoff (idempotency.Store.CountStuck).
	CountStuck func(ctx context.Context, db idempotency.DB, cutoff time.Time) (int64, error)
}

// Sweeper deletes expired records in small batches.
type Sweeper struct {
	pool   *pgxpool.Pool
	tables Tables
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
// for metrics (default none).
func WithReportObserver(fn func(Report)) SweeperOption {
	return func(s *Sweeper) { s.observe = fn }
}

// WithDutyCycle paces a sweep with a backlog: after each full batch the
// sweeper pauses so that deleting takes at most duty (0 < duty <= 1) of the
// wall time; 1 never pauses. The pause grows with the batch's duration, so
// a busy database, whose batches take longer, gets longer breaks. Deleting a
// month of records is never urgent; the traffic of today is. The default is
// DefaultDutyCycle (1/16).
func WithDutyCycle(duty float64) SweeperOption {
	return func(s *Sweeper) { s.duty = min(max(duty, 0.01), 1) }
}

// DefaultDutyCycle is the pacing of a sweep with a backlog: 1/16 of the
// time deleting, measured in docs/BENCHMARKS.md (sweep comparison).
const DefaultDutyCycle = 0.0625

// DefaultBatchSize bounds the rows one delete statement removes unless
// WithBatchSize says otherwise: small enough that a batch holds its locks
// briefly, measured in docs/BENCHMARKS.md (sweep comparison).
const DefaultBatchSize = 250

// DefaultStuckAfter is how long a pending record may outlive its lease
// before a sweep reports it as stuck, unless WithStuckAfter says otherwise.
const DefaultStuckAfter = 15 * time.Minute

// WithBatchSize bounds the rows one delete statement removes (default
// DefaultBatchSize, 250); n <= 0 keeps the default.
func WithBatchSize(n int) SweeperOption {
	return func(s *Sweeper) {
		if n > 0 {
			s.batch = n
		}
	}
}

// WithStuckAfter is how long a pending record may sit with an expired lease
// before a sweep reports it as stuck (default DefaultStuckAfter, 15
// minutes); d <= 0 keeps the default.
func WithStuckAfter(d time.Duration) SweeperOption {
	return func(s *Sweeper) {
		if d > 0 {
			s.stuckAfter = d
		}
	}
}

// NewSweeper returns a Sweeper that runs the owners' deletes in tables with
// the cutoffs of policy, at most DefaultBatchSize rows per statement, paced
// by DefaultDutyCycle, unless options say otherwise.
func NewSweeper(pool *pgxpool.Pool, tables Tables, policy Policy, logger *slog.Logger, now func() time.Time, opts ...SweeperOption) *Sweeper {
	s := &Sweeper{
		pool: pool, tables: tables, policy: policy, logger: logger, now: now,
		batch: DefaultBatchSize, stuckAfter: DefaultStuckAfter, observe: func(Report) {}, duty: DefaultDutyCycle, sleep: sleep,
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// The kinds of record a sweep deletes, as Report.Deleted names them: the
// table each lives in.
const (
	TableIdempotency       = "api_idempotency"
	TablePublishedEvents   = "outbox_events"
	TableWebhookReceipts   = "webhook_receipts"
	TableProcessedMessages = "processed_messages"
)

// TableNames lists every kind of record a sweep deletes.
func TableNames() []string {
	return []string{TableIdempotency, TablePublishedEvents, TableWebhookReceipts, TableProcessedMessages}
}

// Report counts what one sweep did.
type Report struct {
	// Deleted counts deleted rows per kind (TableNames).
	Deleted map[string]int64
	// Stuck counts pending idempotency records whose lease ran out longer
	// ago than the sweeper's stuck time (WithStuckAfter): unsettled
	// operations, kept, and worth a look.
	Stuck int64
}

// Bounds of one delete statement: a batch never holds its locks long, and a
// row some request holds is skipped, not waited for.
const (
	batchStatementTimeout = 5 * time.Second
	batchLockTimeout      = 100 * time.Millisecond
	// batchTimeout bounds a batch's transaction on our side: the server's
	// statement timeout cannot end a wait for a database that stopped
	// answering (a partition), this does, and the next sweep carries on.
	batchTimeout = 2 * batchStatementTimeout
)

// SweepOnce deletes every expired record, a batch per transaction, until
// none is left or ctx ends. Several sweepers may run at once: they skip the
// rows the others hold.
func (s *Sweeper) SweepOnce(ctx context.Context) (Report, error) {
	now := s.now().UTC()
	rep := Report{Deleted: map[string]int64{}}
	lctx, cancel := context.WithTimeout(ctx, batchTimeout)
	tenants, err := s.tables.Tenants(lctx, s.pool)
	cancel()
	if err != nil {
		return rep, fmt.Errorf("sweep: %w", err)
	}
	kinds := []struct {
		name   string
		cutoff time.Time
		delete TenantDeleteFunc
	}{
		// Each idempotency record carries its own expiry, set from the
		// policy of its operation when it was finished.
		{TableIdempotency, now, s.tables.Idempotency},
		{TablePublishedEvents, now.Add(-s.policy.PublishedEvents), s.tables.PublishedEvents},
		{TableProcessedMessages, now.Add(-s.policy.ProcessedMessages), s.tables.ProcessedMessages},
	}
	for _, k := range kinds {
		for _, tenant := range tenants {
			del := func(ctx context.Context, tx pgx.Tx, cutoff time.Time, limit int) (int64, error) {
				return k.delete(ctx, tx, tenant, cutoff, limit)
			}
			if err := s.sweepKind(ctx, &rep, k.name, del, k.cutoff); err != nil {
				return rep, err
			}
		}
	}
	if err := s.sweepKind(ctx, &rep, TableWebhookReceipts, s.tables.WebhookReceipts, now.Add(-s.policy.WebhookReceipts)); err != nil {
		return rep, err
	}
	cctx, cancel := context.WithTimeout(ctx, batchTimeout)
	stuck, err := s.tables.CountStuck(cctx, s.pool, now.Add(-s.stuckAfter))
	cancel()
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

// sweepKind deletes with del, a batch at a time, until a batch finds fewer
// than a full batch, and counts what it deleted in rep.
func (s *Sweeper) sweepKind(ctx context.Context, rep *Report, name string, del DeleteFunc, cutoff time.Time) error {
	for {
		started := time.Now()
		n, err := s.deleteBatch(ctx, del, cutoff)
		if err != nil {
			return fmt.Errorf("sweep %s: %w", name, err)
		}
		rep.Deleted[name] += n
		if n < int64(s.batch) {
			return nil
		}
		if err := s.pace(ctx, time.Since(started)); err != nil {
			return err
		}
	}
}

// deleteBatch deletes one batch of expired records with del, in a
// transaction of its own, bounded by batchTimeout.
func (s *Sweeper) deleteBatch(ctx context.Context, del DeleteFunc, cutoff time.Time) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, batchTimeout)
	defer cancel()
	var n int64
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
		n, err = del(ctx, tx, cutoff, s.batch)
		return err
	})
	return n, err
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
		case <-time.After(interval/2 + rand.N(interval)): // #nosec G404 -- jitter that spreads sweeps out; nothing depends on it being unpredictable
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
