package httpapi

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxConnections is the default of app.Tuning.MaxConnections:
// a bound on memory, not the means of shedding. Admission sheds past
// capacity; the connections of the requests being shed come and go within
// AdmissionWait. The limit is reached only when even shedding cannot keep
// up, and then the queue moves into the kernel, whose order is first come,
// first served: at 1024, on two cores shared with the load generator, the
// answers came after seconds instead of milliseconds (run 4 of
// docs/log/2026-12-01-reliability.md). 4096, the kernel's usual accept queue, holds a
// process to some tens of KiB each, about 150 MiB.
const DefaultMaxConnections = 4096

// ConnLimiter bounds the connections the server holds open at once.
// Admission bounds the requests being worked on; it cannot bound what comes
// before it, and a client offering more than the service can shed opens a
// connection (a goroutine and its buffers) per waiting request. Past the
// limit the listener stops accepting: new connections wait in the kernel's
// accept queue, which costs the process nothing, and are accepted as others
// close.
//
// Idle keep-alive connections count, so a limit alone would let idle
// clients hold every slot. At the limit the listener therefore first closes
// the connection idle the longest, as nginx reuses its idle keep-alive
// connections when it runs out (http.Server reports the states through
// ConnState). A client that sends a request on it just then sees the
// connection closed before any answer: Go's http.Transport, like other
// clients, retries such a request when it carries an Idempotency-Key, and
// a retry under the same key is safe by construction here.
//
// A ConnLimiter serves one listener with one accept loop, as http.Server
// runs it.
type ConnLimiter struct {
	limit     int
	mu        sync.Mutex
	open      int
	idle      map[*limitedConn]time.Time // idle keep-alive connections, since when
	waiting   bool                       // an accepted connection waits for a slot
	freed     chan struct{}              // a slot was freed, or a connection went idle (capacity 1)
	reclaimed atomic.Int64
}

// NewConnLimiter holds at most limit connections open at once (at least 1).
func NewConnLimiter(limit int) *ConnLimiter {
	return &ConnLimiter{limit: max(limit, 1), idle: make(map[*limitedConn]time.Time), freed: make(chan struct{}, 1)}
}

// Limit is the number of connections held open at most.
func (l *ConnLimiter) Limit() int { return l.limit }

// Open is the number of connections open now.
func (l *ConnLimiter) Open() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int64(l.open)
}

// Reclaimed is the number of idle connections closed to make room.
func (l *ConnLimiter) Reclaimed() int64 { return l.reclaimed.Load() }

// Listener wraps inner: while limit connections are open, its Accept holds
// the connection it accepted until a slot frees, and accepts no other.
// Closing it ends a waiting Accept with net.ErrClosed.
func (l *ConnLimiter) Listener(inner net.Listener) net.Listener {
	return &limitListener{Listener: inner, l: l, done: make(chan struct{})}
}

// ConnState is the http.Server hook that tells the limiter which
// connections are idle (http.Server.ConnState).
func (l *ConnLimiter) ConnState(c net.Conn, state http.ConnState) {
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if lc.closed {
		return
	}
	if state == http.StateIdle {
		l.idle[lc] = time.Now()
		if l.waiting { // a new connection waits: this one can make room
			l.signal()
		}
		return
	}
	delete(l.idle, lc)
}

// acquire takes a slot for an accepted connection, closing the longest
// idle connection when none is free, and otherwise waits until one frees or
// a connection goes idle, or until done. Only the accept loop calls it.
func (l *ConnLimiter) acquire(done <-chan struct{}) error {
	for {
		l.mu.Lock()
		if l.open < l.limit {
			l.open++
			l.waiting = false
			l.mu.Unlock()
			return nil
		}
		var victim *limitedConn
		var since time.Time
		for c, t := range l.idle {
			if victim == nil || t.Before(since) {
				victim, since = c, t
			}
		}
		if victim != nil {
			delete(l.idle, victim)
		}
		l.waiting = victim == nil
		l.mu.Unlock()
		if victim != nil {
			l.reclaimed.Add(1)
			_ = victim.Close() // frees its slot: take it on the next turn
			continue
		}
		select {
		case <-l.freed:
		case <-done:
			return net.ErrClosed
		}
	}
}

func (l *ConnLimiter) release(c *limitedConn) {
	l.mu.Lock()
	c.closed = true
	delete(l.idle, c)
	l.open--
	l.mu.Unlock()
	l.signal()
}

func (l *ConnLimiter) signal() {
	select {
	case l.freed <- struct{}{}:
	default:
	}
}

type limitListener struct {
	net.Listener
	l         *ConnLimiter
	done      chan struct{}
	closeOnce sync.Once
}

func (ln *limitListener) Accept() (net.Conn, error) {
	c, err := ln.Listener.Accept()
	if err != nil {
		return nil, err
	}
	// Accepted first, so that an idle connection is reclaimed only for a
	// client that is really there; the one accepted connection waits here,
	// unread and without a goroutine of its own, until a slot frees.
	if err := ln.l.acquire(ln.done); err != nil {
		_ = c.Close()
		return nil, err
	}
	return &limitedConn{Conn: c, l: ln.l}, nil
}

func (ln *limitListener) Close() error {
	err := ln.Listener.Close()
	ln.closeOnce.Do(func() { close(ln.done) })
	return err
}

// limitedConn frees its slot when closed, once, whoever closes it first
// (the server, or the limiter reclaiming it while idle).
type limitedConn struct {
	net.Conn
	l      *ConnLimiter
	once   sync.Once
	closed bool // under l.mu
}

// CloseWrite half-closes a TCP connection. net/http does it before closing
// a connection whose request it refused unread (a header too large, a bad
// request line), so that the client reads the answer instead of a reset;
// it looks for the method on the connection it accepted, which is this
// wrapper.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c) })
	return err
}
