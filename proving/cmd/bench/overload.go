package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/oncepay/oncepay/client"
)

// The overload and soak runs are open loop: requests are started at a fixed
// rate whatever the answers, as real clients arrive, so a slow service
// cannot slow the offered load down (a closed loop of N clients never
// offers more than N at once and hides queueing). The rate is a multiple
// (overload) or a fraction (soak) of the create throughput measured first,
// closed loop, in the same run.

// openLoopConfig is one open-loop phase.
type openLoopConfig struct {
	name     string
	rate     float64 // requests per second offered
	duration time.Duration
	// window is the sampling period of the API's /metrics and of the
	// latency percentiles.
	window time.Duration
}

// attempt is one request of an open-loop phase.
type attempt struct {
	key        string
	status     int // 0: no answer (transport error, timeout)
	code       string
	retryAfter bool
	replayed   bool
	orderID    string
	latency    time.Duration
	startedAt  time.Duration // since the phase began
}

// sample is one reading of the API's /metrics.
type sample struct {
	at         time.Duration
	goroutines float64
	rssMiB     float64
	inFlight   float64
	shed       float64
	connsOpen  float64
	connsLimit float64
	reclaimed  float64
	// gcCycles and gcPauses are the Go runtime's garbage collections so
	// far and their stop-the-world pauses in seconds (the latency budget).
	gcCycles, gcPauses float64
}

// openLoopResult is what one phase measured.
type openLoopResult struct {
	cfg      openLoopConfig
	attempts []attempt
	samples  []sample
	elapsed  time.Duration
	cpu      cpuSample // used during the phase, when measured (zero: not)
}

// runOpenLoop offers cfg.rate requests per second for cfg.duration, each a
// POST /v1/orders under a fresh key with one attempt (the Go client's
// retries off), and samples the API's /metrics every cfg.window.
func runOpenLoop(ctx context.Context, api *apiClient, base string, cfg openLoopConfig) openLoopResult {
	res := openLoopResult{cfg: cfg}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()

	stopSampling := make(chan struct{})
	sampled := make(chan []sample, 1)
	go func() {
		var out []sample
		tick := time.NewTicker(cfg.window)
		defer tick.Stop()
		for {
			if s, err := scrapeAPI(ctx, api.http, base); err == nil {
				s.at = time.Since(start)
				out = append(out, s)
			}
			select {
			case <-stopSampling:
				sampled <- out
				return
			case <-ctx.Done():
				sampled <- out
				return
			case <-tick.C:
			}
		}
	}()

	// Start requests in small batches every 5ms: the same rate with far
	// fewer timer wake-ups than one timer per request. What is due follows
	// from the time elapsed, not from the ticks counted: a ticker drops the
	// ticks of a busy receiver, and a loaded client would offer less than
	// it says.
	const step = 5 * time.Millisecond
	tick := time.NewTicker(step)
	defer tick.Stop()
	launched := 0
	for ctx.Err() == nil {
		<-tick.C
		elapsed := min(time.Since(start), cfg.duration)
		due := int(cfg.rate*elapsed.Seconds()) - launched
		if elapsed >= cfg.duration && due <= 0 {
			break
		}
		for ; due > 0; due-- {
			launched++
			wg.Go(func() {
				a := api.attemptCreate(ctx, newKey())
				a.startedAt = time.Since(start) - a.latency
				mu.Lock()
				res.attempts = append(res.attempts, a)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	close(stopSampling)
	res.samples = <-sampled
	return res
}

// attemptCreate posts one order under key, once, and records the answer.
func (c *apiClient) attemptCreate(ctx context.Context, key string) attempt {
	t0 := time.Now()
	o, meta, err := c.api.CreateOrder(ctx, order, client.WithIdempotencyKey(key))
	a := attempt{key: key, latency: time.Since(t0), status: meta.Status, replayed: meta.Replayed}
	if o != nil {
		a.orderID = o.ID
	}
	var apiErr *client.Error
	if errors.As(err, &apiErr) {
		a.status, a.code, a.retryAfter = apiErr.Status, apiErr.Code, apiErr.RetryAfter > 0
	} else if err != nil {
		a.status = 0
		a.code = err.Error()
	}
	return a
}

// scrapeAPI reads the few series of /metrics the runs watch.
func scrapeAPI(ctx context.Context, hc *http.Client, base string) (sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/metrics", nil)
	if err != nil {
		return sample{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return sample{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return sample{}, fmt.Errorf("/metrics: status %d", resp.StatusCode)
	}
	var s sample
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		if strings.HasPrefix(name, "oncepay_http_requests_in_flight{") { // one series per pool
			s.inFlight += v
			continue
		}
		switch name {
		case "go_goroutines":
			s.goroutines = v
		case "process_resident_memory_bytes":
			s.rssMiB = v / (1 << 20)
		case "oncepay_http_shed_total":
			s.shed = v
		case "oncepay_http_connections_open":
			s.connsOpen = v
		case "oncepay_http_connections_limit":
			s.connsLimit = v
		case "oncepay_http_connections_reclaimed_total":
			s.reclaimed = v
		case "go_gc_duration_seconds_count":
			s.gcCycles = v
		case "go_gc_duration_seconds_sum":
			s.gcPauses = v
		}
	}
	return s, sc.Err()
}

// byStatus counts attempts per status (0: no answer).
func (r openLoopResult) byStatus() map[int]int {
	out := map[int]int{}
	for _, a := range r.attempts {
		out[a.status]++
	}
	return out
}

// latencies returns the sorted latencies of the attempts keep selects.
func (r openLoopResult) latencies(keep func(attempt) bool) []time.Duration {
	var out []time.Duration
	for _, a := range r.attempts {
		if keep(a) {
			out = append(out, a.latency)
		}
	}
	slices.Sort(out)
	return out
}

func answered(a attempt) bool { return a.status != 0 }
func created(a attempt) bool  { return a.status == http.StatusCreated }
func shedAttempt(a attempt) bool {
	return a.status == http.StatusServiceUnavailable && a.code == client.CodeOverloaded
}

// print writes the phase's summary: offered and achieved rates, answers by
// status, latency percentiles and the API's samples.
func (r openLoopResult) print(w io.Writer) {
	st := r.byStatus()
	codes := slices.Sorted(func(yield func(int) bool) {
		for c := range st {
			if !yield(c) {
				return
			}
		}
	})
	var parts []string
	for _, c := range codes {
		label := strconv.Itoa(c)
		if c == 0 {
			label = "no answer"
		}
		parts = append(parts, fmt.Sprintf("%s: %d", label, st[c]))
	}
	all, ok, shed := r.latencies(answered), r.latencies(created), r.latencies(shedAttempt)
	fmt.Fprintf(w, "%s: offered %.1f req/s for %s (%d requests started: %.1f req/s), created %.1f req/s; answers %s\n",
		r.cfg.name, r.cfg.rate, r.cfg.duration, len(r.attempts), float64(len(r.attempts))/r.cfg.duration.Seconds(),
		float64(st[http.StatusCreated])/r.elapsed.Seconds(), strings.Join(parts, ", "))
	fmt.Fprintf(w, "  latency of every answer: p50 %s  p99 %s  max %s\n", ms(percentile(all, 50)), ms(percentile(all, 99)), ms(percentile(all, 100)))
	fmt.Fprintf(w, "  201 created:             p50 %s  p99 %s  max %s\n", ms(percentile(ok, 50)), ms(percentile(ok, 99)), ms(percentile(ok, 100)))
	fmt.Fprintf(w, "  503 overloaded:          p50 %s  p99 %s  max %s\n", ms(percentile(shed, 50)), ms(percentile(shed, 99)), ms(percentile(shed, 100)))
	if len(r.samples) > 0 {
		g := func(f func(sample) float64) (lo, hi float64) {
			lo, hi = math.Inf(1), math.Inf(-1)
			for _, s := range r.samples {
				lo, hi = min(lo, f(s)), max(hi, f(s))
			}
			return lo, hi
		}
		gl, gh := g(func(s sample) float64 { return s.goroutines })
		rl, rh := g(func(s sample) float64 { return s.rssMiB })
		_, ih := g(func(s sample) float64 { return s.inFlight })
		_, ch := g(func(s sample) float64 { return s.connsOpen })
		_, cl := g(func(s sample) float64 { return s.connsLimit })
		if r.cpu != (cpuSample{}) {
			fmt.Fprintf(w, "  CPU time: this generator %s, the API %s, PostgreSQL %s\n", seconds(r.cpu.bench), seconds(r.cpu.api), seconds(r.cpu.pg))
		}
		fmt.Fprintf(w, "  API (%d samples every %s): goroutines %.0f..%.0f, RSS %.1f..%.1f MiB, in flight max %.0f, connections max %.0f of %.0f, %.0f reclaimed\n",
			len(r.samples), r.cfg.window, gl, gh, rl, rh, ih, ch, cl, r.samples[len(r.samples)-1].reclaimed-r.samples[0].reclaimed)
	}
}

// windows splits the phase into its sampling windows and returns, per
// window, the p99 latency of the answers started in it with the sample
// taken at its end.
func (r openLoopResult) windows() []windowStat {
	var out []windowStat
	for i, s := range r.samples {
		lo := time.Duration(0)
		if i > 0 {
			lo = r.samples[i-1].at
		}
		var lat []time.Duration
		for _, a := range r.attempts {
			if answered(a) && a.startedAt >= lo && a.startedAt < s.at {
				lat = append(lat, a.latency)
			}
		}
		slices.Sort(lat)
		out = append(out, windowStat{sample: s, n: len(lat), p50: percentile(lat, 50), p99: percentile(lat, 99)})
	}
	return out
}

// windowStat is one sampling window of a phase.
type windowStat struct {
	sample
	n        int
	p50, p99 time.Duration
}

// verifyExactlyOnce repeats up to n keys of each kind after the load, one
// attempt each: a key that was created must replay the same order, and a
// key that was shed must now be a first execution (the shed request did
// nothing). It returns the violations found.
func verifyExactlyOnce(ctx context.Context, api *apiClient, attempts []attempt, n int) (checked int, violations []string) {
	var createdKeys, shedKeys []attempt
	for _, a := range attempts {
		switch {
		case created(a) && len(createdKeys) < n:
			createdKeys = append(createdKeys, a)
		case shedAttempt(a) && len(shedKeys) < n:
			shedKeys = append(shedKeys, a)
		}
	}
	for _, a := range createdKeys {
		got := api.attemptCreate(ctx, a.key)
		checked++
		if got.status != http.StatusCreated || !got.replayed || got.orderID != a.orderID {
			violations = append(violations, fmt.Sprintf("created key %s: repeat = %d replayed=%t order %s, want the replay of order %s", a.key, got.status, got.replayed, got.orderID, a.orderID))
		}
	}
	for _, a := range shedKeys {
		got := api.attemptCreate(ctx, a.key)
		checked++
		if got.status != http.StatusCreated || got.replayed {
			violations = append(violations, fmt.Sprintf("shed key %s: retry = %d replayed=%t (%s), want a first execution", a.key, got.status, got.replayed, got.code))
		}
	}
	return checked, violations
}

// goroutineAllowance is what the API runs besides one goroutine per open
// connection: its workers, the broker, the pool, and the helpers of the
// admitted requests.
const goroutineAllowance = 250

// overloadTargets judges an overload phase: every request answered, within
// bounded time; the excess shed with Retry-After, never another 5xx; the
// API's goroutines and memory flat; exactly once on the sampled keys.
func overloadTargets(r openLoopResult, violations int, checked int) []target {
	st := r.byStatus()
	all := r.latencies(answered)
	other5xx := 0
	noRetryAfter := 0
	for _, a := range r.attempts {
		if a.status >= 500 && !shedAttempt(a) {
			other5xx++
		}
		if shedAttempt(a) && !a.retryAfter {
			noRetryAfter++
		}
	}
	out := []target{
		{name: "requests without an answer", got: float64(st[0]), want: 0, detail: fmt.Sprintf("of %d", len(r.attempts))},
		{name: "5xx other than 503 overloaded", got: float64(other5xx), want: 0},
		{name: "503 overloaded without Retry-After", got: float64(noRetryAfter), want: 0, detail: fmt.Sprintf("of %d shed", st[http.StatusServiceUnavailable])},
		{name: "share of requests shed", got: float64(st[http.StatusServiceUnavailable]) / float64(max(len(r.attempts), 1)), want: 0.5, atLeast: true,
			detail: "at 5x capacity most of the offered load must be shed, not queued"},
		{name: "p99 latency of every answer", got: percentile(all, 99).Seconds(), want: 2, unit: " s"},
		{name: "max latency of every answer", got: percentile(all, 100).Seconds(), want: 5, unit: " s"},
		{name: "p99 latency, last third / first third", got: thirdsRatio(r), want: 1.5, unit: "x",
			detail: "queueing without bound would grow it for as long as the overload lasts"},
		{name: "exactly once (sampled keys repeated)", got: float64(violations), want: 0, detail: fmt.Sprintf("%d keys repeated", checked)},
	}
	if len(r.samples) >= 4 {
		first, last := r.samples[1], r.samples[len(r.samples)-1] // [0] is before the load
		var maxG, limit float64
		for _, s := range r.samples {
			maxG = max(maxG, s.goroutines)
			limit = max(limit, s.connsLimit)
		}
		// One goroutine per open connection, at most MaxConnections of
		// them, and the service's own (about 70 when idle, a few more per
		// admitted request): never a number that follows the offered load.
		out = append(out,
			target{name: "API goroutines, max", got: maxG, want: limit + goroutineAllowance,
				detail: fmt.Sprintf("bounded by the connection limit (%.0f) plus %d, not by the offered load", limit, goroutineAllowance)},
			target{name: "API goroutines, last third / first third", got: goroutineThirds(r), want: 1.5, unit: "x",
				detail: "the most of each third: connections piling up would grow it for as long as the overload lasts"},
			target{name: "API RSS, last / first sample under load", got: ratio(last.rssMiB, first.rssMiB), want: 1.5, unit: "x",
				detail: fmt.Sprintf("%.1f vs %.1f MiB", last.rssMiB, first.rssMiB)},
		)
	}
	return out
}

// soakTargets judges a soak: the last tenth of the run against the first
// tenth after a warm-up tenth, for RSS, goroutines and latency.
func soakTargets(r openLoopResult) []target {
	ws := r.windows()
	if len(ws) < 10 {
		return []target{{name: "soak windows", got: float64(len(ws)), want: 10, atLeast: true, detail: "too short a soak to judge"}}
	}
	tenth := len(ws) / 10
	early, late := ws[tenth:2*tenth], ws[len(ws)-tenth:]
	mean := func(w []windowStat, f func(windowStat) float64) float64 {
		s := 0.0
		for _, x := range w {
			s += f(x)
		}
		return s / float64(len(w))
	}
	rss := func(w windowStat) float64 { return w.rssMiB }
	gor := func(w windowStat) float64 { return w.goroutines }
	p50 := func(w windowStat) float64 { return w.p50.Seconds() }
	p99 := func(w windowStat) float64 { return w.p99.Seconds() }
	st := r.byStatus()
	return []target{
		{name: "requests without an answer", got: float64(st[0]), want: 0, detail: fmt.Sprintf("of %d", len(r.attempts))},
		{name: "answers other than 201", got: float64(len(r.attempts) - st[http.StatusCreated] - st[0]), want: 0,
			detail: "a steady fraction of capacity is all served"},
		{name: "RSS, last tenth / second tenth", got: ratio(mean(late, rss), mean(early, rss)), want: 1.2, unit: "x",
			detail: fmt.Sprintf("%.1f vs %.1f MiB", mean(late, rss), mean(early, rss))},
		{name: "goroutines, last tenth / second tenth", got: ratio(mean(late, gor), mean(early, gor)), want: 1.2, unit: "x",
			detail: fmt.Sprintf("%.0f vs %.0f", mean(late, gor), mean(early, gor))},
		{name: "p50 latency, last tenth / second tenth", got: ratio(mean(late, p50), mean(early, p50)), want: 1.5, unit: "x",
			detail: fmt.Sprintf("%.2f vs %.2f ms", 1000*mean(late, p50), 1000*mean(early, p50))},
		{name: "p99 latency, last tenth / second tenth", got: ratio(mean(late, p99), mean(early, p99)), want: 1.5, unit: "x",
			detail: fmt.Sprintf("%.2f vs %.2f ms", 1000*mean(late, p99), 1000*mean(early, p99))},
	}
}

// printWindows writes a soak's windows, one line each.
func printWindows(w io.Writer, r openLoopResult) {
	fmt.Fprintln(w, "  window  answers  p50        p99        goroutines  RSS MiB  in flight")
	for _, x := range r.windows() {
		fmt.Fprintf(w, "  %6s  %7d  %9s  %9s  %10.0f  %7.1f  %9.0f\n", x.at.Round(time.Second), x.n, ms(x.p50), ms(x.p99), x.goroutines, x.rssMiB, x.inFlight)
	}
}

// runOpenLoops measures create throughput closed loop at the largest
// client count, then runs the overload and the soak phase asked for and
// prints their reports. Any missed target of a phase is an error.
func runOpenLoops(ctx context.Context, cfg config, api *apiClient, probe cpuProbe, stdout io.Writer) error {
	clients := slices.Max(cfg.clients)
	var errs errorLog
	capacity := measure(ctx, scenarioCreate, clients, cfg.load, api.createOp(), &errs, probe)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errs.count > 0 {
		return fmt.Errorf("capacity run: %d requests failed, e.g. %s", errs.count, strings.Join(errs.samples, "; "))
	}
	c := capacity.throughput()
	fmt.Fprintf(stdout, "capacity: create @%d closed loop for %s: %.1f req/s, p50 %s, p99 %s\n\n", clients, cfg.load.duration, c,
		ms(percentile(capacity.latencies, 50)), ms(percentile(capacity.latencies, 99)))
	var missed []string
	judge := func(ts []target) error {
		if err := printTargets(stdout, ts); err != nil {
			return err
		}
		fmt.Fprintln(stdout)
		for _, t := range ts {
			if t.verdict() == "MISS" {
				missed = append(missed, t.name)
			}
		}
		return nil
	}
	if cfg.overload > 0 {
		r := runOpenLoop(ctx, api, cfg.api, openLoopConfig{name: fmt.Sprintf("overload %gx", cfg.overload), rate: cfg.overload * c, duration: cfg.overloadFor, window: time.Second})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.print(stdout)
		checked, violations := verifyExactlyOnce(ctx, api, r.attempts, cfg.verifyKeys)
		for i, v := range violations {
			if i == 5 {
				fmt.Fprintf(stdout, "  ... and %d more\n", len(violations)-i)
				break
			}
			fmt.Fprintln(stdout, "  VIOLATION "+v)
		}
		fmt.Fprintln(stdout)
		if err := judge(overloadTargets(r, len(violations), checked)); err != nil {
			return err
		}
	}
	if cfg.attack > 0 {
		alone, attacked, kinds, err := runAttack(ctx, cfg, api, cfg.soakFraction*c, probe, stdout)
		if err != nil {
			return err
		}
		alone.print(stdout)
		attacked.print(stdout)
		for _, k := range kinds {
			fmt.Fprintln(stdout, "  attacker: "+k.summary())
		}
		fmt.Fprintln(stdout)
		if err := judge(attackTargets(alone, attacked)); err != nil {
			return err
		}
	}
	if cfg.soak > 0 {
		window := max(cfg.soak/60, time.Second)
		r := runOpenLoop(ctx, api, cfg.api, openLoopConfig{name: fmt.Sprintf("soak %g of capacity", cfg.soakFraction), rate: cfg.soakFraction * c, duration: cfg.soak, window: window})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.print(stdout)
		printWindows(stdout, r)
		fmt.Fprintln(stdout)
		if err := judge(soakTargets(r)); err != nil {
			return err
		}
	}
	if len(missed) > 0 {
		return fmt.Errorf("targets missed: %s", strings.Join(missed, "; "))
	}
	return nil
}

// thirdsRatio is the p99 latency of the answers started in the last third
// of the phase over that of the first third.
func thirdsRatio(r openLoopResult) float64 {
	third := r.cfg.duration / 3
	p99 := func(lo, hi time.Duration) time.Duration {
		var lat []time.Duration
		for _, a := range r.attempts {
			if answered(a) && a.startedAt >= lo && a.startedAt < hi {
				lat = append(lat, a.latency)
			}
		}
		slices.Sort(lat)
		return percentile(lat, 99)
	}
	return ratio(float64(p99(2*third, r.cfg.duration+time.Minute)), float64(p99(0, third)))
}

// goroutineThirds is the most API goroutines sampled in the last third of
// the phase over the most in the first (the sample before the load left
// out).
func goroutineThirds(r openLoopResult) float64 {
	third := r.cfg.duration / 3
	most := func(lo, hi time.Duration) float64 {
		var m float64
		for _, s := range r.samples[1:] {
			if s.at >= lo && s.at < hi {
				m = max(m, s.goroutines)
			}
		}
		return m
	}
	return ratio(most(2*third, r.cfg.duration+time.Minute), most(0, third))
}
