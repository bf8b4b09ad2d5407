package main

import (
	"testing"
	"time"
)

// The keep-pace targets: a sweeper more than a round behind, a table that
// grew, a slower or failing create each miss.
func TestPaceTargetsSeeABacklogGrowthAndSlowCreates(t *testing.T) {
	t.Parallel()
	lat := func(p99 time.Duration) []time.Duration {
		l := make([]time.Duration, 100)
		for i := range l {
			l[i] = time.Millisecond
		}
		l[98], l[99] = p99, p99
		return l
	}
	base := result{latencies: lat(10 * time.Millisecond)}
	verdicts := func(ts []target) []string {
		out := make([]string, len(ts))
		for i, tg := range ts {
			out[i] = tg.verdict()
		}
		return out
	}
	for _, tc := range []struct {
		name                  string
		keep                  result
		expired, rows0, rows2 int64
		want                  []string
	}{
		{"kept pace", result{latencies: lat(12 * time.Millisecond)}, 10_000, 700_000, 700_100, []string{"PASS", "PASS", "PASS", "PASS"}},
		{"a round behind and more", result{latencies: lat(12 * time.Millisecond)}, 30_000, 700_000, 700_100, []string{"MISS", "PASS", "PASS", "PASS"}},
		{"the table grew", result{latencies: lat(12 * time.Millisecond)}, 100, 700_000, 701_000, []string{"PASS", "MISS", "PASS", "PASS"}},
		{"creates slowed", result{latencies: lat(13 * time.Millisecond)}, 100, 700_000, 700_000, []string{"PASS", "PASS", "MISS", "PASS"}},
		{"creates failed", result{latencies: lat(10 * time.Millisecond), errors: 1}, 100, 700_000, 700_000, []string{"PASS", "PASS", "PASS", "MISS"}},
	} {
		got := verdicts(paceTargets(base, tc.keep, 200, tc.expired, tc.rows0, tc.rows2))
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: verdicts %v, want %v", tc.name, got, tc.want)
				break
			}
		}
	}
}
