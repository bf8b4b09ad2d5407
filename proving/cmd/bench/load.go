package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// op performs one request (one HTTP call or one SQL transaction).
type op func(ctx context.Context) error

// load says how long a scenario runs: for a duration, or for a number of
// requests shared by all clients. The warm-up always runs for a duration.
type load struct {
	warmup   time.Duration
	duration time.Duration
	requests int
}

// errorLog counts failures and keeps the first few distinct messages for
// the report.
type errorLog struct {
	mu      sync.Mutex
	count   int
	samples []string
}

// add records a failure of scenario.
func (l *errorLog) add(scenario string, err error) {
	msg := fmt.Sprintf("%s: %v", scenario, err)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.count++
	if len(l.samples) < 5 && !slices.Contains(l.samples, msg) {
		l.samples = append(l.samples, msg)
	}
}

// measure runs do from clients concurrent goroutines: first a warm-up whose
// latencies are thrown away, then the measured phase. Failed requests are
// counted (in both phases) and reported to errs; their latencies are not
// recorded. probe measures the CPU time the measured phase used.
func measure(ctx context.Context, scenario string, clients int, l load, do op, errs *errorLog, probe cpuProbe) result {
	res := result{scenario: scenario, clients: clients}
	if l.warmup > 0 {
		w := runPhase(ctx, scenario, clients, time.Now().Add(l.warmup), nil, do, errs)
		res.errors += w.errors
	}
	before := probe.sample()
	var remaining *atomic.Int64
	var deadline time.Time
	if l.requests > 0 {
		remaining = new(atomic.Int64)
		remaining.Store(int64(l.requests))
	} else {
		deadline = time.Now().Add(l.duration)
	}
	m := runPhase(ctx, scenario, clients, deadline, remaining, do, errs)
	res.cpu = probe.sample().sub(before)
	res.requests = m.requests
	res.errors += m.errors
	res.elapsed = m.elapsed
	res.latencies = m.latencies
	return res
}

// runPhase runs do from clients goroutines until deadline passes (when
// remaining is nil) or until remaining requests have been started, or until
// ctx ends, or until do reports errPrepared, which ends its goroutine.
// elapsed runs from the start of the phase to the end of its last request.
func runPhase(ctx context.Context, scenario string, clients int, deadline time.Time, remaining *atomic.Int64, do op, errs *errorLog) result {
	type worker struct {
		latencies []time.Duration
		errors    int
	}
	workers := make([]worker, clients)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range workers {
		w := &workers[i]
		w.latencies = make([]time.Duration, 0, 4096)
		wg.Go(func() {
			for ctx.Err() == nil {
				if remaining != nil {
					if remaining.Add(-1) < 0 {
						return
					}
				} else if !time.Now().Before(deadline) {
					return
				}
				t0 := time.Now()
				err := do(ctx)
				d := time.Since(t0)
				if errors.Is(err, errPrepared) {
					return // the phase's work is used up (pay-only)
				}
				if err != nil {
					if ctx.Err() == nil {
						w.errors++
						errs.add(scenario, err)
					}
					continue
				}
				w.latencies = append(w.latencies, d)
			}
		})
	}
	wg.Wait()
	res := result{scenario: scenario, clients: clients, elapsed: time.Since(start)}
	for _, w := range workers {
		res.errors += w.errors
		res.latencies = append(res.latencies, w.latencies...)
	}
	res.requests = len(res.latencies)
	slices.Sort(res.latencies)
	return res
}
