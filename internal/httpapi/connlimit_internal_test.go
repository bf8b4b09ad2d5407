package httpapi

import (
	"bufio"
	"errors"
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
	return len(l.idle)
}

// At the limit the server accepts no further connection: the next one
// waits in the kernel's queue, unanswered, and is served once a slot frees.
func TestConnLimitHoldsConnectionsAtTheLimit(t *testing.T) {
	t.Parallel()
	l := NewConnLimiter(2)
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
	l := NewConnLimiter(2)
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

// Closing the listener ends an Accept that waits for a slot.
func TestConnLimitCloseEndsAWaitingAccept(t *testing.T) {
	t.Parallel()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewConnLimiter(1)
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
