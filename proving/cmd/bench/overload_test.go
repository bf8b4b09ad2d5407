package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/oncepay/oncepay/client"
)

// verdicts maps each target's name to its verdict.
func verdicts(ts []target) map[string]string {
	out := map[string]string{}
	for _, t := range ts {
		out[t.name] = t.verdict()
	}
	return out
}

// An overload whose latency grows over the run is queueing without bound,
// even when every single answer stays under the absolute bounds; and a shed
// answer without Retry-After, or any other 5xx, is a miss.
func TestOverloadTargetsSeeGrowingLatencyAndBadAnswers(t *testing.T) {
	phase := func(late time.Duration, extra ...attempt) openLoopResult {
		r := openLoopResult{cfg: openLoopConfig{duration: 30 * time.Second}}
		for i := range 300 {
			at := time.Duration(i) * 100 * time.Millisecond
			lat := 10 * time.Millisecond
			if at >= 20*time.Second {
				lat = late
			}
			a := attempt{status: http.StatusServiceUnavailable, code: client.CodeOverloaded, retryAfter: true, latency: lat, startedAt: at}
			if i%5 == 0 {
				a = attempt{status: http.StatusCreated, latency: lat, startedAt: at}
			}
			r.attempts = append(r.attempts, a)
		}
		r.attempts = append(r.attempts, extra...)
		return r
	}
	flat := verdicts(overloadTargets(phase(10*time.Millisecond), 0, 10))
	for name, v := range flat {
		if v == "MISS" {
			t.Errorf("flat overload: %s = MISS", name)
		}
	}
	growing := verdicts(overloadTargets(phase(500*time.Millisecond), 0, 10))
	if growing["p99 latency, last third / first third"] != "MISS" {
		t.Error("latency growing 50x over the run passed")
	}
	bad := verdicts(overloadTargets(phase(10*time.Millisecond,
		attempt{status: http.StatusServiceUnavailable, code: client.CodeOverloaded},
		attempt{status: http.StatusInternalServerError, code: client.CodeInternal},
		attempt{status: 0, code: "connection reset"}), 1, 10))
	for _, name := range []string{"503 overloaded without Retry-After", "5xx other than 503 overloaded", "requests without an answer", "exactly once (sampled keys repeated)"} {
		if bad[name] != "MISS" {
			t.Errorf("%s = %s, want MISS", name, bad[name])
		}
	}

	// Goroutines are bounded by the connection limit the API exports, not
	// by a fixed number.
	withGoroutines := func(peak float64) string {
		r := phase(10 * time.Millisecond)
		for i := range 5 {
			r.samples = append(r.samples, sample{at: time.Duration(i) * 7 * time.Second, goroutines: 70 + float64(i), rssMiB: 50, connsLimit: 100})
		}
		r.samples[3].goroutines = peak
		return verdicts(overloadTargets(r, 0, 10))["API goroutines, max"]
	}
	if v := withGoroutines(100 + goroutineAllowance); v != "PASS" {
		t.Errorf("goroutines at the connection limit plus the allowance: %s, want PASS", v)
	}
	if v := withGoroutines(101 + goroutineAllowance); v != "MISS" {
		t.Errorf("goroutines past the connection limit plus the allowance: %s, want MISS", v)
	}

	// Goroutines that grow over the phase are connections piling up, even
	// under the bound.
	growth := func(last float64) string {
		r := phase(10 * time.Millisecond)
		for i := range 7 {
			r.samples = append(r.samples, sample{at: time.Duration(i) * 5 * time.Second, goroutines: 100, rssMiB: 50, connsLimit: 4096})
		}
		r.samples[6].goroutines = last // at 30s: the last third
		return verdicts(overloadTargets(r, 0, 10))["API goroutines, last third / first third"]
	}
	if v := growth(140); v != "PASS" {
		t.Errorf("goroutines 1.4x: %s, want PASS", v)
	}
	if v := growth(160); v != "MISS" {
		t.Errorf("goroutines 1.6x: %s, want MISS", v)
	}
}

// A soak whose memory grows is not flat.
func TestSoakTargetsSeeGrowingMemory(t *testing.T) {
	soak := func(growth float64) openLoopResult {
		var r openLoopResult
		for i := range 20 {
			at := time.Duration(i+1) * time.Minute
			r.samples = append(r.samples, sample{at: at, goroutines: 50, rssMiB: 40 * (1 + growth*float64(i))})
			r.attempts = append(r.attempts, attempt{status: http.StatusCreated, latency: 5 * time.Millisecond, startedAt: at - time.Second})
		}
		return r
	}
	if v := verdicts(soakTargets(soak(0)))["RSS, last tenth / second tenth"]; v != "PASS" {
		t.Errorf("flat RSS = %s, want PASS", v)
	}
	if v := verdicts(soakTargets(soak(0.05)))["RSS, last tenth / second tenth"]; v != "MISS" {
		t.Errorf("RSS growing 5%% a minute = %s, want MISS", v)
	}
}
