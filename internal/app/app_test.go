package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/testdb"
	"github.com/oncepay/oncepay/internal/testkit"
	"github.com/oncepay/oncepay/proving/pspsim"
)

// testBundle is one running service on its own database, reached over real
// HTTP on a loopback port, with its own payment simulator (nil when the test
// named another provider), also on a loopback port.
type testBundle struct {
	app     *app.App
	psp     *pspsim.Server
	pool    *pgxpool.Pool
	baseURL string
	addr    string
	client  *http.Client
	clock   *testkit.Clock
}

// testConfig is the configuration of a test's service on its own database.
func testConfig(t *testing.T) app.Config {
	t.Helper()
	tuning := app.DefaultTuning()
	tuning.DBLockTimeout = 5 * time.Second
	tuning.AuthCacheTTL = time.Minute
	tuning.ShutdownTimeout = 5 * time.Second
	tuning.StartupTimeout = time.Minute
	// The recoverer runs when a test calls it, so a test controls
	// exactly who finishes an abandoned attempt.
	tuning.RecovererInterval = 0
	tuning.SweepBatch = 500
	return app.Config{
		DatabaseURL:         testdb.URL(t),
		HTTPAddr:            "127.0.0.1:0",
		DemoMode:            true,
		AutoMigrate:         false, // the template database is migrated already
		LogLevel:            slog.LevelWarn,
		DBMaxConns:          40,
		WriteTimeout:        10 * time.Second,
		IdempotencyLease:    30 * time.Second,
		PSPAPIKey:           testPSPKey,
		PSPTimeout:          5 * time.Second,
		PSPWebhookSecrets:   []string{app.DemoWebhookSecret},
		Retention:           app.DefaultRetention(),
		SweepInterval:       0, // tests sweep when they mean to
		NATSStoreDir:        t.TempDir(),
		NATSStreamReplicas:  1,
		OutboxDispatcher:    true,
		FulfillmentConsumer: true,
		Tuning:              tuning,
	}
}

// testPSPKey is the API key of the tests' simulators, which the service
// sends as PSP_API_KEY.
const testPSPKey = "sk_sim_test"

func setup(t *testing.T, opts ...func(*app.Config)) *testBundle {
	t.Helper()
	return start(t, nil, nil, opts...)
}

// setupWith is setup with options of app.New, which reach what no
// configuration does (the failure drills' fault hooks).
func setupWith(t *testing.T, appOpts []app.Option, opts ...func(*app.Config)) *testBundle {
	t.Helper()
	return start(t, appOpts, nil, opts...)
}

// setupWithPSP is setup with the simulator's configuration changed by psp
// (nil: as it comes).
func setupWithPSP(t *testing.T, psp func(*pspsim.Config), opts ...func(*app.Config)) *testBundle {
	t.Helper()
	return start(t, nil, psp, opts...)
}

func start(t *testing.T, appOpts []app.Option, psp func(*pspsim.Config), opts ...func(*app.Config)) *testBundle {
	t.Helper()
	cfg := testConfig(t)
	for _, o := range opts {
		o(&cfg)
	}
	clock := testkit.NewClock()
	logger := testkit.Logger(t)
	var sim *pspsim.Server
	if cfg.PSPURL == "" {
		sim, cfg.PSPURL = startSimulator(t, cfg, psp, logger, clock.Now)
	}
	a, err := app.New(cfg, logger, clock.Now, appOpts...)
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := a.Start(ctx); err != nil {
		cancel()
		t.Fatalf("start: %v", err)
	}
	// Every exchange of every end-to-end test is checked against the
	// OpenAPI description (openapi_test.go), so it cannot drift.
	hc := &http.Client{Timeout: 30 * time.Second, Transport: newOpenAPITransport(t, nil)}
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx) }()
	t.Cleanup(func() {
		// A connection the client dialled but never used counts as active
		// for http.Server.Shutdown for 5 seconds, as long as the drain
		// allows: close the client's idle connections first.
		hc.CloseIdleConnections()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		a.Close()
	})
	b := &testBundle{
		app:     a,
		pool:    a.Pool(),
		baseURL: "http://" + a.Addr().String(),
		addr:    a.Addr().String(),
		client:  hc,
		clock:   clock,
	}
	if sim != nil {
		// The service listens now: the simulator learns where its webhooks go.
		if err := sim.SetWebhookURL(b.baseURL + "/webhooks/psp"); err != nil {
			t.Fatalf("simulator webhook URL: %v", err)
		}
		b.psp = sim
	}
	return b
}

// startSimulator starts a test's payment simulator (proving/pspsim) on a
// loopback port and returns it with its URL: spoken to over real HTTP like
// any provider, with our API key, signing with our first webhook secret, on
// the service's clock, delivering webhooks until the test ends. Its webhook
// URL is set once the service listens. It stops after the service (cleanups
// run last first).
func startSimulator(t *testing.T, cfg app.Config, change func(*pspsim.Config), logger *slog.Logger, now func() time.Time) (*pspsim.Server, string) {
	t.Helper()
	pcfg := pspsim.Config{APIKey: cfg.PSPAPIKey, WebhookSecrets: cfg.PSPWebhookSecrets[:1]}
	if change != nil {
		change(&pcfg)
	}
	srv, err := pspsim.New(pcfg, logger.With("component", "pspsim"), now)
	if err != nil {
		t.Fatalf("pspsim.New: %v", err)
	}
	hs := httptest.NewServer(srv.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("simulator webhooks: %v", err)
		}
		hs.Close()
	})
	return srv, hs.URL
}

const (
	acme   = "sk_test_acme"
	globex = "sk_test_globex"
)

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
	return m
}

// do sends one request. key "" sends no Idempotency-Key header.
func (b *testBundle) do(t *testing.T, method, path, apiKey, key, body string) response {
	t.Helper()
	req, err := http.NewRequest(method, b.baseURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := b.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return response{status: res.StatusCode, header: res.Header, body: raw}
}

func (b *testBundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("count %q: %v", query, err)
	}
	return n
}

const orderBody = `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":2},{"sku":"ceramic-dripper","quantity":1}]}`

// The same intent with its keys reordered and other whitespace.
const orderBodyReordered = "{ \"items\" : [ {\"quantity\":2, \"sku\":\"travel-mug\"}, {\"sku\":\"ceramic-dripper\",\"quantity\":1.0} ],\n \"currency\":\"EUR\" }"

func wantProblem(t *testing.T, r response, status int, code string) map[string]any {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; body %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json", ct)
	}
	m := r.json(t)
	if m["code"] != code {
		t.Fatalf("code = %v, want %s; body %s", m["code"], code, r.body)
	}
	return m
}

func TestCreateOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.do(t, "POST", "/v1/orders", acme, "create-1", orderBody)
	if r.status != http.StatusCreated {
		t.Fatalf("status = %d, want 201; body %s", r.status, r.body)
	}
	o := r.json(t)
	if o["status"] != "awaiting_payment" || o["currency"] != "EUR" || o["amount_total"] != float64(2*1800+2200) {
		t.Fatalf("order = %s", r.body)
	}
	if loc := r.header.Get("Location"); loc != "/v1/orders/"+o["id"].(string) {
		t.Fatalf("Location = %q", loc)
	}
	exp, err := http.ParseTime(r.header.Get("Idempotency-Expires"))
	if err != nil {
		t.Fatalf("Idempotency-Expires: %v", err)
	}
	if d := time.Until(exp); d < 6*24*time.Hour || d > 7*24*time.Hour+time.Minute {
		t.Fatalf("Idempotency-Expires in %v, want about 7 days (orders.create retention)", d)
	}
	if r.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("first answer is marked as a replay")
	}
	got := b.do(t, "GET", "/v1/orders/"+o["id"].(string), acme, "", "")
	if got.status != http.StatusOK || !bytes.Equal(got.body, r.body) {
		t.Fatalf("GET = %d %s, want the created order %s", got.status, got.body, r.body)
	}
	if n := b.count(t, `SELECT count(*) FROM outbox_events WHERE event_type = 'order.created' AND idempotency_key = 'create-1'`); n != 1 {
		t.Fatalf("order.created events = %d, want 1", n)
	}
}

// Drill 9: the replayed response is the first one, byte for byte.
func TestDrill9_ReplayIsByteIdentical(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.do(t, "POST", "/v1/orders", acme, "drill-9", orderBody)
	// The same intent, sent differently: reordered keys, whitespace, 1.0 for
	// 1, and the key in its Structured-Field quoted form.
	second := b.do(t, "POST", "/v1/orders", acme, `"drill-9"`, orderBodyReordered)
	if second.status != first.status {
		t.Fatalf("replay status = %d, want %d", second.status, first.status)
	}
	for _, h := range []string{"Content-Type", "Location", "Idempotency-Expires"} {
		if second.header.Get(h) != first.header.Get(h) {
			t.Fatalf("replay %s = %q, want %q", h, second.header.Get(h), first.header.Get(h))
		}
	}
	if !bytes.Equal(second.body, first.body) {
		t.Fatalf("replay body differs:\n%s\n%s", second.body, first.body)
	}
	if second.header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("replay is not marked Idempotent-Replayed: true")
	}
	if n := b.count(t, `SELECT count(*) FROM orders`); n != 1 {
		t.Fatalf("orders = %d, want 1", n)
	}
}

// Drill 1: the server commits, the response never reaches the client; the
// client's retry is answered with the stored response and no second order.
func TestDrill1_ResponseLostAfterCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	conn, err := net.Dial("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	req := "POST /v1/orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + acme +
		"\r\nIdempotency-Key: drill-1\r\nContent-Type: application/json\r\nContent-Length: " +
		itoa(len(orderBody)) + "\r\n\r\n" + orderBody
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	// Hang up without reading a byte, once the order is committed.
	testkit.WaitFor(t, 10*time.Second, "the order of the lost answer to commit", func() bool {
		return b.count(t, `SELECT count(*) FROM orders WHERE idempotency_key = 'drill-1'`) == 1
	})
	conn.Close()

	retry := b.do(t, "POST", "/v1/orders", acme, "drill-1", orderBody)
	if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry = %d (replayed %q), want a 201 replay; %s", retry.status, retry.header.Get("Idempotent-Replayed"), retry.body)
	}
	if n := b.count(t, `SELECT count(*) FROM orders`); n != 1 {
		t.Fatalf("orders = %d, want 1", n)
	}
}

// Drill 1, the other half: the client hangs up before the server is done.
// The started write still runs to its end (its context is detached from the
// request), so the retry is a replay, not a second execution. The client
// hangs up while the write's transaction is about to commit: the server
// reads a request's body before it starts, and a client gone before that
// has nothing started (its retry is a first execution).
func TestDrill1_ClientGoneMidRequest(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	b := setupWith(t, []app.Option{app.WithOperationHooks(operation.Hooks{
		BeforeCommit: func(op idempotency.Operation, _ idempotency.RecoveryPoint) error {
			if op == orders.OpCreate {
				once.Do(func() { close(entered) })
				select {
				case <-release:
				case <-time.After(10 * time.Second):
				}
			}
			return nil
		},
	})})
	conn, err := net.Dial("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	req := "POST /v1/orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + acme +
		"\r\nIdempotency-Key: drill-1b\r\nContent-Length: " + itoa(len(orderBody)) + "\r\n\r\n" + orderBody
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the order's write never started")
	}
	conn.Close()
	close(release)
	testkit.WaitFor(t, 10*time.Second, "the lost answer's record to be completed", func() bool {
		return b.count(t, `SELECT count(*) FROM api_idempotency WHERE idempotency_key = 'drill-1b' AND state = 'completed'`) == 1
	})
	retry := b.do(t, "POST", "/v1/orders", acme, "drill-1b", orderBody)
	if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry = %d, want a 201 replay; %s", retry.status, retry.body)
	}
	if n := b.count(t, `SELECT count(*) FROM orders`); n != 1 {
		t.Fatalf("orders = %d, want 1", n)
	}
}

// Drill 2: 32 identical requests race with one key: one order, one event,
// and every answer is that order (or 409 request_in_progress to retry).
func TestDrill2_ConcurrentIdenticalRequests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 32
	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make([]response, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i] = b.do(t, "POST", "/v1/orders", acme, "drill-2", orderBody)
		}()
	}
	close(start)
	wg.Wait()

	var created []byte
	executed := 0
	for _, r := range results {
		switch r.status {
		case http.StatusCreated:
			if r.header.Get("Idempotent-Replayed") != "true" {
				executed++
			}
			if created == nil {
				created = r.body
			}
			if !bytes.Equal(r.body, created) {
				t.Fatalf("two different 201 bodies:\n%s\n%s", r.body, created)
			}
		case http.StatusConflict:
			wantProblem(t, r, http.StatusConflict, "request_in_progress")
			if r.header.Get("Retry-After") == "" {
				t.Fatal("409 without Retry-After")
			}
		default:
			t.Fatalf("unexpected answer %d %s", r.status, r.body)
		}
	}
	if executed != 1 {
		t.Fatalf("%d answers were fresh executions, want exactly 1", executed)
	}
	if got := b.count(t, `SELECT count(*) FROM orders`); got != 1 {
		t.Fatalf("orders = %d, want 1", got)
	}
	if got := b.count(t, `SELECT count(*) FROM outbox_events`); got != 1 {
		t.Fatalf("outbox events = %d, want 1", got)
	}
}

// Drill 3: the same key with another payload fails loudly; the original is
// untouched and still replays.
func TestDrill3_KeyReusedWithAnotherPayload(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.do(t, "POST", "/v1/orders", acme, "drill-3", orderBody)
	other := b.do(t, "POST", "/v1/orders", acme, "drill-3", `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":3}]}`)
	wantProblem(t, other, http.StatusUnprocessableEntity, "idempotency_key_reused")
	if other.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("a mismatch is not a replay")
	}
	again := b.do(t, "POST", "/v1/orders", acme, "drill-3", orderBody)
	if again.status != http.StatusCreated || !bytes.Equal(again.body, first.body) {
		t.Fatalf("original no longer replays: %d %s", again.status, again.body)
	}
	id := first.json(t)["id"].(string)
	got := b.do(t, "GET", "/v1/orders/"+id, acme, "", "")
	if !bytes.Equal(got.body, first.body) {
		t.Fatalf("original changed: %s", got.body)
	}
	if n := b.count(t, `SELECT count(*) FROM orders`); n != 1 {
		t.Fatalf("orders = %d, want 1", n)
	}
}

// Drill 8: the key's record has expired (deleted) and a genuine late retry
// arrives. The order's own unique (tenant, key) answers with the original
// order (201, the original outcome), never a second one; another payload
// under that key is refused.
func TestDrill8_LateRetryAfterRecordExpired(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.do(t, "POST", "/v1/orders", acme, "drill-8", orderBody)
	if _, err := b.pool.Exec(context.Background(), `DELETE FROM api_idempotency WHERE idempotency_key = 'drill-8'`); err != nil {
		t.Fatal(err)
	}
	late := b.do(t, "POST", "/v1/orders", acme, "drill-8", orderBody)
	if late.status != http.StatusCreated {
		t.Fatalf("late retry status = %d, want 201; %s", late.status, late.body)
	}
	if late.json(t)["id"] != first.json(t)["id"] {
		t.Fatalf("late retry returned order %v, want the original %v", late.json(t)["id"], first.json(t)["id"])
	}
	if late.header.Get("Location") != first.header.Get("Location") {
		t.Fatalf("Location = %q, want %q", late.header.Get("Location"), first.header.Get("Location"))
	}
	if n := b.count(t, `SELECT count(*) FROM orders`); n != 1 {
		t.Fatalf("orders = %d, want 1", n)
	}
	if n := b.count(t, `SELECT count(*) FROM outbox_events`); n != 1 {
		t.Fatalf("outbox events = %d, want 1 (no second order.created)", n)
	}
	// Counted once: the first create and the late retry's fresh claim are
	// executed (its answer came from the order, late_retry), nothing twice
	// (the batched attempt that found the order and rolled back counts
	// for nothing).
	m := b.do(t, "GET", "/metrics", "", "", "")
	for _, want := range []string{
		`oncepay_idempotency_outcomes_total{operation="orders.create",outcome="executed"} 2`,
		`oncepay_idempotency_outcomes_total{operation="orders.create",outcome="late_retry"} 1`,
	} {
		if !strings.Contains(string(m.body), want) {
			t.Fatalf("/metrics lacks %q", want)
		}
	}
	// The late answer is itself recorded and replays.
	again := b.do(t, "POST", "/v1/orders", acme, "drill-8", orderBody)
	if again.status != http.StatusCreated || !bytes.Equal(again.body, late.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("late answer does not replay: %d %s", again.status, again.body)
	}
	if _, err := b.pool.Exec(context.Background(), `DELETE FROM api_idempotency WHERE idempotency_key = 'drill-8'`); err != nil {
		t.Fatal(err)
	}
	other := b.do(t, "POST", "/v1/orders", acme, "drill-8", `{"currency":"EUR","items":[{"sku":"burr-grinder","quantity":1}]}`)
	wantProblem(t, other, http.StatusUnprocessableEntity, "idempotency_key_reused")
	if n := b.count(t, `SELECT count(*) FROM orders`); n != 1 {
		t.Fatalf("orders = %d, want 1", n)
	}
}

// Rule 2: the same key in another tenant is another intent.
func TestKeysAreScopedByTenant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.do(t, "POST", "/v1/orders", acme, "shared-key", orderBody)
	g := b.do(t, "POST", "/v1/orders", globex, "shared-key", orderBody)
	if a.status != http.StatusCreated || g.status != http.StatusCreated {
		t.Fatalf("statuses = %d, %d, want 201, 201", a.status, g.status)
	}
	if g.header.Get("Idempotent-Replayed") != "" || a.json(t)["id"] == g.json(t)["id"] {
		t.Fatal("globex got acme's order")
	}
	// And the same key with another payload in another tenant is no mismatch.
	g2 := b.do(t, "POST", "/v1/orders", globex, "acme-only", orderBody)
	a2 := b.do(t, "POST", "/v1/orders", acme, "acme-only", `{"currency":"EUR","items":[{"sku":"burr-grinder","quantity":1}]}`)
	if g2.status != http.StatusCreated || a2.status != http.StatusCreated {
		t.Fatalf("statuses = %d, %d, want 201, 201", g2.status, a2.status)
	}
}

func TestCrossTenantReadIsNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.do(t, "POST", "/v1/orders", acme, "mine", orderBody).json(t)
	r := b.do(t, "GET", "/v1/orders/"+o["id"].(string), globex, "", "")
	wantProblem(t, r, http.StatusNotFound, "not_found")
	list := b.do(t, "GET", "/v1/orders", globex, "", "").json(t)
	if len(list["data"].([]any)) != 0 {
		t.Fatalf("globex lists acme's orders: %v", list)
	}
	events := b.do(t, "GET", "/v1/events", globex, "", "").json(t)
	if len(events["data"].([]any)) != 0 {
		t.Fatalf("globex lists acme's events: %v", events)
	}
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct{ name, header string }{
		{"missing", ""},
		{"unknown key", "Bearer sk_test_nobody"},
		{"wrong scheme", "Basic " + acme},
		{"empty bearer", "Bearer "},
	} {
		req, _ := http.NewRequest("POST", b.baseURL+"/v1/orders", strings.NewReader(orderBody))
		req.Header.Set("Idempotency-Key", "auth-"+tc.name)
		if tc.header != "" {
			req.Header.Set("Authorization", tc.header)
		}
		res, err := b.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		wantProblem(t, response{res.StatusCode, res.Header, body}, http.StatusUnauthorized, "unauthorized")
		if res.Header.Get("WWW-Authenticate") == "" {
			t.Fatal("401 without WWW-Authenticate")
		}
	}
	if n := b.count(t, `SELECT count(*) FROM api_idempotency`); n != 0 {
		t.Fatalf("unauthenticated requests stored %d idempotency records", n)
	}
}

func TestIdempotencyKeyErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wantProblem(t, b.do(t, "POST", "/v1/orders", acme, "", orderBody), http.StatusBadRequest, "idempotency_key_missing")
	for _, key := range []string{strings.Repeat("k", 256), "has space", `"unterminated`, `"bad\escape"`, "caf\u00e9"} {
		wantProblem(t, b.do(t, "POST", "/v1/orders", acme, key, orderBody), http.StatusBadRequest, "idempotency_key_invalid")
	}
	// A key error is not stored: nothing was executed.
	if n := b.count(t, `SELECT count(*) FROM api_idempotency`); n != 0 {
		t.Fatalf("key errors stored %d records", n)
	}
}

func TestValidationErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		name, body, code, field string
		status                  int
	}{
		{"not json", `{"currency":`, "invalid_json", "", 400},
		{"trailing data", orderBody + `{}`, "invalid_json", "", 400},
		{"array body", `[1,2]`, "validation_failed", "", 422},
		{"unknown field", `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":1}],"amount_total":1}`, "validation_failed", "amount_total", 422},
		{"unknown item field", `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":1,"unit_amount":1}]}`, "validation_failed", "items[0].unit_amount", 422},
		{"missing currency", `{"items":[{"sku":"travel-mug","quantity":1}]}`, "validation_failed", "currency", 422},
		{"lowercase currency", `{"currency":"eur","items":[{"sku":"travel-mug","quantity":1}]}`, "validation_failed", "currency", 422},
		{"unsupported currency", `{"currency":"JPY","items":[{"sku":"travel-mug","quantity":1}]}`, "validation_failed", "currency", 422},
		{"no items", `{"currency":"EUR","items":[]}`, "validation_failed", "items", 422},
		{"too many items", `{"currency":"EUR","items":[` + strings.Repeat(`{"sku":"travel-mug","quantity":1},`, 50) + `{"sku":"travel-mug","quantity":1}]}`, "validation_failed", "items", 422},
		{"zero quantity", `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":0}]}`, "validation_failed", "items[0].quantity", 422},
		{"negative quantity", `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":-1}]}`, "validation_failed", "items[0].quantity", 422},
		{"absurd quantity", `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":1000001}]}`, "validation_failed", "items[0].quantity", 422},
		{"fractional quantity", `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":1.5}]}`, "validation_failed", "items[0].quantity", 422},
		{"string quantity", `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":"2"}]}`, "validation_failed", "items[0].quantity", 422},
		{"huge quantity", `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":1e400}]}`, "validation_failed", "items[0].quantity", 422},
		{"duplicate sku", `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":1},{"sku":"travel-mug","quantity":1}]}`, "validation_failed", "items[1].sku", 422},
		{"unknown sku", `{"currency":"EUR","items":[{"sku":"no-such-thing","quantity":1}]}`, "validation_failed", "items[0].sku", 422},
		{"nul in sku", `{"currency":"EUR","items":[{"sku":"travel\u0000mug","quantity":1}]}`, "validation_failed", "items[0].sku", 422},
		{"control character in sku", `{"currency":"EUR","items":[{"sku":"travel\tmug","quantity":1}]}`, "validation_failed", "items[0].sku", 422},
		{"empty sku", `{"currency":"EUR","items":[{"sku":"","quantity":1}]}`, "validation_failed", "items[0].sku", 422},
		{"currency mismatch", `{"currency":"USD","items":[{"sku":"travel-mug","quantity":1}]}`, "validation_failed", "items[0].sku", 422},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := b.do(t, "POST", "/v1/orders", acme, "validation-"+strings.ReplaceAll(tc.name, " ", "-"), tc.body)
			p := wantProblem(t, r, tc.status, tc.code)
			if tc.field == "" {
				return
			}
			errs, _ := p["errors"].([]any)
			for _, e := range errs {
				if e.(map[string]any)["field"] == tc.field {
					return
				}
			}
			t.Fatalf("errors %v do not name %q", errs, tc.field)
		})
	}
	// Validation happens before execution: nothing is stored, keys stay free.
	if n := b.count(t, `SELECT count(*) FROM api_idempotency`); n != 0 {
		t.Fatalf("validation errors stored %d idempotency records", n)
	}
	if n := b.count(t, `SELECT count(*) FROM orders`); n != 0 {
		t.Fatalf("validation errors created %d orders", n)
	}
	// A key first used with an invalid request is still free for the fixed one.
	r := b.do(t, "POST", "/v1/orders", acme, "validation-unknown-sku", orderBody)
	if r.status != http.StatusCreated {
		t.Fatalf("fixed request after a validation error = %d %s, want 201", r.status, r.body)
	}
}

func TestBodyTooLarge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	big := `{"currency":"EUR","items":[{"sku":"` + strings.Repeat("x", 70<<10) + `","quantity":1}]}`
	wantProblem(t, b.do(t, "POST", "/v1/orders", acme, "big", big), http.StatusRequestEntityTooLarge, "request_too_large")
	// The same without a Content-Length (chunked): refused while reading.
	req, _ := http.NewRequest("POST", b.baseURL+"/v1/orders", io.MultiReader(strings.NewReader(big)))
	req.Header.Set("Authorization", "Bearer "+acme)
	req.Header.Set("Idempotency-Key", "big-chunked")
	req.ContentLength = -1
	res, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	wantProblem(t, response{res.StatusCode, res.Header, body}, http.StatusRequestEntityTooLarge, "request_too_large")
}

func TestUnknownRouteAndMethod(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wantProblem(t, b.do(t, "GET", "/v1/nothing-here", acme, "", ""), http.StatusNotFound, "not_found")
	wantProblem(t, b.do(t, "GET", "/nothing-here", "", "", ""), http.StatusNotFound, "not_found")
	wantProblem(t, b.do(t, "GET", "/v1/orders/not-a-uuid", acme, "", ""), http.StatusNotFound, "not_found")
	wantProblem(t, b.do(t, "GET", "/v1/orders/01a22931-c9da-71c4-a494-fc128972f4cb", acme, "", ""), http.StatusNotFound, "not_found")
	wantProblem(t, b.do(t, "DELETE", "/v1/orders", acme, "", ""), http.StatusMethodNotAllowed, "method_not_allowed")
}

func TestProductsAndListPagination(t *testing.T) {
	t.Parallel()
	b := setup(t)
	products := b.do(t, "GET", "/v1/products", acme, "", "").json(t)["data"].([]any)
	if len(products) < 5 {
		t.Fatalf("catalog has %d products, want >= 5", len(products))
	}
	for _, p := range products {
		m := p.(map[string]any)
		if m["sku"] == "" || m["name"] == "" || m["unit_amount"].(float64) <= 0 || m["currency"] != "EUR" || m["stock"].(float64) < 100000 {
			t.Fatalf("bad product %v", m)
		}
	}
	var ids []string
	for i := range 5 {
		r := b.do(t, "POST", "/v1/orders", acme, "page-"+itoa(i), orderBody)
		ids = append(ids, r.json(t)["id"].(string))
	}
	var seen []string
	cursor := ""
	for page := 0; ; page++ {
		path := "/v1/orders?limit=2"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		m := b.do(t, "GET", path, acme, "", "").json(t)
		for _, o := range m["data"].([]any) {
			seen = append(seen, o.(map[string]any)["id"].(string))
		}
		next, ok := m["next_cursor"].(string)
		if !ok {
			break
		}
		cursor = next
		if page > 5 {
			t.Fatal("pagination does not end")
		}
	}
	if len(seen) != 5 {
		t.Fatalf("listed %d orders, want 5", len(seen))
	}
	for i := range seen { // newest first
		if seen[i] != ids[len(ids)-1-i] {
			t.Fatalf("order %d = %s, want %s (newest first)", i, seen[i], ids[len(ids)-1-i])
		}
	}
	wantProblem(t, b.do(t, "GET", "/v1/orders?limit=0", acme, "", ""), 422, "validation_failed")
	wantProblem(t, b.do(t, "GET", "/v1/orders?limit=1000", acme, "", ""), 422, "validation_failed")
	wantProblem(t, b.do(t, "GET", "/v1/orders?cursor=garbage", acme, "", ""), 422, "validation_failed")
	ev := b.do(t, "GET", "/v1/events?limit=2", acme, "", "").json(t)
	if len(ev["data"].([]any)) != 2 || ev["next_cursor"] == nil {
		t.Fatalf("events page = %v", ev)
	}
}

func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, p := range []string{"/healthz", "/readyz"} {
		if r := b.do(t, "GET", p, "", "", ""); r.status != http.StatusOK {
			t.Fatalf("%s = %d %s", p, r.status, r.body)
		}
	}
	// Readiness follows the schema: revert it and /readyz says not ready.
	if _, err := b.pool.Exec(context.Background(), `UPDATE schema_migrations SET dirty = true`); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, b.do(t, "GET", "/readyz", "", "", ""), http.StatusServiceUnavailable, "service_unavailable")
}

// The request id (transport attempt) and the idempotency key (intent) are
// different things: every attempt gets its own request id.
func TestRequestIDIsPerAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.do(t, "POST", "/v1/orders", acme, "rid", orderBody)
	second := b.do(t, "POST", "/v1/orders", acme, "rid", orderBody)
	a, c := first.header.Get("X-Request-Id"), second.header.Get("X-Request-Id")
	if a == "" || a == c {
		t.Fatalf("request ids %q and %q, want two different ones", a, c)
	}
}

// A request id the client sends is kept when it is short printable ASCII,
// and replaced otherwise: it is stored with the idempotency record, and bytes
// PostgreSQL refuses would fail the request with a 500.
func TestClientRequestID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i, tc := range []struct {
		sent string
		kept bool
	}{
		{"trace-0af7651916cd43dd", true},
		{"bad-\xff-utf8", false},
		{"with space", false},
		{strings.Repeat("r", 129), false},
		{strings.Repeat("r", 128), true},
	} {
		req, err := http.NewRequest("POST", b.baseURL+"/v1/orders", strings.NewReader(orderBody))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+acme)
		req.Header.Set("Idempotency-Key", fmt.Sprintf("rid-client-%d", i))
		req.Header.Set("X-Request-Id", tc.sent)
		res, err := b.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("X-Request-Id %q: status %d, want 201", tc.sent, res.StatusCode)
		}
		if got := res.Header.Get("X-Request-Id"); (got == tc.sent) != tc.kept || got == "" {
			t.Fatalf("X-Request-Id %q answered %q, kept = %v, want kept = %v", tc.sent, got, got == tc.sent, tc.kept)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// /metrics counts idempotency outcomes per operation, and the rest.
func TestMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.do(t, "POST", "/v1/orders", acme, "m-1", orderBody)
	b.do(t, "POST", "/v1/orders", acme, "m-1", orderBody)
	b.do(t, "POST", "/v1/orders", acme, "m-1", `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":9}]}`)
	r := b.do(t, "GET", "/metrics", "", "", "")
	if r.status != http.StatusOK {
		t.Fatalf("/metrics = %d", r.status)
	}
	for _, want := range []string{
		`oncepay_idempotency_outcomes_total{operation="orders.create",outcome="executed"} 1`,
		`oncepay_idempotency_outcomes_total{operation="orders.create",outcome="replayed"} 1`,
		`oncepay_idempotency_outcomes_total{operation="orders.create",outcome="mismatch"} 1`,
		`oncepay_http_request_duration_seconds_count{method="POST",route="/v1/orders",status="201"} 2`,
	} {
		if !strings.Contains(string(r.body), want) {
			t.Fatalf("/metrics lacks %q", want)
		}
	}
}
