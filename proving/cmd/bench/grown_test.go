package main

import (
	"testing"
	"time"
)

// The grown-data targets compare each grown scenario with its own run on
// the database before seeding, percentile by percentile.
func TestGrownTargetsCompareEachScenarioWithItsRunBeforeSeeding(t *testing.T) {
	t.Parallel()
	lat := func(p50, p99 time.Duration) []time.Duration {
		l := make([]time.Duration, 100)
		for i := range l {
			l[i] = p50
		}
		l[98], l[99] = p99, p99
		return l
	}
	results := []result{
		{scenario: scenarioCreate, clients: 16, latencies: lat(10*time.Millisecond, 40*time.Millisecond)},
		{scenario: scenarioReplay, clients: 16, latencies: lat(time.Millisecond, 4*time.Millisecond)},
		{scenario: scenarioCreateGrown, clients: 16, latencies: lat(11*time.Millisecond, 60*time.Millisecond)},
		{scenario: scenarioReplayGrown, clients: 16, latencies: lat(time.Millisecond, 4*time.Millisecond)},
	}
	want := map[string]string{
		"create-grown/create p50 @16": "PASS", // 1.1x
		"create-grown/create p99 @16": "MISS", // 1.5x
		"replay-grown/replay p50 @16": "PASS",
		"replay-grown/replay p99 @16": "PASS",
	}
	got := grownTargets(results, []int{16})
	if len(got) != len(want) {
		t.Fatalf("%d targets, want %d: %+v", len(got), len(want), got)
	}
	for _, tg := range got {
		if v := tg.verdict(); v != want[tg.name] {
			t.Errorf("%s: %s (%.2fx, %s), want %s", tg.name, v, tg.got, tg.detail, want[tg.name])
		}
	}
	if v := grownTargets(results[:2], []int{16})[0].verdict(); v != "SKIP" {
		t.Errorf("without the grown runs: %s, want SKIP", v)
	}
}
