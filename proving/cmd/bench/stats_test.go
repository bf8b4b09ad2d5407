package main

import (
	"math"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	var sorted []time.Duration
	for i := 1; i <= 100; i++ {
		sorted = append(sorted, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{
		{50, 50 * time.Millisecond},
		{99, 99 * time.Millisecond},
		{100, 100 * time.Millisecond},
		{0.1, 1 * time.Millisecond},
	} {
		if got := percentile(sorted, tc.p); got != tc.want {
			t.Fatalf("percentile(1..100 ms, %v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	few := []time.Duration{1, 2, 3}
	if got, want := percentile(few, 50), time.Duration(2); got != want {
		t.Fatalf("percentile(1,2,3, 50) = %v, want %v", got, want)
	}
	if got, want := percentile(few, 99), time.Duration(3); got != want {
		t.Fatalf("percentile(1,2,3, 99) = %v, want %v", got, want)
	}
	if got := percentile(nil, 50); got != 0 {
		t.Fatalf("percentile(nil, 50) = %v, want 0", got)
	}
}

func TestRatio(t *testing.T) {
	if got, want := ratio(3, 4), 0.75; got != want {
		t.Fatalf("ratio(3, 4) = %v, want %v", got, want)
	}
	if got := ratio(3, 0); !math.IsNaN(got) {
		t.Fatalf("ratio(3, 0) = %v, want NaN", got)
	}
}

func TestThroughput(t *testing.T) {
	r := result{requests: 500, elapsed: 2 * time.Second}
	if got, want := r.throughput(), 250.0; got != want {
		t.Fatalf("throughput = %v, want %v", got, want)
	}
	if got := (result{requests: 5}).throughput(); got != 0 {
		t.Fatalf("throughput without elapsed time = %v, want 0", got)
	}
}

func TestVerdict(t *testing.T) {
	for _, tc := range []struct {
		t    target
		want string
	}{
		{target{got: 0.9, want: 0.9, atLeast: true}, "PASS"},
		{target{got: 0.89, want: 0.9, atLeast: true}, "MISS"},
		{target{got: 1, want: 1}, "PASS"},
		{target{got: 1.01, want: 1}, "MISS"},
		{target{got: math.NaN(), want: 1}, "SKIP"},
		{target{got: 0, want: 100, skip: true}, "SKIP"},
	} {
		if got := tc.t.verdict(); got != tc.want {
			t.Fatalf("verdict of %+v = %s, want %s", tc.t, got, tc.want)
		}
	}
}

func TestStatusKiB(t *testing.T) {
	status := "Name:\tapi\nVmPeak:\t 1300000 kB\nVmHWM:\t   41236 kB\nVmRSS:\t   40000 kB\n"
	got, err := statusKiB(status, "VmHWM")
	if err != nil {
		t.Fatalf("statusKiB: %v", err)
	}
	if want := int64(41236); got != want {
		t.Fatalf("statusKiB(VmHWM) = %d, want %d", got, want)
	}
	if _, err := statusKiB(status, "VmSwap"); err == nil {
		t.Fatalf("statusKiB(VmSwap) of a status without it: want an error")
	}
}

func TestParseStat(t *testing.T) {
	// A command name with a space and a parenthesis, as proc(5) allows.
	stat := []byte("4242 (api (x) y) S 17 4242 17 0 -1 4194560 100 0 0 0 250 50 7 3 20 0 9 0 1000 1300000000 5000 18446744073709551615")
	st, err := parseStat(stat)
	if err != nil {
		t.Fatalf("parseStat: %v", err)
	}
	if st.state != 'S' || st.ppid != 17 {
		t.Fatalf("parseStat: state %c ppid %d, want S 17", st.state, st.ppid)
	}
	if want := 3 * time.Second; st.own != want {
		t.Fatalf("parseStat: own %v, want %v", st.own, want)
	}
	if want := 100 * time.Millisecond; st.children != want {
		t.Fatalf("parseStat: children %v, want %v", st.children, want)
	}
}
