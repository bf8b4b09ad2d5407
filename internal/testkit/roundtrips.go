package testkit

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/postgres"
)

// RoundTripCounter is a TCP relay between a client and its server that
// counts round trips: the times the client speaks after the server did
// (or first). A client that pipelines its statements and then waits for
// the answers is one round trip, however many statements it sent. It
// listens on a free loopback port and stops when the test ends.
type RoundTripCounter struct {
	// Addr is where it listens (127.0.0.1:port).
	Addr string
	n    atomic.Int64
	ln   net.Listener
	wg   sync.WaitGroup
}

// StartRoundTripCounter starts a counter in front of upstream (host:port).
func StartRoundTripCounter(t testing.TB, upstream string) *RoundTripCounter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &RoundTripCounter{Addr: ln.Addr().String(), ln: ln}
	var mu sync.Mutex
	var open []net.Conn
	c.wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", upstream)
			if err != nil {
				_ = client.Close()
				continue
			}
			mu.Lock()
			open = append(open, client, server)
			mu.Unlock()
			c.relay(client, server)
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, conn := range open {
			_ = conn.Close()
		}
		mu.Unlock()
		c.wg.Wait()
	})
	return c
}

// RoundTrips is the number of round trips counted so far, on every
// connection.
func (c *RoundTripCounter) RoundTrips() int64 { return c.n.Load() }

// relay copies both ways; the client's first bytes after the server's
// (or its very first) start a round trip.
func (c *RoundTripCounter) relay(client, server net.Conn) {
	var serverSpoke atomic.Bool
	serverSpoke.Store(true)
	copyFrom := func(dst, src net.Conn, fromClient bool) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if fromClient && serverSpoke.Swap(false) {
					c.n.Add(1)
				}
				if !fromClient {
					serverSpoke.Store(true)
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					err = werr
				}
			}
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
					_ = src.Close()
				}
				_ = dst.Close()
				return
			}
		}
	}
	c.wg.Go(func() { copyFrom(server, client, true) })
	c.wg.Go(func() { copyFrom(client, server, false) })
}

// CountedPool opens a pool of one connection to pool's database through a
// RoundTripCounter, which it returns: every round trip of whoever works on
// the pool is counted, in order, on that one connection. Both stop when
// the test ends.
func CountedPool(t testing.TB, pool *pgxpool.Pool) (*pgxpool.Pool, *RoundTripCounter) {
	t.Helper()
	counter := StartRoundTripCounter(t, Upstream(t, pool.Config().ConnString()))
	u, err := url.Parse(pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	u.Host = counter.Addr
	counted, err := postgres.Open(context.Background(), u.String(), postgres.PoolConfig{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(counted.Close)
	return counted, counter
}
