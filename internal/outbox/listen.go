package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// NotifyChannel is the PostgreSQL channel the dispatchers listen on, for
// wake-ups from other processes (OutboxNotify: an operator's retry). The
// services of the same process wake it with a Signal instead.
const NotifyChannel = "oncepay_outbox"

// listenCheck is how long the listening connection may stay quiet before
// the dispatcher checks that the database is still there: a connection
// whose peer vanished without closing it would otherwise wait for
// notifications forever, and only polling would remain.
const listenCheck = 30 * time.Second

// listen holds a LISTEN connection and turns notifications into Notify
// calls, reconnecting with backoff until ctx is cancelled. A connection
// quiet for listenCheck is pinged (bounded by WithDatabaseTimeout), so
// one whose peer vanished is replaced instead of waited on forever.
func (d *Dispatcher) listen(ctx context.Context) {
	wait := 100 * time.Millisecond
	for {
		err := d.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		d.logger.WarnContext(ctx, "outbox listener lost; polling until it is back", "error", err.Error(), "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
}

func (d *Dispatcher) listenOnce(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, d.pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// Rows committed while nobody listened were announced to nobody.
	d.Notify()
	for {
		wait, cancel := context.WithTimeout(ctx, listenCheck)
		_, err := conn.WaitForNotification(wait)
		cancel()
		switch {
		case err == nil:
			d.Notify()
			continue
		case ctx.Err() != nil:
			return ctx.Err()
		case !errors.Is(err, context.DeadlineExceeded):
			return fmt.Errorf("wait for notification: %w", err)
		}
		// Quiet for a while: is anybody still there? A timed-out wait
		// leaves the connection usable.
		ping, cancel := context.WithTimeout(ctx, d.cfg.dbTimeout)
		err = conn.Ping(ping)
		cancel()
		if err != nil {
			return fmt.Errorf("listening connection does not answer: %w", err)
		}
	}
}
