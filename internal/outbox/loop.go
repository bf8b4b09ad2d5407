package outbox

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Run dispatches until ctx is cancelled, then returns nil. It runs as many
// loops as WithConcurrency says. A loop starts a round at once, when a service of this
// process signals a commit (WithSignal) or another process notifies
// (LISTEN oncepay_outbox on a connection of its own; one wake-up wakes one
// idle loop), when another loop claimed a full batch, and every
// poll interval (WithPollInterval) otherwise. A round drains full
// batches before it waits again. Losing the listening connection
// is logged and repaired in the background; polling carries on meanwhile.
func (d *Dispatcher) Run(ctx context.Context) error {
	listenDone := make(chan struct{})
	go func() {
		defer close(listenDone)
		d.listen(ctx)
	}()
	defer func() { <-listenDone }()

	var wg sync.WaitGroup
	for range d.cfg.concurrency {
		wg.Go(func() { d.loop(ctx) })
	}
	wg.Wait()
	return nil
}

// Notify wakes Run for a round that looks for every tenant's due rows. It
// never blocks; wake-ups that arrive while one is pending merge into it.
// Run calls it on every notification; callers in the same process may call
// it too.
func (d *Dispatcher) Notify() { d.sig.CommittedAny() }

// loop runs rounds until ctx is cancelled: at once, when woken (after the
// linger), and every poll interval.
func (d *Dispatcher) loop(ctx context.Context) {
	timer := time.NewTimer(d.cfg.pollInterval)
	defer timer.Stop()
	woken := false // the first round looks for every tenant's rows
	for {
		d.round(ctx, woken)
		timer.Reset(d.cfg.pollInterval)
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case <-d.sig.c:
				if d.linger(ctx) {
					woken = true
					break wait
				}
			case <-timer.C:
				woken = false
				break wait
			}
		}
	}
}

// linger waits out WithLinger after a wake-up and reports whether this loop
// should run a round now. It does not when another loop is lingering: that
// loop claims after the wake-up was sent, so after the commit it announced,
// and takes its rows.
func (d *Dispatcher) linger(ctx context.Context) bool {
	if d.cfg.linger == 0 {
		return true
	}
	if !d.lingering.CompareAndSwap(false, true) {
		return false
	}
	defer d.lingering.Store(false) // before the round's claim: a later wake-up is another loop's
	t := time.NewTimer(d.cfg.linger)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return true
}

// round claims one batch of each tenant with due rows, then drains: a
// tenant whose batch was full has more rows waiting, and the round claims
// its next batch at once, until the tenant's batch is not full.
//
// A round that a Signal woke claims the tenants the commits named and does
// not look for others (the poll and the notifications do): OutboxDueTenants
// reads every due row's tenant (a DISTINCT, which PostgreSQL answers by
// reading all of them, on Citus from every shard), and asked in every
// commit's round it was one of the round's three statements. Woken with no
// tenant left to claim (another round took them after their commits), it
// does nothing; a round that fails puts the tenants it took back for the
// next one. The drain does not look for tenants again either: a backlog of
// n rows drained by batches of b would cost n*n/2b row reads instead of n;
// the other tenants are found by the next round.
func (d *Dispatcher) round(ctx context.Context, woken bool) {
	var (
		full []uuid.UUID
		err  error
	)
	tenants, all := d.sig.take(!woken, maxTenantsPerRound)
	switch {
	case all:
		_, full, err = d.dispatchDue(ctx)
	case len(tenants) > 0:
		if _, full, err = d.dispatchTenants(ctx, tenants); err != nil {
			// The tenants after the one that failed were not reached; the
			// ones before it are claimed again for nothing, which is cheap.
			d.sig.putBack(tenants)
		}
	}
	for err == nil && len(full) > 0 && ctx.Err() == nil {
		_, full, err = d.dispatchTenants(ctx, full)
	}
	if err != nil && ctx.Err() == nil {
		d.logger.ErrorContext(ctx, "outbox dispatch round", "error", err.Error())
	}
}
