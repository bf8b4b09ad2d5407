package app_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/testkit"
)

// attack is a number of connections that each hold a request unfinished,
// reconnecting whenever the server answers or closes, until stop: what a
// slow client does to take the service from others. Every connection sends
// head at once and then one byte of the rest every trickle (never, when
// trickle is 0), and the rest never ends.
type attack struct {
	ready    atomic.Int64 // connections that sent their first bytes at least once
	answered sync.Map     // status -> *atomic.Int64, of the answers the server gave
	stop     context.CancelFunc
	wg       sync.WaitGroup
}

// startAttack starts n connections to addr; the test's cleanup stops them
// before the service stops.
func startAttack(t *testing.T, addr string, n int, head string, trickle time.Duration) *attack {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	a := &attack{stop: stop}
	for range n {
		a.wg.Go(func() {
			first := true
			for ctx.Err() == nil {
				a.once(ctx, addr, head, trickle, &first)
			}
		})
	}
	t.Cleanup(a.end)
	return a
}

func (a *attack) end() {
	a.stop()
	a.wg.Wait()
}

// once runs one connection until the server answers or closes it, or ctx
// ends.
func (a *attack) once(ctx context.Context, addr, head string, trickle time.Duration, first *bool) {
	conn, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(head)); err != nil {
		return
	}
	if *first {
		*first = false
		a.ready.Add(1)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return // closed without an answer
		}
		res.Body.Close()
		n, _ := a.answered.LoadOrStore(res.StatusCode, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}()
	var tick <-chan time.Time
	if trickle > 0 {
		t := time.NewTicker(trickle)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			_ = conn.Close()
			<-done
			return
		case <-done:
			return
		case <-tick:
			if _, err := conn.Write([]byte("x")); err != nil {
				_ = conn.Close()
				<-done
				return
			}
		}
	}
}

// answers is how many answers of status the attack got.
func (a *attack) answers(status int) int64 {
	if n, ok := a.answered.Load(status); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}

// slowBody is the head of a request to path whose body (300 bytes, by its
// Content-Length) has not come yet.
func slowBody(path, apiKey string) string {
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: oncepay\r\nContent-Type: application/json\r\nContent-Length: 300\r\n", path)
	if apiKey != "" {
		head += "Authorization: Bearer " + apiKey + "\r\nIdempotency-Key: slow-" + fmt.Sprint(time.Now().UnixNano()) + "\r\n"
	}
	return head + "\r\n{"
}

// wellBehaved creates n orders as acme, one after the other and spread
// over span (one started each span/n at most), each on its own deadline,
// and returns how many were created.
func wellBehaved(t *testing.T, b *testBundle, prefix string, n int, span time.Duration) (created int) {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 3 * time.Second}
	pace := time.NewTicker(span / time.Duration(n))
	defer pace.Stop()
	for i := range n {
		req, err := http.NewRequest(http.MethodPost, b.baseURL+"/v1/orders", strings.NewReader(orderBody))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+acme)
		req.Header.Set("Idempotency-Key", fmt.Sprintf("%s-%d", prefix, i))
		req.Header.Set("Content-Type", "application/json")
		t0 := time.Now()
		res, err := hc.Do(req)
		if err != nil {
			t.Logf("order %d: %v after %s", i, err, time.Since(t0))
		} else {
			_, _ = io.Copy(io.Discard, res.Body) // read to the end, so the connection is kept
			res.Body.Close()
			if res.StatusCode == http.StatusCreated {
				created++
			} else {
				t.Logf("order %d: %d after %s", i, res.StatusCode, time.Since(t0))
			}
		}
		<-pace.C
	}
	return created
}

// Slow request bodies take no admission slot: 45 connections trickling a
// body at a byte a second to /webhooks/psp, which needs no key, and 45 more
// to /v1/orders with globex's key, all at once, leave the slots free: the
// provider's deliveries are received and acme's orders created meanwhile as
// if they were not there. The slow bodies are answered 408 once
// BodyReadTimeout has passed, well before ReadTimeout.
func TestSlowBodiesTakeNoSlotFromOthers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	webhooks := startAttack(t, b.addr, 45, slowBody("/webhooks/psp", ""), time.Second)
	tenant := startAttack(t, b.addr, 45, slowBody("/v1/orders", globex), time.Second)
	testkit.WaitFor(t, 10*time.Second, "90 slow bodies started", func() bool {
		return webhooks.ready.Load() == 45 && tenant.ready.Load() == 45
	})

	// The provider's own deliveries are received meanwhile.
	for i := range 5 {
		id := fmt.Sprintf("msg_slow_%d", i)
		delivery := fmt.Sprintf(`{"id":"evt_slow_%d","type":"charge.succeeded","created":1767225600,"data":{"object":{"id":"ch_slow_%d","amount":100,"currency":"EUR","status":"succeeded","failure_code":null,"amount_refunded":0,"metadata":{"reference":"01a22931-c9da-71c4-a494-fc128972f4cb"}}}}`, i, i)
		if r := b.webhook(t, id, delivery, true); r.status != http.StatusOK {
			t.Errorf("the provider's delivery %s beside 45 slow bodies = %d %s, want 200", id, r.status, r.body)
		}
	}
	if created := wellBehaved(t, b, "h1", 20, 1500*time.Millisecond); created < 19 {
		t.Errorf("acme created %d of 20 orders beside 90 slow bodies, want at least 95%%", created)
	}
	testkit.WaitFor(t, 10*time.Second, "the slow bodies answered 408 after BodyReadTimeout (2s), before ReadTimeout (15s)", func() bool {
		return webhooks.answers(http.StatusRequestTimeout) > 0 && tenant.answers(http.StatusRequestTimeout) > 0
	})
}

// Connections that never finish their headers do not hold the connection
// slots: 24 of them against MaxConnections 8, reconnecting whenever they
// are closed, still leave acme's orders created, each in far less than the
// 5 seconds a header may take.
func TestHeaderlessConnectionsAreReclaimed(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *app.Config) {
		c.Tuning.MaxConnections = 8
		c.Tuning.MaxInFlight = 4
		c.Tuning.WebhookMaxInFlight = 2
		c.Tuning.ReclaimAfter = 200 * time.Millisecond
	})
	headerless := startAttack(t, b.addr, 24, "POST /v1/orders HTTP/1.1\r\nHost: oncepay\r\n", 0)
	testkit.WaitFor(t, 10*time.Second, "24 header-less connections open", func() bool { return headerless.ready.Load() == 24 })

	if created := wellBehaved(t, b, "m1", 20, time.Second); created < 19 {
		t.Errorf("acme created %d of 20 orders beside 24 header-less connections at MaxConnections 8, want at least 95%%", created)
	}
}
