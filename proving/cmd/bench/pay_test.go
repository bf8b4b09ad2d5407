package main

import (
	"strings"
	"testing"
	"time"
)

// The pay scenarios need the simulator, whose latency they set; without its
// URL and key the run is refused before anything starts.
func TestThePayScenariosNeedTheSimulator(t *testing.T) {
	t.Parallel()
	env := map[string]string{"PSP_URL": "http://127.0.0.1:1", "PSP_API_KEY": "sk_sim_x"}
	for _, tc := range []struct {
		args    []string
		env     map[string]string
		wantErr string
	}{
		{[]string{"--scenarios", "pay"}, nil, "need the simulator"},
		{[]string{"--scenarios", "pay-only"}, map[string]string{"PSP_URL": "http://x"}, "need the simulator"},
		{[]string{"--scenarios", "pay", "--psp-latency", "-1s"}, env, "--psp-latency"},
		{[]string{"--scenarios", "pay", "--psp-latency", "fast"}, env, "--psp-latency"},
		{[]string{"--scenarios", "pay,pay-only", "--psp-latency", "0s,150ms,0"}, env, ""},
	} {
		var out strings.Builder
		c, err := parseFlags(tc.args, func(k string) string { return tc.env[k] }, &out)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%v: error %v, want one about %s", tc.args, err, tc.wantErr)
		case tc.wantErr == "" && len(c.pspLatencies) != 2:
			t.Errorf("%v: latencies %v, want 0s and 150ms once each", tc.args, c.pspLatencies)
		}
	}
}

// A pay-only phase is given enough orders for its warm-up and measured time
// at the rate measured before, with a margin; the first one gets the
// configured number.
func TestPayOnlyGetsTheOrdersItsRateNeeds(t *testing.T) {
	t.Parallel()
	l := load{warmup: time.Second, duration: 9 * time.Second}
	if got := payOnlyOrders(l, 0, 2000); got != 2000 {
		t.Errorf("first phase: %d orders, want the configured 2000", got)
	}
	if got := payOnlyOrders(l, 100, 2000); got != 100*10*3/2+16 {
		t.Errorf("at 100/s for 10s: %d orders, want %d", got, 100*10*3/2+16)
	}
	if got := payOnlyOrders(load{warmup: time.Second, requests: 50}, 100, 2000); got != 50+150+16 {
		t.Errorf("50 requests after a 1s warm-up at 100/s: %d orders, want %d", got, 50+150+16)
	}
}

// Results of later rounds merge into the same scenario's at the same client
// count, wherever it is in the list; the comparison sets each result
// beside its counterpart measured against the other API.
func TestResultsMergeByNameAndCompareWithTheOtherAPI(t *testing.T) {
	t.Parallel()
	ms := func(n int) []time.Duration {
		out := make([]time.Duration, 100)
		for i := range out {
			out[i] = time.Duration(n) * time.Millisecond
		}
		return out
	}
	var rs []result
	rs = mergeResult(rs, result{scenario: "pay+0s", clients: 1, requests: 100, elapsed: time.Second, latencies: ms(2), cpu: cpuSample{api: 100 * time.Millisecond}})
	rs = mergeResult(rs, result{scenario: "pay+0s@before", clients: 1, requests: 50, elapsed: time.Second, latencies: ms(4), cpu: cpuSample{api: 100 * time.Millisecond}})
	rs = mergeResult(rs, result{scenario: "pay+0s", clients: 1, requests: 100, elapsed: time.Second, latencies: ms(2), cpu: cpuSample{api: 100 * time.Millisecond}})
	if len(rs) != 2 || rs[0].requests != 200 || rs[0].elapsed != 2*time.Second {
		t.Fatalf("merged results %+v, want pay+0s with 200 requests in 2s and its counterpart", rs)
	}
	var out strings.Builder
	if err := printComparison(&out, rs, "before"); err != nil {
		t.Fatal(err)
	}
	// 100/s vs 50/s, p50 2ms vs 4ms, 1ms of API CPU per payment vs 2ms.
	want := []string{"pay+0s", "2.00x", "0.50x", "0.50x", "0.50x"}
	line := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(line) != 2 {
		t.Fatalf("comparison:\n%s\nwant a header and one row", out.String())
	}
	if f := strings.Fields(line[1]); len(f) != 6 || f[0] != want[0] || f[2] != want[1] || f[3] != want[2] || f[4] != want[3] || f[5] != want[4] {
		t.Errorf("comparison row %q, want %v at 1 client", line[1], want)
	}
}
