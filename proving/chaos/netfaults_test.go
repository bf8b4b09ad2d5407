package chaos

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echoServer answers every line with the same line, on a loopback port.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// The steps' toxics do what the fault kinds say, on a real proxy: a
// latency step delays, a cut resets the connection, a blackhole never
// answers, and healing gives a working link back; the link counts what it
// carried.
func TestLinksBreakAndHeal(t *testing.T) {
	t.Parallel()
	l := newLinks()
	t.Cleanup(l.stop)
	through, err := l.start(DepProvider, "http://"+echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	addr := through[len("http://"):]
	roundTrip := func(deadline time.Duration) (time.Duration, error) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return 0, err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(deadline))
		began := time.Now()
		if _, err := c.Write([]byte("ping\n")); err != nil {
			return 0, err
		}
		_, err = bufio.NewReader(c).ReadString('\n')
		return time.Since(began), err
	}
	if _, err := roundTrip(5 * time.Second); err != nil {
		t.Fatalf("healthy link: %v", err)
	}

	ctx := context.Background()
	for _, tc := range []struct {
		step  Step
		check func(time.Duration, error) string
	}{
		{Step{Kind: StepNetLatency, N: 300}, func(d time.Duration, err error) string {
			if err != nil || d < 500*time.Millisecond { // 300 ms each way, less a tenth of jitter
				return "no delay"
			}
			return ""
		}},
		{Step{Kind: StepNetCut}, func(_ time.Duration, err error) string {
			if err == nil {
				return "answered through a cut link"
			}
			return ""
		}},
		{Step{Kind: StepNetBlackhole}, func(_ time.Duration, err error) string {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				return "not a peer that never answers"
			}
			return ""
		}},
	} {
		kind, attrs, _ := tc.step.toxic()
		names, err := l.add(DepProvider, kind, attrs)
		if err != nil {
			t.Fatal(err)
		}
		d, err := roundTrip(2 * time.Second)
		if msg := tc.check(d, err); msg != "" {
			t.Errorf("%s: %s (round trip %v, %v)", tc.step.Kind, msg, d, err)
		}
		if err := l.remove(ctx, DepProvider, names); err != nil {
			t.Fatal(err)
		}
		if _, err := roundTrip(5 * time.Second); err != nil {
			t.Errorf("after %s was healed: %v", tc.step.Kind, err)
		}
	}
	if n := l.bytes()[DepProvider]; n == 0 {
		t.Error("the link counted nothing it carried")
	}
}
