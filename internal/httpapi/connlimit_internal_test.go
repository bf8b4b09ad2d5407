package httpapi

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/testkit"
)

// limitedServer serves GET /work, which blocks until release is closed
// (when block is set) and answers 200, on a loopback port behind l.
func limitedServer(t *testing.T, l *ConnLimiter, release <-chan struct{}) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var started atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started.Add(1)
		if r.URL.Query().Get("block") != "" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	srv.Listener = l.Listener(srv.Listener)
	srv.Config.ConnState = l.ConnState
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &started
}

// ownClient has its own transport, so it holds its own keep-alive
// connection.
func ownClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func (l *ConnLimiter) idleCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unfinished.Len() + l.idle.Len()
}

// At the limit the server accepts no further connection: the next one
// waits in the kernel's queue, unanswered, and is served once a slot frees.
func TestConnLimitHoldsConnectionsAtTheLimit(t *testing.T) {
	t.Parallel()
	l := NewConnLimiter(2, 0)
	release := make(chan struct{})
	srv, started := limitedServer(t, l, release)

	done := make(chan error, 2)
	for range 2 {
		c := ownClient(t)
		go func() {
			resp, err := c.Get(srv.URL + "/work?block=1")
			if err == nil {
				resp.Body.Close()
			}
			done <- err
		}()
	}
	testkit.WaitFor(t, 10*time.Second, "both requests are being worked on", func() bool { return started.Load() == 2 })

	third, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatalf("dial: %v", err) // the kernel still completes the handshake
	}
	defer third.Close()
	if _, err := third.Write([]byte("GET /work HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")); err != nil {
		t.Fatalf("write: %v", err)
	}
	// Unanswered while both slots are held: a read with a short deadline
	// times out (an accepted connection would be answered at once).
	_ = third.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := third.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("third connection at the limit: read %v, want no answer while both slots are held", err)
	}
	if open := l.Open(); open != 2 {
		t.Errorf("open connections = %d, want 2", open)
	}

	close(release)
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("blocked request: %v", err)
		}
	}
	_ = third.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(third), nil)
	if err != nil {
		t.Fatalf("third connection after the slots freed: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("third connection: status %d, want 200", resp.StatusCode)
	}
}

// Idle keep-alive connections must not hold the slots: at the limit the
// longest idle one is closed for the new client, and its own client still
// gets its next answer (its transport reconnects).
func TestConnLimitReclaimsIdleConnections(t *testing.T) {
	t.Parallel()
	l := NewConnLimiter(2, 0)
	srv, _ := limitedServer(t, l, nil)

	first, second := ownClient(t), ownClient(t)
	for _, c := range []*http.Client{first, second} {
		resp, err := c.Get(srv.URL + "/work")
		if err != nil {
			t.Fatalf("GET: %v", err)
		}
		resp.Body.Close()
	}
	testkit.WaitFor(t, 10*time.Second, "both connections idle", func() bool { return l.idleCount() == 2 })

	resp, err := ownClient(t).Get(srv.URL + "/work")
	if err != nil {
		t.Fatalf("a new client while idle connections hold every slot: %v", err)
	}
	resp.Body.Close()
	if got := l.Reclaimed(); got != 1 {
		t.Errorf("reclaimed = %d, want 1 (the longest idle connection)", got)
	}
	if open := l.Open(); open > 2 {
		t.Errorf("open connections = %d, want at most 2", open)
	}
	for _, c := range []*http.Client{first, second} {
		resp, err := c.Get(srv.URL + "/work")
		if err != nil {
			t.Fatalf("GET by an earlier client: %v", err)
		}
		resp.Body.Close()
	}
}

// Connections that never finish their headers, or whose request's body
// does not come, do not hold the slots: at the limit the one that has
// waited longest for its client is closed for a new client once it has
// waited reclaimAfter, and not before.
func TestConnLimitReclaimsConnectionsWaitingForTheirClient(t *testing.T) {
	t.Parallel()
	const reclaimAfter = 300 * time.Millisecond
	l := NewConnLimiter(2, reclaimAfter)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 {
			awaitingBody(r.Context(), true)
			_, err := io.ReadAll(r.Body)
			awaitingBody(r.Context(), false)
			if err != nil {
				return
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	srv.Listener = l.Listener(srv.Listener)
	srv.Config.ConnState = l.ConnState
	srv.Config.ConnContext = l.ConnContext
	srv.Start()
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()

	// One connection sends half a request line, the other a request
	// whose body never comes.
	var slow []net.Conn
	for _, head := range []string{"GET /wo", "POST /work HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{"} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(err)
		}
		slow = append(slow, c)
	}
	testkit.WaitFor(t, 10*time.Second, "both slow connections held, waiting for their client", func() bool {
		return l.Open() == 2 && l.idleCount() == 2
	})

	t0 := time.Now()
	resp, err := ownClient(t).Get(srv.URL + "/work")
	if err != nil {
		t.Fatalf("a new client while slow connections hold every slot: %v", err)
	}
	resp.Body.Close()
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("the new client was served after %s, want about reclaimAfter (%s)", d, reclaimAfter)
	}
	if got := l.Reclaimed(); got != 1 {
		t.Errorf("reclaimed = %d, want 1", got)
	}
	// The one closed is the one that waited longest: the first.
	_ = slow[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := slow[0].Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the connection without headers: read %v, want it closed", err)
	}
	// The next new client finds the other one waited long enough too.
	resp, err = ownClient(t).Get(srv.URL + "/work")
	if err != nil {
		t.Fatalf("a second new client: %v", err)
	}
	resp.Body.Close()
	if got := l.Reclaimed(); got < 2 {
		t.Errorf("reclaimed = %d, want at least 2: the body that never came", got)
	}
	_ = slow[1].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := slow[1].Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the connection without its body: read %v, want it closed", err)
	}
}

// A connection younger than reclaimAfter keeps its slot: the client whose
// request is on its way is not cut off, and the new one waits for it.
func TestConnLimitKeepsConnectionsThatJustCame(t *testing.T) {
	t.Parallel()
	const reclaimAfter = time.Second
	l := NewConnLimiter(1, reclaimAfter)
	srv, _ := limitedServer(t, l, nil)
	held, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	testkit.WaitFor(t, 10*time.Second, "the first connection held", func() bool { return l.Open() == 1 })
	t0 := time.Now()
	resp, err := ownClient(t).Get(srv.URL + "/work")
	if err != nil {
		t.Fatalf("a new client: %v", err)
	}
	resp.Body.Close()
	if d := time.Since(t0); d < reclaimAfter-100*time.Millisecond {
		t.Errorf("served after %s: the connection held was closed before it waited reclaimAfter (%s)", d, reclaimAfter)
	}
	if got := l.Reclaimed(); got != 1 {
		t.Errorf("reclaimed = %d, want 1", got)
	}
}

// While a connection holds a request unfinished, idle ones are left alone:
// the idle connection of a client that finished a request keeps its slot
// though it has waited longer, and the unfinished one is closed for the
// new client.
func TestConnLimitSparesIdleConnectionsWhileOthersHoldRequestsUnfinished(t *testing.T) {
	t.Parallel()
	l := NewConnLimiter(2, 200*time.Millisecond)
	srv, _ := limitedServer(t, l, nil)
	var dials atomic.Int64
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	kept := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	get := func(c *http.Client) {
		t.Helper()
		resp, err := c.Get(srv.URL + "/work")
		if err != nil {
			t.Fatalf("GET: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	get(kept)
	testkit.WaitFor(t, 10*time.Second, "the kept connection idle", func() bool { return l.idleCount() == 1 })
	silent, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	testkit.WaitFor(t, 10*time.Second, "the silent connection held", func() bool { return l.Open() == 2 && l.idleCount() == 2 })

	get(ownClient(t))
	_ = silent.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the silent connection: read %v, want it closed for the new client", err)
	}
	get(kept)
	if n := dials.Load(); n != 1 {
		t.Errorf("the kept client dialled %d times, want 1: its idle connection was closed though another held a request unfinished", n)
	}
}

// The reclaims are paced: at most a burst at once, then at limit per
// reclaimAfter, and never faster than maxReclaimRate.
func TestConnLimitPacesReclaims(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		limit        int
		reclaimAfter time.Duration
		rate         float64 // per second
	}{
		{4096, 500 * time.Millisecond, maxReclaimRate},
		{8, 200 * time.Millisecond, 40},
	} {
		l := NewConnLimiter(tc.limit, tc.reclaimAfter)
		t0 := time.Now()
		burst := 0
		for l.pace(t0) == 0 {
			l.allowance--
			burst++
		}
		if want := max(int(tc.rate*reclaimBurst.Seconds()), 1); burst != want {
			t.Errorf("limit %d: %d reclaims at once, want %d", tc.limit, burst, want)
		}
		wait := l.pace(t0)
		if want := time.Duration(float64(time.Second) / tc.rate); wait <= 0 || wait > want {
			t.Errorf("limit %d: next reclaim in %s, want within %s", tc.limit, wait, want)
		}
		second := 0
		for at := t0; at.Before(t0.Add(time.Second)); at = at.Add(time.Millisecond) {
			if l.pace(at) == 0 {
				l.allowance--
				second++
			}
		}
		if second > int(tc.rate)+1 {
			t.Errorf("limit %d: %d reclaims in the second after the burst, want at most %.0f", tc.limit, second, tc.rate)
		}
	}
}

// Closing the listener ends an Accept that waits for a slot.
func TestConnLimitCloseEndsAWaitingAccept(t *testing.T) {
	t.Parallel()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewConnLimiter(1, 0)
	ln := l.Listener(inner)
	client, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	held, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()

	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()
	_ = ln.Close()
	select {
	case err := <-accepted:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept still waits for a slot after the listener was closed")
	}
	_ = held.Close()
	if open := l.Open(); open != 0 {
		t.Errorf("open connections after both closed = %d, want 0", open)
	}
}
