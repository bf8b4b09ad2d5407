package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// trapWindow is how long a trap is tried before its step gives up: a
// process is caught in the act only when one is at that point meanwhile,
// which on a busy machine may not happen in time.
const trapWindow = 15 * time.Second

// trapTime is how long this executor tries a trap.
func (e *executor) trapTime() time.Duration {
	if e.trapWithin > 0 {
		return e.trapWithin
	}
	return trapWindow
}

// A trap catches an API process in the middle of a write and kills it
// there. It holds row locks (taken with lock, SKIP LOCKED, in a transaction
// of the observer) on rows the process is about to update; the process's
// UPDATE then waits on those locks, visible in pg_stat_activity with the
// application_name of its connection, which names the API process
// (apiName). That process is SIGKILLed while it waits, and only then are
// the locks released: its write never commits.
type trap struct {
	// lock selects and locks the rows of the tenant $1, e.g. "SELECT id
	// FROM payments WHERE tenant_id = $1 AND status = 'pending' FOR UPDATE
	// SKIP LOCKED"; a try runs it for every tenant.
	lock string
	// waiting matches (LIKE) the query text of the blocked UPDATE; sqlc puts
	// the query's name in it ("-- name: PaymentSucceed :one").
	waiting []string
}

// The traps of the schedule.
var (
	// markTrap: events a dispatcher has claimed (leased) and so is
	// publishing, not yet marked; its mark, UPDATE ... SET published_at,
	// waits, so that a dispatcher dies between publish and mark.
	markTrap = trap{
		lock: `SELECT id FROM outbox_events
			WHERE tenant_id = $1 AND published_at IS NULL AND locked_by IS NOT NULL AND locked_until > now()
			FOR UPDATE SKIP LOCKED`,
		waiting: []string{"%SET published_at%"},
	}
	// recordTrap: pending payments and refunds; the provider has answered
	// and phase 2 (or the webhook worker) records the outcome, so that a
	// process dies after the provider's call and before its record:
	// statement by statement, or in phase 2's first batch (...Queued).
	recordTrap = trap{
		lock:    `SELECT id FROM payments WHERE tenant_id = $1 AND status = 'pending' FOR UPDATE SKIP LOCKED`,
		waiting: []string{"%name: PaymentSucceed %", "%name: PaymentFail %", "%name: PaymentSucceedQueued %", "%name: PaymentFailQueued %"},
	}
	refundRecordTrap = trap{
		lock:    `SELECT id FROM refunds WHERE tenant_id = $1 AND status = 'pending' FOR UPDATE SKIP LOCKED`,
		waiting: []string{"%name: RefundSucceed %", "%name: RefundFail %", "%name: RefundSucceedQueued %", "%name: RefundFailQueued %"},
	}
)

// spring tries traps for at most trapWithin (each try holds the locks for
// at most 1.5 seconds, below the APIs' 2-second lock timeout) and returns
// the killed API's index, or -1 with whether any locks were held at all.
// A try that fails is tried again: the run's other faults break the
// trap's own connections too (a terminated worker backend surfaces, on
// the coordinator, as the next statement's 57P01). The last failure is
// returned only when no try caught a victim or held a lock.
func (e *executor) spring(ctx context.Context, traps ...trap) (victim int, held bool, err error) {
	deadline := time.Now().Add(e.trapTime())
	var failed error
	for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		victim, n, err := e.catch(ctx, traps[i%len(traps)])
		if victim >= 0 {
			return victim, true, nil
		}
		if err != nil {
			failed = err
		}
		held = held || n > 0
		if err := pause(ctx, 5*time.Millisecond); err != nil {
			return -1, held, err
		}
	}
	if ctx.Err() != nil {
		return -1, held, ctx.Err()
	}
	if failed != nil && !held {
		return -1, false, fmt.Errorf("no try caught a trap; the last failed: %w", failed)
	}
	return -1, held, nil
}

// catch is one try of a trap. It returns the killed API's index (or -1)
// and how many rows it held locked.
func (e *executor) catch(ctx context.Context, t trap) (victim, held int, err error) {
	victim = -1
	tx, err := e.db.Begin(ctx)
	if err != nil {
		return victim, 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	for _, tenant := range e.tenants {
		rows, err := tx.Query(ctx, t.lock, tenant)
		if err != nil {
			return victim, 0, err
		}
		locked, err := pgx.CollectRows(rows, pgx.RowTo[any])
		if err != nil {
			return victim, 0, err
		}
		held += len(locked)
	}
	if held == 0 {
		return victim, 0, nil
	}
	until := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(until) {
		names, err := e.waiters(ctx, t.waiting)
		if err != nil {
			return victim, held, err
		}
		for _, name := range names {
			for i := range e.stack.apis {
				if name != apiName(i) && name != apiName(i)+"-outbox" {
					continue
				}
				if e.stack.api(i).alive() {
					e.stack.killAPI(i) // returns once the process is gone
					return i, held, nil
				}
			}
		}
		if err := pause(ctx, 10*time.Millisecond); err != nil {
			return victim, held, err
		}
	}
	return victim, held, nil
}

// waiters returns the application names (apiName) of the APIs'
// connections whose query matches one of the patterns and waits on a lock:
// each names the process on the other end, also through a fault proxy.
//
// On Citus the wait is on a worker: the API's statement, on the
// coordinator, waits for the worker's answer (ClientRead), and the
// coordinator's connection to the worker waits on the lock there. That
// connection's application_name, "citus_internal gpid=N", names the
// coordinator's backend: N is its node id times 10^10 plus its pid.
func (e *executor) waiters(ctx context.Context, patterns []string) ([]string, error) {
	if e.workers == nil {
		rows, err := e.db.Query(ctx, `SELECT application_name FROM pg_stat_activity
			WHERE application_name LIKE 'oncepay-api-%' AND datname = current_database()
			  AND wait_event_type = 'Lock' AND query LIKE ANY ($1)`, patterns)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, pgx.RowTo[string])
	}
	var pids []int64
	for _, w := range e.workers {
		rows, err := w.Query(ctx, `SELECT substring(application_name FROM '^citus_internal gpid=([0-9]+)$')::bigint % 10000000000
			FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND application_name ~ '^citus_internal gpid=[0-9]+$'`)
		if err != nil {
			return nil, err
		}
		some, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return nil, err
		}
		pids = append(pids, some...)
	}
	if len(pids) == 0 {
		return nil, nil
	}
	rows, err := e.db.Query(ctx, `SELECT application_name FROM pg_stat_activity
		WHERE pid = ANY ($1) AND application_name LIKE 'oncepay-api-%' AND datname = current_database()
		  AND query LIKE ANY ($2)`, pids, patterns)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// killDispatcher kills an API process exactly between its dispatcher's
// publish and its mark (markTrap). When no mark could be caught in the act,
// a mark that waited out its lock timeout counts as failed: the same
// at-least-once path, without the crash.
func (e *executor) killDispatcher(ctx context.Context, down time.Duration) error {
	victim, held, err := e.spring(ctx, markTrap)
	switch {
	case err != nil:
		return err
	case victim >= 0:
		e.faults.add(DispatcherKilled, 1)
		e.logf("chaos: killed api-%d between its dispatcher's publish and mark", victim)
		return e.stack.restartAPI(ctx, victim, down)
	case held:
		e.faults.add(MarkBlocked, 1)
		return nil
	}
	e.unplaced(DispatcherKilled, fmt.Sprintf("no dispatcher batch caught between publish and mark within %v", e.trapTime()))
	return nil
}

// killRecorder kills an API process after the provider charged or
// refunded and before it recorded the outcome (recordTrap,
// refundRecordTrap): the crash after the external call and before its
// record, every time.
func (e *executor) killRecorder(ctx context.Context, down time.Duration) error {
	victim, _, err := e.spring(ctx, recordTrap, refundRecordTrap)
	switch {
	case err != nil:
		return err
	case victim >= 0:
		e.faults.add(RecorderKilled, 1)
		e.logf("chaos: killed api-%d after the provider answered, before it recorded the outcome", victim)
		return e.stack.restartAPI(ctx, victim, down)
	}
	e.unplaced(RecorderKilled, fmt.Sprintf("no API caught recording a provider outcome within %v", e.trapTime()))
	return nil
}
