package webhooks

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/attention"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/tracing"
	"github.com/oncepay/oncepay/internal/webhooks/internal/dbsqlc"
)

// BatchSize is how many receipts one round of Run claims.
const BatchSize = 50

// maxErrorLen bounds last_error.
const maxErrorLen = 1000

// Worker applies stored receipts to payments and refunds.
type Worker struct {
	pool    *pgxpool.Pool
	pay     *payments.Service
	logger  *slog.Logger
	now     func() time.Time
	wake    chan struct{}
	events  *outbox.Signal
	observe func(result string)
	// roundTimeout bounds one ProcessOnce of Run (WithRoundTimeout).
	roundTimeout time.Duration
	tracer       trace.Tracer
}

// DefaultRoundTimeout bounds one round of Run unless WithRoundTimeout says
// otherwise.
const DefaultRoundTimeout = 10 * time.Second

// The results of processing one receipt, as WithApplyObserver reports them.
const (
	ResultApplied     = "applied"     // it moved a payment or refund
	ResultUnchanged   = "unchanged"   // late or repeated: it found the state final
	ResultNotOurs     = "not_ours"    // it names no payment or refund of ours
	ResultMismatch    = "mismatch"    // about other money than ours: for an operator
	ResultUndecodable = "undecodable" // a bug: validated when received
	ResultFailed      = "failed"      // not applied this time; retried with backoff
)

// ProcessResults lists every result of processing a receipt.
func ProcessResults() []string {
	return []string{ResultApplied, ResultUnchanged, ResultNotOurs, ResultMismatch, ResultUndecodable, ResultFailed}
}

// WorkerOption configures a Worker.
type WorkerOption func(*Worker)

// WithApplyObserver reports the result of every receipt a round processed,
// after the round committed (a round that rolls back reports nothing)
// (default none).
func WithApplyObserver(fn func(result string)) WorkerOption {
	return func(w *Worker) { w.observe = fn }
}

// WithRoundTimeout bounds each round of Run, one transaction over at most
// BatchSize receipts (default DefaultRoundTimeout, 10s; internal/app sets
// WRITE_TIMEOUT; not positive keeps the default). A database that stops
// answering mid-round would otherwise hold the worker, and the receipts it
// locked, until the connection dies; the round is rolled back instead, and
// the next one carries on once the database answers.
func WithRoundTimeout(d time.Duration) WorkerOption {
	return func(w *Worker) {
		if d > 0 {
			w.roundTimeout = d
		}
	}
}

// WithSignal tells s after a round that applied receipts committed:
// applying a charge or refund appends its event, and s wakes the outbox
// dispatcher of this process (outbox.WithSignal). The default is none: the
// dispatchers find the events at their next poll.
func WithSignal(s *outbox.Signal) WorkerOption {
	return func(w *Worker) { w.events = s }
}

// WithTracerProvider traces the processing of every receipt with tp: one
// span per receipt with its result, linked to the trace of the request that
// started the payment or refund it finishes (default none:
// tracing.Disabled).
func WithTracerProvider(tp trace.TracerProvider) WorkerOption {
	return func(w *Worker) { w.tracer = tp.Tracer(instrumentation) }
}

// instrumentation names this package's spans' instrumentation scope.
const instrumentation = "github.com/oncepay/oncepay/internal/webhooks"

// NewWorker returns a worker. Pass its Notify to NewReceiver (WithNotify) so
// a new receipt wakes Run at once.
func NewWorker(pool *pgxpool.Pool, pay *payments.Service, logger *slog.Logger, now func() time.Time, opts ...WorkerOption) *Worker {
	w := &Worker{pool: pool, pay: pay, logger: logger, now: now, wake: make(chan struct{}, 1), observe: func(string) {}, roundTimeout: DefaultRoundTimeout,
		tracer: tracing.Disabled().Tracer(instrumentation)}
	for _, o := range opts {
		o(w)
	}
	return w
}

// Notify wakes Run for a new round. It never blocks; wake-ups that arrive
// while one is pending merge into it.
func (w *Worker) Notify() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *Worker) nowUTC() time.Time { return w.now().UTC().Truncate(time.Microsecond) }

// claimed is one locked receipt and its decoded event.
type claimed struct {
	row      dbsqlc.WebhookReceipt
	ev       event
	parseErr error
}

// ProcessOnce claims up to limit unprocessed receipts that are due and
// applies them, in provider creation order, in one transaction that other
// workers skip (FOR UPDATE SKIP LOCKED). Each receipt is applied in its own
// savepoint together with its processed mark. It returns how many receipts
// it finished: applied, or marked processed without effect because they name
// no payment or refund of ours. A receipt whose application fails is rolled
// back to its savepoint, its attempts and last_error recorded, and it stays
// for a later round. The error is for the round as a whole (database gone,
// ctx cancelled); nothing of the round then commits.
func (w *Worker) ProcessOnce(ctx context.Context, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	var results []string
	err := postgres.InTx(ctx, w.pool, func(tx pgx.Tx) error {
		now := w.nowUTC()
		rows, err := dbsqlc.New(tx).WebhookReceiptClaimBatch(ctx, dbsqlc.WebhookReceiptClaimBatchParams{
			Now:     now,
			MaxRows: int32(min(limit, math.MaxInt32)), // #nosec G115 -- min() bounds it to MaxInt32
		})
		if err != nil {
			return fmt.Errorf("claim webhook receipts: %w", err)
		}
		batch := make([]claimed, len(rows))
		for i, row := range rows {
			batch[i].row = row
			batch[i].ev, batch[i].parseErr = parseEvent(row.Payload)
		}
		// Receipts come oldest first; within the batch, the provider's
		// creation time decides (stable: arrival order breaks ties). Across
		// batches and processes no order holds, which is why application is
		// forward-only.
		slices.SortStableFunc(batch, func(a, b claimed) int { return cmp.Compare(a.ev.created, b.ev.created) })
		results = results[:0]
		for _, c := range batch {
			res, err := w.traced(ctx, tx, c, now)
			if err != nil {
				return err
			}
			results = append(results, res)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	done := 0
	for _, res := range results {
		w.observe(res)
		if res != ResultFailed {
			done++
		}
	}
	if slices.Contains(results, ResultApplied) {
		w.events.CommittedAny()
	}
	return done, nil
}

// traced processes c in a span of its own. It ends before the round
// commits: a round that rolls back leaves spans of work that did not commit,
// with the round's error on none of them.
func (w *Worker) traced(ctx context.Context, tx pgx.Tx, c claimed, now time.Time) (string, error) {
	name := "webhook"
	if c.parseErr == nil {
		name += " " + c.ev.typ
	}
	ctx, span := w.tracer.Start(ctx, name, trace.WithAttributes(tracing.WebhookID.String(c.row.DeliveryID)))
	defer span.End()
	res, err := w.process(ctx, tx, c, now)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return res, err
	}
	span.SetAttributes(tracing.WebhookResult.String(res))
	return res, nil
}

// process applies one claimed receipt in tx and returns its result: every
// result but ResultFailed finishes the receipt, and ResultApplied changed a
// payment or refund (and appended its event). An error aborts the round.
func (w *Worker) process(ctx context.Context, tx pgx.Tx, c claimed, now time.Time) (string, error) {
	q := dbsqlc.New(tx)
	id := c.row.DeliveryID
	if c.parseErr != nil {
		// Validated when received, so this is a bug, and no retry fixes it.
		note := truncate("undecodable payload: "+c.parseErr.Error(), maxErrorLen)
		w.logger.ErrorContext(ctx, "webhook receipt cannot be decoded; marked processed", "webhook_id", id, "error", note)
		return ResultUndecodable, markProcessed(ctx, q, id, now, note)
	}

	var changed bool
	applyErr := postgres.InTx(ctx, tx, func(sp pgx.Tx) error { // a savepoint
		var err error
		if changed, err = w.apply(ctx, sp, c.ev); err != nil {
			return err
		}
		return dbsqlc.New(sp).WebhookReceiptMarkProcessed(ctx, dbsqlc.WebhookReceiptMarkProcessedParams{ProcessedAt: now, DeliveryID: id})
	})
	switch {
	case applyErr == nil:
		w.logger.DebugContext(ctx, "webhook applied", "webhook_id", id, "event_id", c.ev.id, "type", c.ev.typ, "changed", changed)
		if changed {
			return ResultApplied, nil
		}
		return ResultUnchanged, nil
	case errors.Is(applyErr, payments.ErrUnknownReference):
		// Not ours (another system on the same provider account, or a
		// reference we never made): retrying cannot change that.
		note := truncate("not applied: "+applyErr.Error(), maxErrorLen)
		w.logger.InfoContext(ctx, "webhook names nothing of ours; marked processed", "webhook_id", id, "event_id", c.ev.id, "type", c.ev.typ, "error", applyErr.Error())
		return ResultNotOurs, markProcessed(ctx, q, id, now, note)
	case errors.Is(applyErr, payments.ErrMismatch):
		// Ours, but about other money: never applied, and retrying this
		// receipt cannot change what it says. The payment or refund stays as
		// it is; a pending one is finished from the provider's API by the
		// recoverer (which checks the money too). Somebody has to look at the
		// receipt: it is set aside (processed, with its note) together with
		// its attention item, in this transaction.
		note := truncate("mismatch: "+applyErr.Error(), maxErrorLen)
		item, err := raiseMismatch(ctx, tx, id, applyErr, now)
		if err != nil {
			return "", err
		}
		w.logger.ErrorContext(ctx, "webhook disagrees with our records; not applied, set aside for an operator", "webhook_id", id,
			"event_id", c.ev.id, "type", c.ev.typ, "attention_id", item.ID, "error", applyErr.Error())
		return ResultMismatch, markProcessed(ctx, q, id, now, note)
	case ctx.Err() != nil:
		return "", ctx.Err()
	}
	w.logger.WarnContext(ctx, "webhook not applied; will retry", "webhook_id", id, "event_id", c.ev.id, "type", c.ev.typ,
		"attempts", c.row.Attempts+1, "error", applyErr.Error())
	if err := q.WebhookReceiptRecordFailure(ctx, dbsqlc.WebhookReceiptRecordFailureParams{LastError: truncate(applyErr.Error(), maxErrorLen), DeliveryID: id}); err != nil {
		return "", fmt.Errorf("record webhook receipt %s failure: %w", id, err)
	}
	return ResultFailed, nil
}

// raiseMismatch raises the attention item of delivery id, a receipt about
// other money (mismatch), in tx.
func raiseMismatch(ctx context.Context, tx pgx.Tx, id string, mismatch error, now time.Time) (attention.Item, error) {
	var me *payments.MismatchError
	if !errors.As(mismatch, &me) {
		return attention.Item{}, fmt.Errorf("webhook receipt %s: a mismatch names no payment or refund: %w", id, mismatch)
	}
	item, _, err := attention.Raise(ctx, tx, attention.Item{
		Reason:     attention.ReasonMismatch,
		Detail:     "webhook " + id + ": " + mismatch.Error(),
		TenantID:   me.TenantID,
		DeliveryID: id,
		Resource:   &attention.Resource{Type: me.ResourceType, ID: me.ResourceID},
		RaisedAt:   now,
	})
	if err != nil {
		return attention.Item{}, fmt.Errorf("webhook receipt %s: %w", id, err)
	}
	return item, nil
}

// markProcessed finishes a receipt that is not applied, with a note that
// says why.
func markProcessed(ctx context.Context, q *dbsqlc.Queries, id string, now time.Time, note string) error {
	if err := q.WebhookReceiptMarkProcessed(ctx, dbsqlc.WebhookReceiptMarkProcessedParams{ProcessedAt: now, Note: &note, DeliveryID: id}); err != nil {
		return fmt.Errorf("mark webhook receipt %s processed: %w", id, err)
	}
	return nil
}

// apply hands the event to the payments service, in tx, and reports whether
// it changed a payment or refund.
func (w *Worker) apply(ctx context.Context, tx pgx.Tx, ev event) (bool, error) {
	switch ev.typ {
	case EventChargeSucceeded, EventChargeFailed:
		return w.pay.ApplyChargeEvent(ctx, tx, ev.charge)
	case EventChargeRefunded:
		return w.pay.ApplyRefundEvent(ctx, tx, ev.refund)
	}
	return false, fmt.Errorf("event type %q has no application", ev.typ)
}

// Run processes receipts until ctx is cancelled, then returns nil. A round
// starts at once, whenever Notify is called, and every interval otherwise
// (the backstop for receipts stored by other processes and for retries). A
// round drains full batches before it waits again.
func (w *Worker) Run(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		return fmt.Errorf("webhook worker: interval %v is not positive", interval)
	}
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		w.round(ctx)
		timer.Reset(interval)
		select {
		case <-ctx.Done():
			return nil
		case <-w.wake:
		case <-timer.C:
		}
	}
}

// round calls ProcessOnce while it finishes full batches.
func (w *Worker) round(ctx context.Context) {
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, w.roundTimeout)
		n, err := w.ProcessOnce(rctx, BatchSize)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				w.logger.ErrorContext(ctx, "webhook worker round", "error", err.Error())
			}
			return
		}
		if n < BatchSize {
			return
		}
	}
}
