package httpapi

import (
	"container/list"
	"context"
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

// DefaultReclaimAfter is the default of app.Tuning.ReclaimAfter: how long
// a connection may wait for its client before it can be closed to make room
// at the limit. Long enough for a client's request to arrive once its
// connection is accepted (the client sends it right after the handshake:
// within a round trip, a few hundred milliseconds on the slowest links);
// short enough that at a limit of 100 the slots of silent clients turn over
// 200 times a second, so that a client queued behind 300 of them waits
// about 1.5 s, where the server's header timeout alone made it 15 s.
const DefaultReclaimAfter = 500 * time.Millisecond

// ConnLimiter bounds the connections the server holds open at once.
// Admission bounds the requests being worked on; it cannot bound what comes
// before it, and a client offering more than the service can shed opens a
// connection (a goroutine and its buffers) per waiting request. Past the
// limit the listener stops accepting: new connections wait in the kernel's
// accept queue, which costs the process nothing, and are accepted as others
// close.
//
// A connection can hold its slot while the service has nothing to do for
// it: open without the headers of its first request, with a request whose
// body has not come (Admission reads it before the request takes a slot),
// or idle between keep-alive requests. A limit alone would let such clients
// hold every slot, and a client that never sends anything costs nothing to
// keep open. At the limit the listener therefore closes a connection that
// has waited reclaimAfter or longer for its client, as nginx reuses its
// idle keep-alive connections when it runs out: the one that has waited
// longest for a request it has not finished (its headers or its body), or,
// when there is none, the one idle the longest, whose client finished a
// request on it and so has shown itself to be one. A connection younger than
// reclaimAfter keeps its slot, so that a client whose request is on its way
// is not cut off, and the new one waits for it. http.Server reports the
// states through ConnState, and a handler that waits for a body says so
// through the context ConnContext gives it.
//
// The reclaims are paced, evenly and at most limit per reclaimAfter and
// maxReclaimRate a second: connections that came together ripen together,
// and thousands closed and replaced at once would stall the requests being
// worked on for as long as the burst lasts. A client queued behind n
// silent connections past the limit therefore waits about n/limit times
// reclaimAfter, or n/maxReclaimRate seconds, whichever is longer; a client
// already connected keeps its connection.
//
// A client whose idle connection is closed just as it sends a request on
// it sees the connection closed before any answer: Go's http.Transport,
// like other clients, retries such a request when it carries an
// Idempotency-Key, and a retry under the same key is safe by construction
// here. A client whose request had not come whole gets no answer; it was
// slower than reclaimAfter while others waited.
//
// A ConnLimiter serves one listener with one accept loop, as http.Server
// runs it.
type ConnLimiter struct {
	limit        int
	reclaimAfter time.Duration
	mu           sync.Mutex
	open         int
	// unfinished and idle hold the connections waiting for their client,
	// each in the order they began to wait, the longest waiting first: for
	// a request they have not finished, or idle between requests. A
	// connection is taken off or put at the back at each change of its
	// state, and the accept loop looks at the fronts only.
	unfinished, idle list.List // of *limitedConn
	accepting        bool      // an accepted connection waits for a slot
	// allowance paces the reclaims (pace): the reclaims allowed at the
	// time allowed.
	allowance float64
	allowed   time.Time
	freed     chan struct{} // a slot was freed, or a connection began to wait (capacity 1)
	reclaimed atomic.Int64
}

// NewConnLimiter holds at most limit connections open at once (at least
// 1), and at the limit closes a connection that has waited reclaimAfter or
// longer for its client (0: any that waits, at once).
func NewConnLimiter(limit int, reclaimAfter time.Duration) *ConnLimiter {
	return &ConnLimiter{limit: max(limit, 1), reclaimAfter: max(reclaimAfter, 0), freed: make(chan struct{}, 1)}
}

// Limit is the number of connections held open at most.
func (l *ConnLimiter) Limit() int { return l.limit }

// Open is the number of connections open now.
func (l *ConnLimiter) Open() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int64(l.open)
}

// Reclaimed is the number of connections closed while they waited for
// their client, to make room for a new one.
func (l *ConnLimiter) Reclaimed() int64 { return l.reclaimed.Load() }

// Listener wraps inner: while limit connections are open, its Accept holds
// the connection it accepted until a slot frees, and accepts no other.
// Closing it ends a waiting Accept with net.ErrClosed.
func (l *ConnLimiter) Listener(inner net.Listener) net.Listener {
	return &limitListener{Listener: inner, l: l, done: make(chan struct{})}
}

// ConnState is the http.Server hook that tells the limiter which
// connections wait for their client (http.Server.ConnState): a new one
// until the headers of its first request are in, an idle one until those of
// its next request are.
func (l *ConnLimiter) ConnState(c net.Conn, state http.ConnState) {
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	switch state {
	case http.StateNew:
		l.await(lc, &l.unfinished)
	case http.StateIdle:
		l.await(lc, &l.idle)
	default:
		l.await(lc, nil)
	}
}

// connKey is the context key of a request's *limitedConn.
type connKey struct{}

// ConnContext is the http.Server hook that lets a request's handler tell
// the limiter its connection waits for the request's body
// (http.Server.ConnContext).
func (l *ConnLimiter) ConnContext(ctx context.Context, c net.Conn) context.Context {
	if lc, ok := c.(*limitedConn); ok && lc.l == l {
		return context.WithValue(ctx, connKey{}, lc)
	}
	return ctx
}

// awaitingBody tells the limiter of the request's connection, if it has
// one, that the connection waits for the request's body (waiting) or no
// longer does.
func awaitingBody(ctx context.Context, waiting bool) {
	lc, ok := ctx.Value(connKey{}).(*limitedConn)
	if !ok {
		return
	}
	if waiting {
		lc.l.await(lc, &lc.l.unfinished)
	} else {
		lc.l.await(lc, nil)
	}
}

// await records that lc waits for its client from now on, at the back of
// queue (l.unfinished or l.idle), or that it does not (nil).
func (l *ConnLimiter) await(lc *limitedConn, queue *list.List) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lc.closed {
		return
	}
	l.stopWaiting(lc)
	if queue == nil {
		return
	}
	lc.since, lc.queue = time.Now(), queue
	lc.wait = queue.PushBack(lc)
	if l.accepting { // a new connection waits: this one may make room in time
		l.signal()
	}
}

// acquire takes a slot for an accepted connection. When none is free, it
// closes a connection that has waited long enough for its client (at the
// pace of the reclaims); otherwise it waits until a slot frees, a
// connection begins to wait, one has waited long enough, or done. Only the
// accept loop calls it.
func (l *ConnLimiter) acquire(done <-chan struct{}) error {
	for {
		l.mu.Lock()
		if l.open < l.limit {
			l.open++
			l.accepting = false
			l.mu.Unlock()
			return nil
		}
		now := time.Now()
		var victim *limitedConn
		ripe := l.pace(now)
		if ripe <= 0 {
			victim, ripe = l.ripest(now)
		}
		l.accepting = victim == nil
		if victim != nil {
			l.allowance--
		}
		l.mu.Unlock()
		if victim != nil {
			l.reclaimed.Add(1)
			_ = victim.Close() // frees its slot: take it on the next turn
			continue
		}
		var timer *time.Timer
		var expired <-chan time.Time
		if ripe > 0 {
			timer = time.NewTimer(ripe)
			expired = timer.C
		}
		select {
		case <-l.freed:
		case <-expired:
		case <-done:
			stopTimer(timer)
			return net.ErrClosed
		}
		stopTimer(timer)
	}
}

// maxReclaimRate bounds the reclaims per second, whatever the limit: each
// costs the process an accept, a close and a goroutine, and the kernel a
// connection set up and torn down, and net/http leaves some 8 KiB of
// buffers to collect. 3,900 a second, the pace of the default limit over
// one second, took a sixth of the API's one CPU and stretched the p99 of the
// requests being worked on tenfold (docs/log/2026-12-04-reliability.md); at
// 1,000 a client queued behind 400 silent connections waits 0.4 s.
const maxReclaimRate = 1000

// reclaimBurst is how many reclaims the pace allows at once, in time at
// its rate: enough that the accept loop does not sleep between two (a
// timer's wake-up is coarser than a millisecond on a busy machine), few
// enough that the requests being worked on do not wait behind them.
const reclaimBurst = 50 * time.Millisecond

// pace accrues the reclaims allowed since the last call, at limit per
// reclaimAfter but at most maxReclaimRate a second, and returns how long
// until one is allowed (0: now). l.mu must be held.
func (l *ConnLimiter) pace(now time.Time) time.Duration {
	rate := float64(maxReclaimRate)
	if l.reclaimAfter > 0 {
		rate = min(float64(l.limit)/l.reclaimAfter.Seconds(), rate)
	}
	burst := max(rate*reclaimBurst.Seconds(), 1)
	if l.allowed.IsZero() {
		l.allowance = burst
	} else {
		l.allowance = min(l.allowance+now.Sub(l.allowed).Seconds()*rate, burst)
	}
	l.allowed = now
	if l.allowance >= 1 {
		return 0
	}
	return time.Duration((1 - l.allowance) / rate * float64(time.Second))
}

// ripest takes the connection to reclaim out of its queue: the front of
// l.unfinished when it has waited reclaimAfter or longer, or, when no
// connection waits with a request unfinished, the front of l.idle when it
// has. Otherwise it returns how long until that one will have (0: none
// waits). While some connections hold a request unfinished, idle ones are
// left alone: their clients finished a request, and one of them would
// otherwise lose a connection it is about to use whenever the unfinished
// ones happen to be younger. l.mu must be held.
func (l *ConnLimiter) ripest(now time.Time) (*limitedConn, time.Duration) {
	front := l.unfinished.Front()
	if front == nil {
		front = l.idle.Front()
	}
	if front == nil {
		return nil, 0
	}
	c := front.Value.(*limitedConn)
	if ripe := c.since.Add(l.reclaimAfter).Sub(now); ripe > 0 {
		return nil, ripe
	}
	l.stopWaiting(c)
	return c, 0
}

// stopWaiting takes c out of its queue, if it is in one. l.mu must be
// held.
func (l *ConnLimiter) stopWaiting(c *limitedConn) {
	if c.wait != nil {
		c.queue.Remove(c.wait)
		c.wait, c.queue = nil, nil
	}
}

func stopTimer(t *time.Timer) {
	if t != nil {
		t.Stop()
	}
}

func (l *ConnLimiter) release(c *limitedConn) {
	l.mu.Lock()
	c.closed = true
	l.stopWaiting(c)
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
// (the server, or the limiter reclaiming it while it waits for its client).
type limitedConn struct {
	net.Conn
	l    *ConnLimiter
	once sync.Once
	// Under l.mu: closed once released; while it waits for its client,
	// queue is the list it waits in, wait its place there, since when.
	closed bool
	queue  *list.List
	wait   *list.Element
	since  time.Time
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
