// The latency budget (--budget): where one create's time goes at one
// client, from traces, next to the same for the sql floor.
//
// The API traces itself with OpenTelemetry when it is given an OTLP
// endpoint (docs/CONFIGURATION.md): a server span per request, and inside
// it a span per query and per batch from otelpgx. make bench
// BENCH_BUDGET=1 starts the API with its endpoint pointing at the bench's
// receiver (budget_trace.go), and the bench runs its own floor through the same
// otelpgx tracer under a span per create. Both are cut into the same parts:
// the time before each round trip, each round trip, and the time after the
// last one. A batch's statements are answered together (one Sync at its
// end), so the commit's WAL flush is not a part of its own: PostgreSQL's
// pg_stat_wal counts the flushes and their time, the whole server's, in
// each scenario's runs. What else the API did meanwhile comes from its
// other spans (the dispatcher's publishes, which carry the create's trace)
// and from its Go runtime's metrics (garbage collections).

package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/orders"
)

// window is a measured phase's span of wall-clock time.
type window struct{ from, to time.Time }

func inWindows(ws []window, t time.Time) bool {
	return slices.ContainsFunc(ws, func(w window) bool { return !t.Before(w.from) && t.Before(w.to) })
}

// segment is one part of a request: its name, and its duration in each
// request of the budget.
type segment struct {
	name string
	d    []time.Duration
}

// budget is the parts of the requests whose spans had the most common
// shape (the same round trips in the same order).
type budget struct {
	shape    string
	requests int // with that shape
	others   int // traced requests of another shape, left out
	parts    []segment
	total    []time.Duration // the root span
	// commits are the end of each request's last round trip, by trace:
	// what a publish of the request's event is measured from.
	commits map[[16]byte]time.Time
}

// A root span's children, in order, are its parts: otelpgx's
// "pool.acquire" (taking a connection from the pool), and a span per
// query (named by its SQL operation, "SELECT") or per batch ("batch
// start"), each a round trip. A batch's own children, a zero-length mark
// per statement, are no parts: its statements are answered together, at
// its end.
func partName(s tspan, trip int) string {
	switch s.name {
	case "pool.acquire", "connect":
		return s.name
	case "batch start":
		return fmt.Sprintf("round trip %d (batch of %d)", trip, s.batchSize)
	}
	return fmt.Sprintf("round trip %d (%s)", trip, s.name)
}

// breakdown cuts each root span that isRoot accepts into its parts.
func breakdown(spans []tspan, isRoot func(tspan) bool) budget {
	children := map[[8]byte][]tspan{}
	var roots []tspan
	for _, s := range spans {
		if s.hasParent {
			children[s.parent] = append(children[s.parent], s)
		}
		if isRoot(s) {
			roots = append(roots, s)
		}
	}
	type cut struct {
		shape  string
		names  []string
		d      []time.Duration
		root   tspan
		commit time.Time
	}
	var cuts []cut
	shapes := map[string]int{}
	for _, root := range roots {
		var kids []tspan
		for _, c := range children[root.id] {
			if !c.start.After(root.end) {
				kids = append(kids, c)
			}
		}
		slices.SortFunc(kids, func(a, b tspan) int { return a.start.Compare(b.start) })
		c := cut{root: root}
		at := root.start
		var shape []string
		trip := 0
		for _, k := range kids {
			if k.name != "pool.acquire" && k.name != "connect" {
				trip++
			}
			what := partName(k, trip)
			shape = append(shape, what)
			c.names = append(c.names, "before "+what)
			c.d = append(c.d, k.start.Sub(at))
			c.names = append(c.names, what)
			c.d = append(c.d, k.dur())
			at = k.end
		}
		c.names = append(c.names, "after the last part")
		c.d = append(c.d, root.end.Sub(at))
		c.commit = at
		c.shape = strings.Join(shape, ", ")
		shapes[c.shape]++
		cuts = append(cuts, c)
	}
	var b budget
	for sh, n := range shapes {
		if n > b.requests || (n == b.requests && sh < b.shape) {
			b.shape, b.requests = sh, n
		}
	}
	b.others = len(cuts) - b.requests
	b.commits = map[[16]byte]time.Time{}
	for _, c := range cuts {
		if c.shape != b.shape {
			continue
		}
		if b.parts == nil {
			for _, n := range c.names {
				b.parts = append(b.parts, segment{name: n})
			}
		}
		for i, d := range c.d {
			b.parts[i].d = append(b.parts[i].d, d)
		}
		b.total = append(b.total, c.root.dur())
		b.commits[c.root.trace] = c.commit
	}
	return b
}

// meanwhile is what the API did besides the creates while they ran, from
// the spans of the dispatcher's publishes.
type meanwhile struct {
	publishes int
	// overlapped counts the creates a publish overlapped, and overlap is
	// the time it did, per create.
	overlapped int
	overlap    []time.Duration
	// wake is from a create's commit to the start of its event's publish;
	// publish is the publish's own span (the broker's synced store and its
	// answer).
	wake, publish []time.Duration
}

// overlapping measures the publishes against the creates of b: roots
// accepted by isRoot whose trace is one of b's.
func overlapping(spans []tspan, b budget, isRoot func(tspan) bool) meanwhile {
	var m meanwhile
	var pubs []tspan
	var roots []tspan
	for _, s := range spans {
		switch {
		case strings.HasPrefix(s.name, "publish "):
			pubs = append(pubs, s)
		case isRoot(s):
			if _, ok := b.commits[s.trace]; ok {
				roots = append(roots, s)
			}
		}
	}
	slices.SortFunc(pubs, func(a, b tspan) int { return a.start.Compare(b.start) })
	for _, p := range pubs {
		if c, ok := b.commits[p.trace]; ok {
			m.publishes++
			m.wake = append(m.wake, p.start.Sub(c))
			m.publish = append(m.publish, p.dur())
		}
	}
	for _, r := range roots {
		var o time.Duration
		i, _ := slices.BinarySearchFunc(pubs, r.start, func(p tspan, t time.Time) int { return p.start.Compare(t) })
		// A publish that began before the create may still overlap it: look
		// back over the few that could.
		for j := max(0, i-8); j < len(pubs) && pubs[j].start.Before(r.end); j++ {
			lo, hi := maxTime(pubs[j].start, r.start), minTime(pubs[j].end, r.end)
			if hi.After(lo) {
				o += hi.Sub(lo)
			}
		}
		m.overlap = append(m.overlap, o)
		if o > 0 {
			m.overlapped++
		}
	}
	return m
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// mean is the arithmetic mean of ds: the means of the parts add up to the
// mean of the whole.
func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

func p50(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return percentile(s, 50)
}

func us(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) + " µs" }

// budgetRun collects what the budget is made of during the run.
type budgetRun struct {
	recv       *receiver
	floor      *floorTracer
	apiURL     string
	warmup     time.Duration
	createWins []window
	floorWins  []window
	// gc is the API's garbage collections during the create runs (warm-ups
	// included), and gcTime the wall-clock time of those runs.
	gc     sample // its gcCycles and gcPauses: their change over the runs
	gcTime time.Duration
	gcErr  error
	began  time.Time
	gcAt   sample
	// pool reads pg_stat_wal; wal is its change during each scenario's
	// runs (warm-ups included), run their wall-clock time.
	pool   *pgxpool.Pool
	walAt  walStats
	walErr error
	wal    map[string]walStats
	run    map[string]time.Duration
}

// walStats are the server's WAL writes and flushes so far (pg_stat_wal,
// every process's). Their times are counted only with track_wal_io_timing
// on, which walTiming sets for the budget's run.
type walStats struct {
	writes, syncs       int64
	writeTime, syncTime float64 // milliseconds
}

func (a walStats) sub(b walStats) walStats {
	return walStats{a.writes - b.writes, a.syncs - b.syncs, a.writeTime - b.writeTime, a.syncTime - b.syncTime}
}

func (a walStats) add(b walStats) walStats {
	return walStats{a.writes + b.writes, a.syncs + b.syncs, a.writeTime + b.writeTime, a.syncTime + b.syncTime}
}

func readWAL(ctx context.Context, pool *pgxpool.Pool) (walStats, error) {
	var w walStats
	err := pool.QueryRow(ctx, "SELECT wal_write, wal_sync, wal_write_time, wal_sync_time FROM pg_stat_wal").Scan(&w.writes, &w.syncs, &w.writeTime, &w.syncTime)
	if err != nil {
		return w, fmt.Errorf("pg_stat_wal: %w", err)
	}
	return w, nil
}

// walTiming turns track_wal_io_timing on (or back to the server's
// setting) for the whole server, which needs a superuser: make bench's
// private cluster.
func walTiming(ctx context.Context, pool *pgxpool.Pool, on bool) error {
	stmt := "ALTER SYSTEM RESET track_wal_io_timing"
	if on {
		stmt = "ALTER SYSTEM SET track_wal_io_timing = on"
	}
	if _, err := pool.Exec(ctx, stmt); err != nil {
		return fmt.Errorf("track_wal_io_timing: %w", err)
	}
	if _, err := pool.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("track_wal_io_timing: %w", err)
	}
	return nil
}

// begin is called before each measurement of scenario sc at 1 client.
func (br *budgetRun) begin(ctx context.Context, sc string) {
	br.began = time.Now()
	if br.pool != nil && br.walErr == nil {
		br.walAt, br.walErr = readWAL(ctx, br.pool)
	}
	if sc == scenarioCreate && br.gcErr == nil {
		br.gcAt, br.gcErr = scrapeAPI(ctx, http.DefaultClient, br.apiURL)
	}
}

// end is called after it.
func (br *budgetRun) end(ctx context.Context, sc string) {
	w := window{br.began.Add(br.warmup), time.Now()}
	if br.pool != nil && br.walErr == nil {
		var now walStats
		now, br.walErr = readWAL(ctx, br.pool)
		if br.wal == nil {
			br.wal, br.run = map[string]walStats{}, map[string]time.Duration{}
		}
		br.wal[sc] = br.wal[sc].add(now.sub(br.walAt))
		br.run[sc] += w.to.Sub(br.began)
	}
	switch sc {
	case scenarioSQL:
		br.floorWins = append(br.floorWins, w)
	case scenarioCreate:
		br.createWins = append(br.createWins, w)
		if br.gcErr == nil {
			var g sample
			g, br.gcErr = scrapeAPI(ctx, http.DefaultClient, br.apiURL)
			br.gc.gcCycles += g.gcCycles - br.gcAt.gcCycles
			br.gc.gcPauses += g.gcPauses - br.gcAt.gcPauses
			br.gcTime += time.Since(br.began)
		}
	}
}

func isCreateRoot(s tspan) bool {
	return s.fromReceiver && !s.hasParent && s.operation == string(orders.OpCreate) && s.outcome == string(idempotency.OutcomeExecuted)
}

func isFloorRoot(s tspan) bool { return !s.fromReceiver && s.name == "floor create" }

// print writes the budget: the create's parts next to the floor's, the
// client's view of both and of the bare exchange, and what the API did
// meanwhile.
func (br *budgetRun) print(w io.Writer, results []result) {
	lat := func(sc string) []time.Duration {
		r, _ := findResult(results, sc, 1)
		return r.latencies
	}
	rate := func(sc string) float64 {
		r, _ := findResult(results, sc, 1)
		return r.throughput()
	}
	var api, floor []tspan
	for _, s := range br.recv.sink.all() {
		if !isCreateRoot(s) || inWindows(br.createWins, s.start) {
			api = append(api, s)
		}
	}
	for _, s := range br.floor.sink.all() {
		if !isFloorRoot(s) || inWindows(br.floorWins, s.start) {
			floor = append(floor, s)
		}
	}
	cb := breakdown(api, isCreateRoot)
	fb := breakdown(floor, isFloorRoot)
	fmt.Fprintf(w, "\nlatency budget at 1 client: %d traced creates (%d of another shape left out), %d traced floor creates (sql; %d left out)\n",
		cb.requests, cb.others, fb.requests, fb.others)
	fmt.Fprintf(w, "  create: %s\n  sql:    %s\n", cmp.Or(cb.shape, "-"), cmp.Or(fb.shape, "-"))
	fmt.Fprintln(w, "\n| part | create mean | create p50 | sql mean | sql p50 |\n|---|--:|--:|--:|--:|")
	row := func(name string, c, f []time.Duration) {
		cell := func(ds []time.Duration) (string, string) {
			if ds == nil {
				return "", ""
			}
			return us(mean(ds)), us(p50(ds))
		}
		cm, cp := cell(c)
		fm, fp := cell(f)
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", name, cm, cp, fm, fp)
	}
	cl, fl, hl := lat(scenarioCreate), lat(scenarioSQL), lat(scenarioHTTP)
	row("the client's whole request (the bench's clock)", cl, fl)
	if cl != nil && cb.total != nil {
		fmt.Fprintf(w, "| outside the root span: the HTTP exchange (mean of the client's minus the span's; the bare server's whole request: %s mean, %s p50) | %s | | | |\n",
			us(mean(hl)), us(p50(hl)), us(mean(cl)-mean(cb.total)))
	}
	row("the root span (the API's server span; the floor's create)", cb.total, fb.total)
	same := len(cb.parts) == len(fb.parts)
	for i, p := range cb.parts {
		if same && fb.parts[i].name == p.name {
			row(p.name, p.d, fb.parts[i].d)
		} else {
			row(p.name, p.d, nil)
		}
	}
	if !same {
		for _, p := range fb.parts {
			row(p.name, nil, p.d)
		}
	}
	if br.walErr == nil && br.run[scenarioCreate] > 0 && br.run[scenarioSQL] > 0 {
		// Per request: the counts over the runs' time (warm-ups included)
		// at the measured rate.
		per := func(sc string, f func(walStats) float64) string {
			n := f(br.wal[sc]) / br.run[sc].Seconds() / max(rate(sc), 1e-9)
			return strconv.FormatFloat(n, 'f', 2, 64)
		}
		each := func(sc string, f func(walStats) (float64, int64)) string {
			t, n := f(br.wal[sc])
			return us(time.Duration(t / float64(max(1, n)) * float64(time.Millisecond)))
		}
		writes := func(x walStats) float64 { return float64(x.writes) }
		syncs := func(x walStats) float64 { return float64(x.syncs) }
		flushT := func(x walStats) (float64, int64) { return x.syncTime, x.syncs }
		writeT := func(x walStats) (float64, int64) { return x.writeTime, x.writes }
		fmt.Fprintf(w, "| PostgreSQL's WAL writes per request (pg_stat_wal: the whole server, the dispatcher's too) | %s | | %s | |\n", per(scenarioCreate, writes), per(scenarioSQL, writes))
		fmt.Fprintf(w, "| PostgreSQL's WAL flushes (fdatasync) per request | %s | | %s | |\n", per(scenarioCreate, syncs), per(scenarioSQL, syncs))
		fmt.Fprintf(w, "| time per WAL write | %s | | %s | |\n", each(scenarioCreate, writeT), each(scenarioSQL, writeT))
		fmt.Fprintf(w, "| time per WAL flush | %s | | %s | |\n", each(scenarioCreate, flushT), each(scenarioSQL, flushT))
	}
	if br.walErr != nil {
		fmt.Fprintf(w, "(no WAL figures: %v)\n", br.walErr)
	}
	cpu := func(sc string, of func(cpuSample) time.Duration) string {
		if r, ok := findResult(results, sc, 1); ok && r.requests > 0 && of(r.cpu) >= 0 {
			return us(of(r.cpu) / time.Duration(r.requests))
		}
		return ""
	}
	for _, c := range []struct {
		name string
		of   func(cpuSample) time.Duration
	}{
		{"CPU per request: the bench (the load generator)", func(s cpuSample) time.Duration { return s.bench }},
		{"CPU per request: the API (its dispatcher and embedded broker included)", func(s cpuSample) time.Duration { return s.api }},
		{"CPU per request: PostgreSQL (all its processes)", func(s cpuSample) time.Duration { return s.pg }},
	} {
		fmt.Fprintf(w, "| %s | %s | | %s | |\n", c.name, cpu(scenarioCreate, c.of), cpu(scenarioSQL, c.of))
	}
	m := overlapping(api, cb, isCreateRoot)
	fmt.Fprintf(w, "\nmeanwhile in the API (spans of the dispatcher's publishes, which carry their create's trace):\n")
	fmt.Fprintf(w, "  %d publishes of these creates' events: from the commit to the publish's start %s mean (%s p50), the publish (the broker's synced store and its ack) %s mean (%s p50)\n",
		m.publishes, us(mean(m.wake)), us(p50(m.wake)), us(mean(m.publish)), us(p50(m.publish)))
	if len(m.overlap) > 0 {
		fmt.Fprintf(w, "  a publish overlapped %d of %d creates (%.0f%%), %s per create on average\n",
			m.overlapped, len(m.overlap), 100*float64(m.overlapped)/float64(len(m.overlap)), us(mean(m.overlap)))
	}
	switch {
	case br.gcErr != nil:
		fmt.Fprintf(w, "  garbage collections: %v\n", br.gcErr)
	case br.gcTime > 0:
		fmt.Fprintf(w, "  garbage collections during the create runs (%s, warm-ups included; the API's /metrics): %.0f, one every %s, %s of stop-the-world pauses in all\n",
			br.gcTime.Round(time.Millisecond), br.gc.gcCycles, (time.Duration(float64(br.gcTime) / max(1, br.gc.gcCycles))).Round(time.Millisecond),
			us(time.Duration(br.gc.gcPauses*float64(time.Second))))
	}
}
