package app_test

import (
	"context"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/broker"
	"github.com/oncepay/oncepay/internal/broker/brokertest"
	"github.com/oncepay/oncepay/internal/testkit"
)

// The network may fail: between the service and each of its dependencies
// (PostgreSQL, NATS, the payment provider) these tests put a real fault
// proxy (toxiproxy, testkit.FaultProxy) and apply added latency, a
// connection cut mid-stream, a peer that accepts and never answers, and a
// bandwidth-limited link. Each asserts a bounded outcome: the request
// answers within a stated bound (a 503 with a stable code, or success), the
// background workers carry on once the fault lifts, a shutdown finishes
// within its bound while the peer hangs, and nothing is charged twice.
// docs/TIMEOUTS.md lists them with their bounds.

// The dependencies a fault proxy can stand in front of.
const (
	viaPostgres = "postgres"
	viaNATS     = "nats"
	viaProvider = "provider"
)

// Short bounds, in the proportions of the defaults, so that every fault
// settles in seconds.
const (
	nfWriteTimeout    = 2 * time.Second
	nfPSPTimeout      = time.Second
	nfShutdownTimeout = 2 * time.Second
	// nfSlack is what a loaded machine (two shared cores, -race, the whole
	// module's tests in parallel) may add to a bound.
	nfSlack = 3 * time.Second
)

// faultyBundle is a running service with one dependency behind a fault
// proxy.
type faultyBundle struct {
	*testBundle
	proxy *testkit.FaultProxy
	// direct reaches the test's database without any proxy, for the
	// test's own reads.
	direct *pgxpool.Pool
	// stop cancels Serve and returns how long it took and its error.
	stop func() (time.Duration, error)
	// close calls App.Close and returns how long it took.
	close func() time.Duration
}

// startFaulty starts the service with dep reached through a fault proxy
// and the short bounds above.
func startFaulty(t *testing.T, dep string, opts ...func(*app.Config)) *faultyBundle {
	t.Helper()
	cfg := testConfig(t)
	cfg.Tuning.DBLockTimeout = time.Second
	cfg.WriteTimeout = nfWriteTimeout
	cfg.PSPTimeout = nfPSPTimeout
	cfg.IdempotencyLease = 2 * nfWriteTimeout
	cfg.Tuning.ShutdownTimeout = nfShutdownTimeout
	cfg.Tuning.WebhookWorkerInterval = 200 * time.Millisecond
	cfg.Tuning.RecovererInterval = 500 * time.Millisecond
	cfg.Tuning.OutboxPollInterval = 200 * time.Millisecond
	cfg.Tuning.OutboxPublishTimeout = time.Second
	cfg.Tuning.OutboxLease = 3 * time.Second
	cfg.Tuning.NATSPingInterval = 250 * time.Millisecond
	for _, o := range opts {
		o(&cfg)
	}

	directURL := cfg.DatabaseURL
	var proxy *testkit.FaultProxy
	switch dep {
	case viaPostgres:
		proxy = testkit.StartFaultProxy(t, testkit.Upstream(t, directURL))
		cfg.DatabaseURL = proxy.Through(t, directURL)
	case viaNATS:
		nb := brokertest.Start(t, broker.StreamsConfig{}) // stopped after the service
		proxy = testkit.StartFaultProxy(t, testkit.Upstream(t, nb.URL()))
		cfg.NATSURL = proxy.Through(t, nb.URL())
	}
	clock := testkit.NewClock()
	logger := testkit.Logger(t)
	sim, simURL := startSimulator(t, cfg, nil, logger, clock.Now)
	cfg.PSPURL = simURL
	if dep == viaProvider {
		proxy = testkit.StartFaultProxy(t, testkit.Upstream(t, simURL))
		cfg.PSPURL = proxy.Through(t, simURL)
	}
	direct, err := pgxpool.New(context.Background(), directURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(direct.Close)

	a, err := app.New(cfg, logger, clock.Now)
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := a.Start(ctx); err != nil {
		cancel()
		t.Fatalf("start: %v", err)
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: newOpenAPITransport(t, nil)}
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx) }()
	var (
		stopped bool
		closed  bool
	)
	fb := &faultyBundle{
		testBundle: &testBundle{app: a, psp: sim, pool: direct, baseURL: "http://" + a.Addr().String(), addr: a.Addr().String(), client: hc, clock: clock},
		proxy:      proxy,
		direct:     direct,
	}
	fb.stop = func() (time.Duration, error) {
		stopped = true
		hc.CloseIdleConnections()
		began := time.Now()
		cancel()
		err := <-done
		return time.Since(began), err
	}
	fb.close = func() time.Duration {
		closed = true
		began := time.Now()
		a.Close()
		return time.Since(began)
	}
	t.Cleanup(func() {
		proxy.Heal() // so that closing does not wait on a dead link
		if !stopped {
			if _, err := fb.stop(); err != nil {
				t.Errorf("serve: %v", err)
			}
		}
		if !closed {
			fb.close()
		}
	})
	if err := sim.SetWebhookURL(fb.baseURL + "/webhooks/psp"); err != nil {
		t.Fatalf("simulator webhook URL: %v", err)
	}
	return fb
}

// within sends one request and fails unless it is answered within bound.
func (b *faultyBundle) within(t *testing.T, bound time.Duration, method, path, key, body string) response {
	t.Helper()
	began := time.Now()
	r := b.do(t, method, path, acme, key, body)
	if took := time.Since(began); took > bound {
		t.Fatalf("%s %s answered %d after %s, want at most %s", method, path, r.status, took.Round(time.Millisecond), bound)
	}
	return r
}

// inFlight sends one request from another goroutine and returns once it
// was written to the service; the answer arrives on the channel.
func (b *faultyBundle) inFlight(t *testing.T, method, path, key, body string) <-chan testkit.Response {
	t.Helper()
	wrote := make(chan struct{})
	trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { close(wrote) }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), method, b.baseURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+acme)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	// A fresh connection: a request written on a kept-alive one that the
	// server closes as idle while stopping is sent again by the transport,
	// on a new connection the stopped server refuses (seen under load).
	b.client.CloseIdleConnections()
	answer := make(chan testkit.Response, 1)
	go func() {
		r, err := testkit.Send(b.client, req)
		if err != nil {
			r.Status = -1
			r.Body = []byte(err.Error())
		}
		answer <- r
	}()
	select {
	case <-wrote:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s %s not sent within 10 s", method, path)
	}
	return answer
}

// eventually repeats a request until it answers want (the client's retry
// once the fault lifted), at most for 20 s.
func (b *faultyBundle) eventually(t *testing.T, want int, method, path, key, body string) response {
	t.Helper()
	var r response
	testkit.WaitFor(t, 20*time.Second, method+" "+path+" to answer "+http.StatusText(want), func() bool {
		r = b.do(t, method, path, acme, key, body)
		return r.status == want
	})
	return r
}

// paymentStatus is the status of the order's payment ("" for none), read
// directly.
func (b *faultyBundle) paymentStatus(t *testing.T, orderID string) string {
	t.Helper()
	var status string
	err := b.direct.QueryRow(context.Background(), `SELECT coalesce(max(status), '') FROM payments WHERE order_id = $1`, orderID).Scan(&status)
	if err != nil {
		t.Fatal(err)
	}
	return status
}

// settles waits until the workers caught up: every receipt applied, every
// event published and consumed, and the order fulfilled.
func (b *faultyBundle) settles(t *testing.T, orderID string) {
	t.Helper()
	testkit.WaitFor(t, 20*time.Second, "the order to be fulfilled through the broker", func() bool {
		return b.count(t, `SELECT count(*) FROM orders WHERE id = $1 AND status = 'fulfilled'`, orderID) == 1
	})
	defer func() {
		if t.Failed() {
			rows, _ := b.direct.Query(context.Background(), `SELECT event_type, attempts, coalesce(last_error, ''), next_attempt_at::text, coalesce(locked_until::text, ''), now()::text FROM outbox_events WHERE published_at IS NULL`)
			for rows.Next() {
				var a, b2, c, d, e, f string
				var n int
				_ = rows.Scan(&a, &n, &c, &d, &e, &f)
				t.Logf("unpublished: %s attempts=%d error=%q next=%s locked=%s now=%s %s", a, n, c, d, e, f, b2)
			}
			rows.Close()
		}
	}()
	testkit.WaitFor(t, 20*time.Second, "every event published", func() bool {
		return b.count(t, `SELECT count(*) FROM outbox_events WHERE published_at IS NULL`) == 0
	})
	testkit.WaitFor(t, 20*time.Second, "every webhook applied", func() bool {
		return b.count(t, `SELECT count(*) FROM webhook_receipts WHERE processed_at IS NULL`) == 0
	})
}

// chargedOnce fails unless the provider charged the payment exactly once.
func (b *faultyBundle) chargedOnce(t *testing.T, payment response) {
	t.Helper()
	id, _ := payment.json(t)["id"].(string)
	if n := b.charges(t, id); n != 1 {
		t.Fatalf("payment %s charged %d times at the provider, want 1", id, n)
	}
	if n := len(b.psp.Ledger("").Charges); n != 1 {
		t.Fatalf("the provider made %d charges, want 1", n)
	}
}

func payBody(method string) string { return `{"payment_method":"` + method + `"}` }

// TestNetworkFaultsToPostgres puts the fault proxy between the service and
// its database.
func TestNetworkFaultsToPostgres(t *testing.T) {
	t.Parallel()
	answer := nfWriteTimeout + nfSlack

	t.Run("latency", func(t *testing.T) {
		t.Parallel()
		b := startFaulty(t, viaPostgres)
		b.proxy.Latency(t, 20)
		order := b.within(t, answer, "POST", "/v1/orders", "nf-pg-lat", orderBody)
		if order.status != http.StatusCreated {
			t.Fatalf("create order: %d %s", order.status, order.body)
		}
		orderID := order.json(t)["id"].(string)
		pay := b.within(t, answer, "POST", "/v1/orders/"+orderID+"/payments", "nf-pg-lat-pay", payBody("pm_card_ok"))
		if pay.status != http.StatusCreated {
			t.Fatalf("pay: %d %s", pay.status, pay.body)
		}
		b.settles(t, orderID)
		b.chargedOnce(t, pay)
	})

	t.Run("peer that never answers", func(t *testing.T) {
		t.Parallel()
		b := startFaulty(t, viaPostgres)
		orderID, _ := b.order(t, "nf-pg-hole-before")
		b.proxy.Blackhole(t)
		if r := b.within(t, time.Second, "GET", "/healthz", "", ""); r.status != http.StatusOK {
			t.Fatalf("/healthz while the database hangs: %d %s", r.status, r.body)
		}
		wantProblem(t, b.within(t, 2*time.Second+nfSlack, "GET", "/readyz", "", ""), http.StatusServiceUnavailable, "service_unavailable")
		wantProblem(t, b.within(t, answer, "GET", "/v1/orders/"+orderID, "", ""), http.StatusServiceUnavailable, "service_unavailable")
		wantProblem(t, b.within(t, answer, "POST", "/v1/orders", "nf-pg-hole", orderBody), http.StatusServiceUnavailable, "service_unavailable")
		wantProblem(t, b.within(t, answer, "POST", "/v1/orders/"+orderID+"/payments", "nf-pg-hole-pay", payBody("pm_card_ok")),
			http.StatusServiceUnavailable, "service_unavailable")
		// The webhook worker and the recoverer keep starting rounds while
		// the database hangs: none waits on its connection beyond its
		// bound. (Removing a blackhole closes the connections it held, so
		// a round stuck on one would come free when the fault lifts; real
		// partitions heal without closing anything.)
		rounds := func() int64 { s := b.app.Pool().Stat(); return s.AcquireCount() + s.CanceledAcquireCount() }
		before := rounds()
		testkit.WaitFor(t, 3*nfWriteTimeout+nfSlack, "the workers to start new rounds while the database hangs", func() bool {
			return rounds() >= before+4
		})

		b.proxy.Heal()
		b.eventually(t, http.StatusOK, "GET", "/readyz", "", "")
		b.eventually(t, http.StatusCreated, "POST", "/v1/orders", "nf-pg-hole", orderBody)
		pay := b.eventually(t, http.StatusCreated, "POST", "/v1/orders/"+orderID+"/payments", "nf-pg-hole-pay", payBody("pm_card_ok"))
		b.settles(t, orderID)
		b.chargedOnce(t, pay)
	})

	t.Run("connections cut mid-stream", func(t *testing.T) {
		t.Parallel()
		b := startFaulty(t, viaPostgres)
		orderID, _ := b.order(t, "nf-pg-cut-before")
		b.proxy.ResetPeer(t)
		wantProblem(t, b.within(t, answer, "GET", "/v1/orders/"+orderID, "", ""), http.StatusServiceUnavailable, "service_unavailable")
		wantProblem(t, b.within(t, answer, "POST", "/v1/orders/"+orderID+"/payments", "nf-pg-cut-pay", payBody("pm_card_ok")),
			http.StatusServiceUnavailable, "service_unavailable")
		b.proxy.Heal()
		b.proxy.LimitData(t, 2000) // every connection breaks after 2 kB of answers
		for range 3 {
			r := b.within(t, answer, "POST", "/v1/orders/"+orderID+"/payments", "nf-pg-cut-pay", payBody("pm_card_ok"))
			if r.status != http.StatusCreated && r.status != http.StatusServiceUnavailable && r.status != http.StatusConflict {
				t.Fatalf("pay while connections break: %d %s, want 201, 409 or 503", r.status, r.body)
			}
		}
		b.proxy.Heal()
		pay := b.eventually(t, http.StatusCreated, "POST", "/v1/orders/"+orderID+"/payments", "nf-pg-cut-pay", payBody("pm_card_ok"))
		b.settles(t, orderID)
		b.chargedOnce(t, pay)
	})

	t.Run("bandwidth-limited link", func(t *testing.T) {
		t.Parallel()
		b := startFaulty(t, viaPostgres)
		b.proxy.Bandwidth(t, 64)
		order := b.within(t, answer, "POST", "/v1/orders", "nf-pg-bw", orderBody)
		if order.status != http.StatusCreated {
			t.Fatalf("create order: %d %s", order.status, order.body)
		}
		orderID := order.json(t)["id"].(string)
		pay := b.within(t, answer, "POST", "/v1/orders/"+orderID+"/payments", "nf-pg-bw-pay", payBody("pm_card_ok"))
		if pay.status != http.StatusCreated {
			t.Fatalf("pay: %d %s", pay.status, pay.body)
		}
		b.settles(t, orderID)
		b.chargedOnce(t, pay)
	})

	t.Run("shutdown while the database hangs", func(t *testing.T) {
		t.Parallel()
		// The webhook worker and the recoverer wait long between rounds,
		// so that a connection held from the service's pool is the
		// request's; the dispatcher (on its own pool) polls and hangs.
		b := startFaulty(t, viaPostgres, func(c *app.Config) {
			c.Tuning.WebhookWorkerInterval = time.Hour
			c.Tuning.RecovererInterval = 0
		})
		orderID, _ := b.order(t, "nf-pg-shutdown")
		b.proxy.Blackhole(t)
		inFlight := b.inFlight(t, "GET", "/v1/orders/"+orderID, "", "")
		testkit.WaitFor(t, 5*time.Second, "the request to wait on the database", func() bool {
			return b.app.Pool().Stat().AcquiredConns() > 0
		})
		took, err := b.stop()
		if bound := 2*nfShutdownTimeout + nfSlack; took > bound {
			t.Fatalf("Serve returned %s after it was told to stop, want at most %s", took.Round(time.Millisecond), bound)
		}
		if err != nil {
			t.Logf("serve: %v", err)
		}
		testkit.WantProblem(t, <-inFlight, http.StatusServiceUnavailable, "service_unavailable")
		// Closing waits at most pgx's own 15 s for a connection cut
		// mid-statement to finish closing.
		if took, bound := b.close(), 15*time.Second+nfSlack; took > bound {
			t.Fatalf("Close took %s while the database hangs, want at most %s", took.Round(time.Millisecond), bound)
		}
	})
}

// TestNetworkFaultsToNATS puts the fault proxy between the service and its
// broker (NATS_URL). The broker is not on any request's path: requests
// answer as usual, and the outbox dispatcher and the fulfillment consumer
// carry on once the fault lifts.
func TestNetworkFaultsToNATS(t *testing.T) {
	t.Parallel()
	answer := nfWriteTimeout + nfSlack
	for _, tc := range []struct {
		name  string
		fault func(*testkit.FaultProxy, *testing.T)
	}{
		{"latency", func(p *testkit.FaultProxy, t *testing.T) { p.Latency(t, 50) }},
		{"peer that never answers", func(p *testkit.FaultProxy, t *testing.T) { p.Blackhole(t) }},
		{"connections cut mid-stream", func(p *testkit.FaultProxy, t *testing.T) { p.ResetPeer(t) }},
		{"bandwidth-limited link", func(p *testkit.FaultProxy, t *testing.T) { p.Bandwidth(t, 16) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := startFaulty(t, viaNATS)
			tc.fault(b.proxy, t)
			order := b.within(t, answer, "POST", "/v1/orders", "nf-nats", orderBody)
			if order.status != http.StatusCreated {
				t.Fatalf("create order: %d %s", order.status, order.body)
			}
			orderID := order.json(t)["id"].(string)
			pay := b.within(t, answer, "POST", "/v1/orders/"+orderID+"/payments", "nf-nats-pay", payBody("pm_card_ok"))
			if pay.status != http.StatusCreated {
				t.Fatalf("pay: %d %s", pay.status, pay.body)
			}
			// Let the fault meet the dispatcher's publishes for a while.
			testkit.WaitFor(t, 10*time.Second, "the payment's event to be written", func() bool {
				return b.count(t, `SELECT count(*) FROM outbox_events WHERE event_type = 'payment.succeeded'`) == 1
			})
			b.proxy.Heal()
			b.settles(t, orderID)
			b.chargedOnce(t, pay)
			if n := b.count(t, `SELECT count(*) FROM notifications WHERE kind = 'receipt'`); n != 1 {
				t.Fatalf("%d receipts, want 1", n)
			}
		})
	}

	t.Run("shutdown while the broker hangs", func(t *testing.T) {
		t.Parallel()
		b := startFaulty(t, viaNATS)
		b.proxy.Blackhole(t)
		if r := b.within(t, answer, "POST", "/v1/orders", "nf-nats-shutdown", orderBody); r.status != http.StatusCreated {
			t.Fatalf("create order: %d %s", r.status, r.body)
		}
		took, err := b.stop()
		if bound := 2*nfShutdownTimeout + nfSlack; took > bound {
			t.Fatalf("Serve returned %s after it was told to stop, want at most %s", took.Round(time.Millisecond), bound)
		}
		if err != nil {
			t.Logf("serve: %v", err)
		}
		if took, bound := b.close(), nfSlack; took > bound {
			t.Fatalf("Close took %s while the broker hangs, want at most %s", took.Round(time.Millisecond), bound)
		}
	})
}

// TestNetworkFaultsToTheProvider puts the fault proxy between the service
// and the payment provider (PSP_URL). An answer that does not come within
// PSP_TIMEOUT is an unknown outcome: 503 payment_provider_unavailable, the
// attempt stays pending, and the retry (or the recoverer) finds the charge
// by its key and reference once the fault lifts: charged once.
func TestNetworkFaultsToTheProvider(t *testing.T) {
	t.Parallel()
	unknown := nfPSPTimeout + nfSlack
	for _, tc := range []struct {
		name  string
		fault func(*testkit.FaultProxy, *testing.T)
		// ok: the payment succeeds under the fault.
		ok bool
	}{
		{"latency below PSP_TIMEOUT", func(p *testkit.FaultProxy, t *testing.T) { p.Latency(t, 100) }, true},
		{"latency past PSP_TIMEOUT", func(p *testkit.FaultProxy, t *testing.T) { p.Latency(t, 700) }, false},
		{"peer that never answers", func(p *testkit.FaultProxy, t *testing.T) { p.Blackhole(t) }, false},
		{"connection reset", func(p *testkit.FaultProxy, t *testing.T) { p.ResetPeer(t) }, false},
		// The charge is made, and its answer is cut after its first bytes.
		{"answer cut mid-stream", func(p *testkit.FaultProxy, t *testing.T) { p.LimitData(t, 64) }, false},
		{"bandwidth-limited link", func(p *testkit.FaultProxy, t *testing.T) { p.Bandwidth(t, 8) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := startFaulty(t, viaProvider)
			orderID, _ := b.order(t, "nf-psp")
			tc.fault(b.proxy, t)
			r := b.within(t, unknown, "POST", "/v1/orders/"+orderID+"/payments", "nf-psp-pay", payBody("pm_card_ok"))
			if tc.ok {
				if r.status != http.StatusCreated {
					t.Fatalf("pay: %d %s", r.status, r.body)
				}
				b.settles(t, orderID)
				b.chargedOnce(t, r)
				return
			}
			if p := wantProblem(t, r, http.StatusServiceUnavailable, "payment_provider_unavailable"); r.header.Get("Retry-After") == "" {
				t.Fatalf("503 without Retry-After: %v", p)
			}
			b.proxy.Heal()
			// The recoverer finishes the attempt by itself once the
			// provider answers again; the client's retry then gets the
			// stored answer.
			testkit.WaitFor(t, 20*time.Second, "the recoverer (or the webhook) to finish the payment", func() bool {
				return b.paymentStatus(t, orderID) == "succeeded"
			})
			pay := b.eventually(t, http.StatusCreated, "POST", "/v1/orders/"+orderID+"/payments", "nf-psp-pay", payBody("pm_card_ok"))
			b.settles(t, orderID)
			b.chargedOnce(t, pay)
		})
	}

	t.Run("shutdown while the provider hangs", func(t *testing.T) {
		t.Parallel()
		b := startFaulty(t, viaProvider)
		orderID, _ := b.order(t, "nf-psp-shutdown")
		b.proxy.Blackhole(t)
		inFlight := b.inFlight(t, "POST", "/v1/orders/"+orderID+"/payments", "nf-psp-shutdown-pay", payBody("pm_card_ok"))
		testkit.WaitFor(t, 5*time.Second, "the payment to wait on the provider", func() bool {
			return b.paymentStatus(t, orderID) == "pending"
		})
		took, err := b.stop()
		if bound := 2*nfShutdownTimeout + nfSlack; took > bound {
			t.Fatalf("Serve returned %s after it was told to stop, want at most %s", took.Round(time.Millisecond), bound)
		}
		if err != nil {
			t.Logf("serve: %v", err)
		}
		testkit.WantProblem(t, <-inFlight, http.StatusServiceUnavailable, "payment_provider_unavailable")
		if took, bound := b.close(), nfSlack; took > bound {
			t.Fatalf("Close took %s while the provider hangs, want at most %s", took.Round(time.Millisecond), bound)
		}
	})
}
