package outbox

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/oncepay/oncepay/internal/outbox/internal/dbsqlc"
)

// Result counts what one DispatchOnce did.
type Result struct {
	// Claimed rows, published (acknowledged and marked) rows, and rows whose
	// attempt failed. Stuck counts the failed rows that reached WithMaxAttempts.
	Claimed, Published, Failed, Stuck int
}

// DispatchOnce claims one batch of due rows of each tenant that has some,
// publishes it and records the outcome. The error is for the round as a
// whole (database unreachable); a failed publish is not an error but a
// recorded attempt.
//
// The claim goes tenant by tenant: it finds the tenants with due rows
// (OutboxDueTenants, no lock), then claims each one's rows
// (OutboxClaimBatch, FOR UPDATE SKIP LOCKED on one tenant's rows). On Citus
// every claim is then a single-shard statement; a FOR UPDATE across shards
// is refused there.
//
// Once a batch is claimed, DispatchOnce finishes it even when ctx is
// cancelled, bounded by the publish timeout: a shutdown does not leave rows
// leased behind for a full lease.
func (d *Dispatcher) DispatchOnce(ctx context.Context) (Result, error) {
	res, _, err := d.dispatchDue(ctx)
	return res, err
}

// dispatchDue is DispatchOnce; it also returns the tenants whose batch was
// full, who probably have more due rows.
func (d *Dispatcher) dispatchDue(ctx context.Context) (Result, []uuid.UUID, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, nil, err
	}
	listCtx, cancelList := context.WithTimeout(ctx, d.cfg.dbTimeout)
	tenants, err := dbsqlc.New(d.book).OutboxDueTenants(listCtx, dbsqlc.OutboxDueTenantsParams{Now: d.nowUTC(), MaxRows: maxTenantsPerRound})
	cancelList()
	if err != nil {
		return Result{}, nil, fmt.Errorf("list tenants with due outbox events: %w", err)
	}
	if len(tenants) == maxTenantsPerRound {
		d.Notify() // more tenants wait: another round takes them
	}
	return d.dispatchTenants(ctx, tenants)
}

// dispatchTenants claims, publishes and records one batch of each tenant's
// due rows, and returns the tenants whose batch was full.
func (d *Dispatcher) dispatchTenants(ctx context.Context, tenants []uuid.UUID) (Result, []uuid.UUID, error) {
	var res Result
	var full []uuid.UUID
	for _, tenant := range tenants {
		r, err := d.dispatchTenant(ctx, tenant)
		res.Claimed += r.Claimed
		res.Published += r.Published
		res.Failed += r.Failed
		res.Stuck += r.Stuck
		if err != nil {
			return res, full, err
		}
		if r.Claimed == d.cfg.batchSize {
			full = append(full, tenant)
		}
		if ctx.Err() != nil {
			break // what is claimed is finished; the rest waits for the next process
		}
	}
	return res, full, nil
}

// maxTenantsPerRound bounds the tenants one round visits.
const maxTenantsPerRound = 100

// dispatchTenant claims one batch of the tenant's due rows, publishes it and
// records the outcome.
func (d *Dispatcher) dispatchTenant(ctx context.Context, tenant uuid.UUID) (Result, error) {
	token, err := uuid.NewV7()
	if err != nil {
		return Result{}, fmt.Errorf("claim token: %w", err)
	}
	now := d.nowUTC()
	began := time.Now()
	claimCtx, cancelClaim := context.WithTimeout(ctx, d.cfg.dbTimeout)
	rows, err := dbsqlc.New(d.book).OutboxClaimBatch(claimCtx, dbsqlc.OutboxClaimBatchParams{
		TenantID:   tenant,
		Now:        now,
		MaxRows:    int32(d.cfg.batchSize), // #nosec G115 -- the batch size is set in code (default 500), never near MaxInt32
		LeaseUntil: now.Add(d.cfg.lease),
		Token:      token,
	})
	cancelClaim()
	if err != nil {
		return Result{}, fmt.Errorf("claim outbox batch: %w", err)
	}
	res := Result{Claimed: len(rows)}
	if len(rows) == 0 {
		return res, nil
	}
	if len(rows) == d.cfg.batchSize {
		// More rows are probably waiting: wake another loop to claim the
		// tenant's next batch while this one publishes.
		d.sig.Committed(tenant)
	}
	// UPDATE ... RETURNING keeps no order; publish oldest first.
	slices.SortFunc(rows, func(a, b dbsqlc.OutboxEvent) int { return cmp.Compare(a.Seq, b.Seq) })

	// Publishing waits at most the publish timeout, and each statement
	// after it at most the database timeout.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.publishTimeout+2*d.cfg.dbTimeout)
	defer cancel()
	claimed := time.Now()
	errs := d.publish(ctx, rows, now)
	acked := time.Now()

	published := make([]uuid.UUID, 0, len(rows))
	var failed []int
	for i, r := range rows {
		if errs[i] == nil {
			published = append(published, r.ID)
		} else {
			failed = append(failed, i)
		}
	}
	if len(published) > 0 {
		d.observe(AttemptPublished, len(published))
	}
	if len(failed) > 0 {
		d.observe(AttemptFailed, len(failed))
	}
	if h := d.hooks.AfterPublish; h != nil && len(published) > 0 {
		if err := h(published); err != nil {
			return res, err
		}
	}
	if len(published) > 0 {
		markCtx, cancelMark := context.WithTimeout(ctx, d.cfg.dbTimeout)
		n, err := dbsqlc.New(d.book).OutboxMarkPublished(markCtx, dbsqlc.OutboxMarkPublishedParams{PublishedAt: d.nowUTC(), TenantID: tenant, Ids: published})
		cancelMark()
		if err != nil {
			// The rows stay leased and are published again after the
			// lease: a duplicate the stream's window or the inbox absorbs.
			return res, fmt.Errorf("mark %d outbox events published: %w", len(published), err)
		}
		res.Published = int(n)
	}
	if len(failed) > 0 {
		stuck, err := d.recordFailures(ctx, tenant, token, rows, errs, failed)
		if err != nil {
			return res, err
		}
		res.Failed, res.Stuck = len(failed), stuck
	}
	d.logger.DebugContext(ctx, "outbox batch dispatched", "claimed", res.Claimed, "published", res.Published, "failed", res.Failed,
		"claim_ms", ms(claimed.Sub(began)), "publish_ms", ms(acked.Sub(claimed)), "record_ms", ms(time.Since(acked)))
	return res, nil
}

// recordFailures counts a failed attempt for each failed row and reports how
// many became stuck.
func (d *Dispatcher) recordFailures(ctx context.Context, tenant, token uuid.UUID, rows []dbsqlc.OutboxEvent, errs []error, failed []int) (int, error) {
	now := d.nowUTC()
	p := dbsqlc.OutboxRecordFailuresParams{Now: now, TenantID: tenant, Token: token}
	for _, i := range failed {
		attempts := int(rows[i].Attempts) + 1
		p.Ids = append(p.Ids, rows[i].ID)
		p.LastErrors = append(p.LastErrors, truncate(errs[i].Error(), maxErrorLen))
		p.NextAttemptAts = append(p.NextAttemptAts, now.Add(Backoff(attempts, d.cfg.backoffBase, d.cfg.backoffMax, rand.Float64()))) // #nosec G404 -- backoff jitter; nothing depends on it being unpredictable
		p.Stuck = append(p.Stuck, attempts >= d.cfg.maxAttempts)
	}
	rctx, cancel := context.WithTimeout(ctx, d.cfg.dbTimeout)
	defer cancel()
	recorded, err := dbsqlc.New(d.book).OutboxRecordFailures(rctx, p)
	if err != nil {
		return 0, fmt.Errorf("record %d failed outbox publishes: %w", len(failed), err)
	}
	stuck := 0
	for _, r := range recorded {
		if r.StuckAt != nil {
			stuck++
			d.logger.ErrorContext(ctx, "outbox event stuck: no more automatic attempts; retry it once the cause is fixed",
				"event_id", r.ID, "tenant_id", r.TenantID, "type", r.EventType, "attempts", r.Attempts, "error", p.LastErrors[slices.Index(p.Ids, r.ID)])
		}
	}
	if retrying := len(recorded) - stuck; retrying > 0 {
		d.logger.WarnContext(ctx, "outbox events not published; will retry", "count", retrying, "first_error", p.LastErrors[0])
	}
	return stuck, nil
}

// maxErrorLen bounds last_error.
const maxErrorLen = 1000

// Backoff is the wait after the attempts-th failed attempt: base * 2^(attempts-1),
// capped at max, of which the upper half is scaled by jitter in [0, 1) so that
// rows failing together do not retry together.
func Backoff(attempts int, base, max time.Duration, jitter float64) time.Duration {
	d := base
	for i := 1; i < attempts && d < max; i++ { // at most 63 doublings
		d *= 2
	}
	if d > max || d <= 0 {
		d = max
	}
	return d/2 + time.Duration(float64(d/2)*jitter)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// truncate cuts s to at most n bytes of valid UTF-8 (PostgreSQL refuses
// anything else in a text column).
func truncate(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.ToValidUTF8(s, "")
}
