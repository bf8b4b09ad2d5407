package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/testkit"
)

// The attack phase passes only when the well-behaved client keeps its
// answers and its latency: fewer than 95% created, or a p99 more than twice
// that of the same load alone, is a miss.
func TestAttackTargets(t *testing.T) {
	phase := func(n, failed int, lat time.Duration) openLoopResult {
		var r openLoopResult
		for i := range n {
			a := attempt{status: http.StatusCreated, latency: lat}
			if i < failed {
				a.status = http.StatusServiceUnavailable
			}
			r.attempts = append(r.attempts, a)
		}
		return r
	}
	alone := phase(100, 0, 10*time.Millisecond)
	for _, tc := range []struct {
		name     string
		attacked openLoopResult
		want     map[string]string
	}{
		{"kept", phase(100, 5, 19*time.Millisecond), map[string]string{"answered": "PASS", "p99": "PASS"}},
		{"starved", phase(100, 6, 10*time.Millisecond), map[string]string{"answered": "MISS", "p99": "PASS"}},
		{"slowed", phase(100, 0, 21*time.Millisecond), map[string]string{"answered": "PASS", "p99": "MISS"}},
	} {
		got := attackTargets(alone, tc.attacked)
		if v := got[0].verdict(); v != tc.want["answered"] {
			t.Errorf("%s: %s = %s, want %s", tc.name, got[0].name, v, tc.want["answered"])
		}
		if v := got[1].verdict(); v != tc.want["p99"] {
			t.Errorf("%s: %s = %s, want %s", tc.name, got[1].name, v, tc.want["p99"])
		}
	}
}

// The attack is refused against anything but a loopback address.
func TestAttackRunsOnLoopbackOnly(t *testing.T) {
	for base, ok := range map[string]bool{
		"http://127.0.0.1:8080": true, "http://localhost:8080": true, "http://[::1]:8080": true,
		"http://10.0.0.5:8080": false, "http://example.com": false,
	} {
		_, err := loopbackHost(base)
		if (err == nil) != ok {
			t.Errorf("loopbackHost(%s) = %v, want ok %t", base, err, ok)
		}
	}
}

// Every attacker reconnects as soon as the server answers or closes its
// connection, for as long as the attack lasts, and counts what it met.
func TestAttackersReconnect(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	srv.Config.ReadHeaderTimeout = 100 * time.Millisecond
	srv.Start()
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	headerless := &attackers{name: "headerless", n: 3, head: "GET / HTTP/1.1\r\n"}
	answered := &attackers{name: "answered", n: 2, head: "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", trickle: time.Second}
	ctx, stop := context.WithCancel(context.Background())
	waits := []interface{ Wait() }{headerless.run(ctx, addr), answered.run(ctx, addr)}
	end := func() {
		stop()
		for _, w := range waits {
			w.Wait()
		}
	}
	defer end()
	testkit.WaitFor(t, 10*time.Second, "connections closed, answered and reopened", func() bool {
		return headerless.closed.Load() >= 6 && answered.opened.Load() >= 6
	})
	end()
	if got := headerless.ready.Load(); got != 3 {
		t.Errorf("header-less attackers ready = %d, want 3", got)
	}
	if got := headerless.closed.Load(); got < 6 {
		t.Errorf("header-less connections closed by the server = %d, want them reopened and closed again", got)
	}
	if !strings.Contains(answered.summary(), "answered 200") || answered.opened.Load() < 6 {
		t.Errorf("answered attackers: %s, want several connections each answered 200", answered.summary())
	}
}
