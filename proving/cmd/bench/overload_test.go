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
