package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// maxProxyBody bounds a request or answer the proxy buffers; the API's are
// a few kilobytes.
const maxProxyBody = 4 << 20

// Proxy sits between the clients and the API processes: a load balancer
// that injects the faults of the plan. Each POST with an Idempotency-Key is
// counted per key, and the plan says what happens to that attempt: pass,
// drop (forward, let the API commit and answer, then reset the client's
// connection instead of relaying the answer) or reset (reset the client's
// connection before anything is forwarded).
//
// Requests go to the backends in turn. A backend that refuses the
// connection (killed, restarting) is skipped, so the request goes to the
// other; one that dies mid-request is answered 502, as a real load balancer
// would; with no backend at all the answer is 503 with Retry-After.
type Proxy struct {
	plan     *Plan
	srv      *http.Server
	ln       net.Listener
	upstream *http.Transport
	// faulty turns the plan's faults on; off for the settle phase.
	faulty atomic.Bool
	next   atomic.Uint64

	mu       sync.Mutex
	backends []string
	attempts map[string]int

	dropped, reset, cut, noBackend, requests atomic.Int64
}

// StartProxy listens on a free loopback port and serves until Close.
func StartProxy(plan *Plan, backends []string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy: listen: %w", err)
	}
	p := &Proxy{
		plan:     plan,
		ln:       ln,
		backends: backends,
		attempts: map[string]int{},
		upstream: &http.Transport{
			DialContext:           (&net.Dialer{Timeout: time.Second}).DialContext,
			MaxIdleConns:          256,
			MaxIdleConnsPerHost:   128,
			IdleConnTimeout:       30 * time.Second,
			ResponseHeaderTimeout: 60 * time.Second,
			DisableCompression:    true,
		},
	}
	p.faulty.Store(true)
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       60 * time.Second,
	}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// URL is the base URL clients use.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// SetFaulty turns fault injection on or off.
func (p *Proxy) SetFaulty(on bool) { p.faulty.Store(on) }

// Close stops the proxy and its upstream connections.
func (p *Proxy) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil {
		_ = p.srv.Close()
	}
	p.upstream.CloseIdleConnections()
}

// ProxyStats counts what the proxy did.
type ProxyStats struct {
	Requests, Dropped, Reset, Cut, NoBackend int64
}

// Stats returns the counters.
func (p *Proxy) Stats() ProxyStats {
	return ProxyStats{Requests: p.requests.Load(), Dropped: p.dropped.Load(), Reset: p.reset.Load(), Cut: p.cut.Load(), NoBackend: p.noBackend.Load()}
}

// fault counts the attempt and returns the plan's fault for it.
func (p *Proxy) fault(r *http.Request) ProxyFault {
	key := r.Header.Get("Idempotency-Key")
	if r.Method != http.MethodPost || key == "" {
		return ProxyPass
	}
	p.mu.Lock()
	n := p.attempts[key]
	p.attempts[key] = n + 1
	p.mu.Unlock()
	if !p.faulty.Load() {
		return ProxyPass
	}
	return p.plan.proxyFault(key, n)
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	fault := p.fault(r)
	if fault == ProxyReset {
		p.reset.Add(1)
		abort(w)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxProxyBody))
	if err != nil {
		abort(w) // the client went away mid-request
		return
	}
	res, err := p.forward(r, body)
	if err != nil {
		var nb noBackendError
		if errors.As(err, &nb) {
			p.noBackend.Add(1)
			w.Header().Set("Retry-After", "1")
			http.Error(w, "no backend is up", http.StatusServiceUnavailable)
			return
		}
		p.cut.Add(1)
		http.Error(w, "upstream: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer res.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(res.Body, maxProxyBody))
	if err != nil {
		p.cut.Add(1)
		http.Error(w, "upstream answer: "+err.Error(), http.StatusBadGateway)
		return
	}
	if fault == ProxyDrop {
		// The API has answered: whatever it did is committed. The client
		// never hears of it.
		p.dropped.Add(1)
		abort(w)
		return
	}
	for k, vs := range res.Header {
		if k == "Connection" || k == "Keep-Alive" || k == "Transfer-Encoding" {
			continue
		}
		w.Header()[k] = vs
	}
	w.WriteHeader(res.StatusCode)
	_, _ = w.Write(answer)
}

// noBackendError says every backend refused the connection.
type noBackendError struct{ err error }

func (e noBackendError) Error() string { return "no backend: " + e.err.Error() }

// forward sends the request to the backends in turn until one accepts the
// connection.
func (p *Proxy) forward(r *http.Request, body []byte) (*http.Response, error) {
	p.mu.Lock()
	backends := append([]string(nil), p.backends...)
	p.mu.Unlock()
	start := int(p.next.Add(1))
	var last error
	for i := range backends {
		b := backends[(start+i)%len(backends)]
		out, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+b+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		out.Header = r.Header.Clone()
		out.Header.Del("Connection")
		// Not replayable: Go's transport would otherwise re-send a request
		// with an Idempotency-Key on its own when a backend dies under it.
		// Like a real load balancer, the proxy answers 502 instead and the
		// client decides.
		out.GetBody = nil
		res, err := p.upstream.RoundTrip(out)
		if err == nil {
			return res, nil
		}
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			last = err
			continue // never reached the backend: the next one may take it
		}
		return nil, err
	}
	return nil, noBackendError{last}
}

// abort resets the client's connection without a byte of answer.
func abort(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // RST instead of FIN
	}
	_ = conn.Close()
}
