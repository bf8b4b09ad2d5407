package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// The attack phase offers a steady, well-behaved load twice: alone, then
// beside slow clients that try to take the service from it, as a probe
// found they could (docs/OVERLOAD.md):
//
//   - slowBodies connections to POST /webhooks/psp, which needs no key, and
//     as many to POST /v1/orders with another tenant's key, each sending its
//     headers and then its body (a few hundred bytes, by its Content-Length)
//     at one byte a second;
//   - --attack-headerless connections (default 400, the probe's) that send
//     part of a request line and then nothing; at the default connection
//     limit (oncepay_http_connections_limit, 4,096) they stay below it, as
//     the probe's did, and a negative count takes them that far past the
//     limit, where the service reclaims them to make room (the same at a
//     small limit is internal/app TestHeaderlessConnectionsAreReclaimed).
//
// Each reconnects as soon as the server answers or closes it, for as long
// as the phase lasts. The well-behaved client must keep its answers and its
// latency: at least minAttackSuccess of its requests answered 201, and a
// p99 at most maxAttackSlowdown times that of the same load alone. The
// attack runs on loopback only: it is a test of this machine's service, not
// a tool to point elsewhere.
const (
	slowBodies        = 45
	slowBodyBytes     = 300
	minAttackSuccess  = 0.95
	maxAttackSlowdown = 2.0
)

// attackers is one kind of slow client, n connections at once.
type attackers struct {
	name     string
	n        int
	head     string        // sent at once on every connection
	trickle  time.Duration // then one byte each trickle (0: nothing more)
	opened   atomic.Int64  // connections opened
	ready    atomic.Int64  // of the n, those that sent their head at least once
	answered sync.Map      // status -> *atomic.Int64
	closed   atomic.Int64  // connections the server closed without an answer
}

// run keeps a.n connections to addr open until ctx ends, each reopened as
// soon as the server answers or closes it.
func (a *attackers) run(ctx context.Context, addr string) *sync.WaitGroup {
	var wg sync.WaitGroup
	for range a.n {
		wg.Go(func() {
			first := true
			for ctx.Err() == nil {
				if !a.once(ctx, addr) {
					continue
				}
				if first {
					first = false
					a.ready.Add(1)
				}
			}
		})
	}
	return &wg
}

// once runs one connection until the server answers or closes it, or ctx
// ends; it reports whether it sent its head.
func (a *attackers) once(ctx context.Context, addr string) bool {
	conn, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", addr)
	if err != nil {
		if ctx.Err() == nil {
			// Refused or timed out: the kernel's queue is full. Try again
			// after a moment rather than spin.
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
		return false
	}
	defer conn.Close()
	a.opened.Add(1)
	if _, err := io.WriteString(conn, a.head); err != nil {
		return false
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			if ctx.Err() == nil {
				a.closed.Add(1)
			}
			return
		}
		res.Body.Close()
		n, _ := a.answered.LoadOrStore(res.StatusCode, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}()
	var tick <-chan time.Time
	if a.trickle > 0 {
		t := time.NewTicker(a.trickle)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			_ = conn.Close()
			<-done
			return true
		case <-done:
			return true
		case <-tick:
			if _, err := io.WriteString(conn, "x"); err != nil {
				_ = conn.Close()
				<-done
				return true
			}
		}
	}
}

// summary is one line of what a kind of attacker met.
func (a *attackers) summary() string {
	s := fmt.Sprintf("%s: %d connections at once, %d opened in all, %d closed by the server without an answer", a.name, a.n, a.opened.Load(), a.closed.Load())
	a.answered.Range(func(status, n any) bool {
		s += fmt.Sprintf(", %d answered %d", n.(*atomic.Int64).Load(), status.(int))
		return true
	})
	return s
}

// slowBodyHead is the head of a request to path whose body, slowBodyBytes
// long by its Content-Length, has not come yet: its first byte.
func slowBodyHead(path, apiKey string) string {
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: oncepay\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", path, slowBodyBytes)
	if apiKey != "" {
		head += "Authorization: Bearer " + apiKey + "\r\nIdempotency-Key: slow-attacker\r\n"
	}
	return head + "\r\n{"
}

// loopbackHost returns the host:port of base when it is a loopback
// address, and an error otherwise.
func loopbackHost(base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", fmt.Errorf("--attack runs against a loopback API only, not %s", host)
	}
	port := u.Port()
	if port == "" {
		port = "80"
	}
	return net.JoinHostPort(host, port), nil
}

// runAttack offers rate well-behaved creates for d alone, then for d again
// beside the attackers, and returns both phases and the attackers.
func runAttack(ctx context.Context, cfg config, api *apiClient, rate float64, probe cpuProbe, stdout io.Writer) (alone, attacked openLoopResult, kinds []*attackers, err error) {
	addr, err := loopbackHost(cfg.api)
	if err != nil {
		return alone, attacked, nil, err
	}
	before, err := scrapeAPI(ctx, api.http, cfg.api)
	if err != nil {
		return alone, attacked, nil, fmt.Errorf("attack: read the connection limit: %w", err)
	}
	cpu := probe.sample()
	alone = runOpenLoop(ctx, api, cfg.api, openLoopConfig{name: "without the attacker", rate: rate, duration: cfg.attack, window: time.Second})
	alone.cpu = probe.sample().sub(cpu)
	if ctx.Err() != nil {
		return alone, attacked, nil, ctx.Err()
	}
	for _, k := range []struct{ name, path, key string }{
		{"slow bodies to /webhooks/psp", "/webhooks/psp", ""},
		{"slow bodies to /v1/orders with another tenant's key", "/v1/orders", cfg.attackKey},
	} {
		kinds = append(kinds, &attackers{name: k.name, n: slowBodies, head: slowBodyHead(k.path, k.key), trickle: time.Second})
	}
	headerless := cfg.attackHeaderless
	if headerless < 0 {
		headerless = int(before.connsLimit) - headerless
	}
	kinds = append(kinds, &attackers{name: "connections without complete headers", n: headerless,
		head: "POST /v1/orders HTTP/1.1\r\nHost: oncepay\r\n"})

	attackCtx, stop := context.WithCancel(ctx)
	var running []*sync.WaitGroup
	for _, k := range kinds {
		running = append(running, k.run(attackCtx, addr))
	}
	defer func() {
		stop()
		for _, wg := range running {
			wg.Wait()
		}
	}()
	// The attackers are in place when each has sent its head once: the
	// kernel completes a connection the service does not accept yet.
	settle := time.NewTimer(30 * time.Second)
	defer settle.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for placed := false; !placed; {
		placed = true
		for _, k := range kinds {
			placed = placed && k.ready.Load() == int64(k.n)
		}
		select {
		case <-ctx.Done():
			return alone, attacked, kinds, ctx.Err()
		case <-settle.C:
			fmt.Fprintln(stdout, "attack: not every attacker in place within 30s; measuring with those that are")
			placed = true
		case <-tick.C:
		}
	}
	cpu = probe.sample()
	attacked = runOpenLoop(ctx, api, cfg.api, openLoopConfig{name: "beside the attacker", rate: rate, duration: cfg.attack, window: time.Second})
	attacked.cpu = probe.sample().sub(cpu)
	return alone, attacked, kinds, ctx.Err()
}

// attackTargets judges the well-behaved client under attack against the
// same load alone.
func attackTargets(alone, attacked openLoopResult) []target {
	st := attacked.byStatus()
	a, b := percentile(alone.latencies(answered), 99), percentile(attacked.latencies(answered), 99)
	return []target{
		{name: "well-behaved requests answered 201 beside the attacker", got: float64(st[http.StatusCreated]) / float64(max(len(attacked.attempts), 1)),
			want: minAttackSuccess, atLeast: true, detail: fmt.Sprintf("%d of %d", st[http.StatusCreated], len(attacked.attempts))},
		{name: "well-behaved p99 latency, beside the attacker / without", got: ratio(float64(b), float64(a)), want: maxAttackSlowdown, unit: "x",
			detail: fmt.Sprintf("%s vs %s", ms(b), ms(a))},
	}
}
