package chaos

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// reconnectBound is how long an API may take, after the database is back,
// to answer /readyz 200 and to LISTEN again: far more than the outbox
// listener's longest backoff (5 s) and a pool's reconnect.
const reconnectBound = 30 * time.Second

// probeEvery paces the probes of the APIs while the database is away.
const probeEvery = 2 * time.Second

// record collects what the schedule's steps report (the outages, the
// network faults of a run), safe for the lanes that run them.
type record[T any] struct {
	mu  sync.Mutex
	all []T
}

func (l *record[T]) add(v T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, v)
}

func (l *record[T]) list() []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]T(nil), l.all...)
}

// databaseDown takes the run's PostgreSQL away as the step says (a kill
// or a fast shutdown), keeps it away for st.Down while probing both APIs,
// starts it again (crash recovery after a kill) and waits for the APIs to
// come back. What it saw is an Outage of the history; Check judges it.
func (e *executor) databaseDown(ctx context.Context, st Step) error {
	pg := e.stack.pg
	if pg == nil {
		return fmt.Errorf("%s: the run does not own its PostgreSQL", st.Kind)
	}
	pg.held.Store(true)
	defer pg.held.Store(false)
	o := Outage{Kind: PostgresOutage}
	var err error
	if st.Kind == StepKillPostgres {
		o.Kind = PostgresKilled
		err = pg.Kill(st.N == 1)
	} else {
		err = pg.Stop()
	}
	if err != nil {
		return fmt.Errorf("take the database away: %w", err)
	}
	o.Began = time.Now()
	e.faults.add(o.Kind, 1)
	e.logf("chaos: %s for %v", o.Kind, st.Down.Round(time.Millisecond))
	until := o.Began.Add(st.Down)
	for {
		o.Probes = append(o.Probes, e.probe(ctx)...)
		left := time.Until(until)
		if left <= 0 || ctx.Err() != nil {
			break
		}
		if err := pause(ctx, min(probeEvery, left)); err != nil {
			break
		}
	}
	err = pg.Start(ctx)
	o.Ended = time.Now()
	// The run's own connections died with the server: start afresh
	// rather than fail the next query on each of them.
	e.db.Reset()
	if err != nil {
		e.outages.add(o)
		return fmt.Errorf("start the database again: %w", err)
	}
	o.Back = e.reconnected(ctx, o.Ended)
	e.outages.add(o)
	return nil
}

// probe asks each API for /healthz and /readyz, directly.
func (e *executor) probe(ctx context.Context) []Probe {
	var out []Probe
	for i := range e.stack.apis {
		p := Probe{API: i, At: time.Now(), Alive: e.stack.api(i).alive()}
		var err error
		if p.Healthz, err = e.status(ctx, i, "/healthz"); err != nil {
			p.Err = err.Error()
		}
		if p.Readyz, err = e.status(ctx, i, "/readyz"); err != nil {
			p.Err = err.Error()
		}
		out = append(out, p)
	}
	return out
}

// status is the HTTP status of GET path on API i (0 and the error when it
// did not answer within 5 s).
func (e *executor) status(ctx context.Context, i int, path string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.stack.apis[i].addr+path, nil)
	if err != nil {
		return 0, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_ = res.Body.Close()
	return res.StatusCode, nil
}

// reconnected polls until every API answers /readyz 200 and (with the
// dispatcher) holds a LISTEN connection again, at most reconnectBound
// after since.
func (e *executor) reconnected(ctx context.Context, since time.Time) []Reconnect {
	back := make([]Reconnect, len(e.stack.apis))
	for i := range back {
		back[i] = Reconnect{API: i, Ready: -1, Listening: -1}
		if !e.stack.outbox || runtime.GOOS != "linux" { // the listener is found through /proc
			back[i].Listening = 0
		}
	}
	for time.Since(since) < reconnectBound && ctx.Err() == nil {
		done := true
		var listening map[int]bool
		for i := range back {
			if back[i].Ready < 0 {
				if s, _ := e.status(ctx, i, "/readyz"); s == http.StatusOK {
					back[i].Ready = time.Since(since)
				}
			}
			if back[i].Listening < 0 {
				if listening == nil {
					listening = e.listeners(ctx)
				}
				if listening[i] {
					back[i].Listening = time.Since(since)
				}
			}
			done = done && back[i].Ready >= 0 && back[i].Listening >= 0
		}
		if done {
			break
		}
		if pause(ctx, 100*time.Millisecond) != nil {
			break
		}
	}
	return back
}

// listeners returns the APIs that hold a connection whose last statement
// was the outbox dispatcher's LISTEN (its application_name names the
// process: apiName).
func (e *executor) listeners(ctx context.Context) map[int]bool {
	out := map[int]bool{}
	rows, err := e.db.Query(ctx, `SELECT application_name FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN %'`)
	if err != nil {
		return out
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return out
	}
	for _, name := range names {
		for i := range e.stack.apis {
			if (name == apiName(i) || name == apiName(i)+"-outbox") && e.stack.api(i).alive() {
				out[i] = true
			}
		}
	}
	return out
}
