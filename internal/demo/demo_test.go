package demo_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/demo"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/tenants"
	"github.com/oncepay/oncepay/proving/pspsim"
)

// The demo endpoints that read the database are tested end to end in
// internal/app (browser_test.go); these tests cover the gate, the chaos
// middleware and the fault settings, which need no database.

// server mounts h on a real HTTP server (the chaos middleware hijacks real
// connections) with a handler that counts its executions.
func server(t *testing.T, h *demo.Handler) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	e := echo.New()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		var pe *problem.Error
		if !errors.As(err, &pe) {
			pe = &problem.Error{Code: problem.Internal}
		}
		_ = c.Blob(problem.Status(pe.Code), problem.ContentType, pe.JSON())
	}
	e.Use(h.Chaos)
	// The tenant's authentication, without a database: the request names
	// its tenant in testTenantHeader (tenantA without it).
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			id := tenantA
			if v := c.Request().Header.Get(testTenantHeader); v != "" {
				id = uuid.MustParse(v)
			}
			tenants.Put(c, tenants.Tenant{ID: id, Slug: "t-" + id.String()[:8]})
			return next(c)
		}
	})
	var executed atomic.Int32
	e.POST("/v1/things", func(c echo.Context) error {
		executed.Add(1)
		return c.JSON(http.StatusCreated, map[string]string{"id": "thing_1"})
	})
	e.GET("/demo", h.Status)
	e.GET("/demo/faults", h.Faults)
	e.PUT("/demo/faults", h.SetFaults)
	e.GET("/demo/orders/:id/payments", h.OrderPayments)
	e.POST("/demo/events/:id/replay", h.ReplayEvent)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv, &executed
}

// testTenantHeader names the request's tenant in the tests' servers.
const testTenantHeader = "X-Test-Tenant"

// The tenants of the tests' requests.
var (
	tenantA = uuid.MustParse("01a22931-c9da-71c4-a494-aaaaaaaaaaaa")
	tenantB = uuid.MustParse("01a22931-c9da-71c4-a494-bbbbbbbbbbbb")
)

func send(t *testing.T, srv *httptest.Server, method, path, body string, header map[string]string) (*http.Response, string, error) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		return nil, "", err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	return res, string(raw), err
}

func wantCode(t *testing.T, res *http.Response, body string, status int, code problem.Code) {
	t.Helper()
	if res.StatusCode != status || !strings.Contains(body, `"code":"`+string(code)+`"`) {
		t.Fatalf("got %d %s, want %d %s", res.StatusCode, body, status, code)
	}
}

func logger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// simulatorKey is the API key of the tests' simulators: the demo must send
// it, or the simulator's admin API refuses it.
const simulatorKey = "sk_sim_demo_test"

// newPSP starts the payment simulator on a loopback port and returns it
// with the demo's client of it.
func newPSP(t *testing.T) (*pspsim.Server, *demo.Simulator) {
	t.Helper()
	psp, err := pspsim.New(pspsim.Config{APIKey: simulatorKey}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(psp.Handler())
	t.Cleanup(srv.Close)
	return psp, demo.NewSimulator(srv.URL, demo.WithAPIKey(simulatorKey))
}

// notSimulator is a provider that is no simulator: it has no ledger and no
// admin API, as a real one.
func notSimulator(t *testing.T) *demo.Simulator {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":{"type":"invalid_request_error","code":"resource_missing"}}`))
	}))
	t.Cleanup(srv.Close)
	return demo.NewSimulator(srv.URL, demo.WithAPIKey("sk_live_whatever"))
}

func TestChaosLoseResponse(t *testing.T) {
	t.Parallel()
	srv, executed := server(t, demo.NewHandler(nil, nil, nil, logger(), time.Now, demo.WithDemoMode(true)))
	_, _, err := send(t, srv, "POST", "/v1/things", "{}", map[string]string{demo.HeaderChaos: demo.ChaosLoseResponse})
	if err == nil {
		t.Fatal("the response arrived; want the connection closed without an answer")
	}
	if n := executed.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1: the request must execute before its answer is lost", n)
	}
	res, body, err := send(t, srv, "POST", "/v1/things", "{}", nil)
	if err != nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("without the header: %v %v %s", err, res, body)
	}
}

func TestChaosLosesErrorAnswersToo(t *testing.T) {
	t.Parallel()
	srv, _ := server(t, demo.NewHandler(nil, nil, nil, logger(), time.Now, demo.WithDemoMode(true)))
	// A 404 of the router is an answer like any other: it is lost too.
	if _, _, err := send(t, srv, "POST", "/v1/nothing", "{}", map[string]string{demo.HeaderChaos: demo.ChaosLoseResponse}); err == nil {
		t.Fatal("the error answer arrived; want the connection closed")
	}
}

func TestChaosRefusedOutsideDemoMode(t *testing.T) {
	t.Parallel()
	srv, executed := server(t, demo.NewHandler(nil, nil, nil, logger(), time.Now))
	res, body, err := send(t, srv, "POST", "/v1/things", "{}", map[string]string{demo.HeaderChaos: demo.ChaosLoseResponse})
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, res, body, http.StatusNotFound, problem.NotFound)
	if n := executed.Load(); n != 0 {
		t.Fatalf("handler ran %d times outside demo mode, want 0", n)
	}
	// Requests without the header are untouched.
	if res, body, err := send(t, srv, "POST", "/v1/things", "{}", nil); err != nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("without the header: %v %s", err, body)
	}
}

func TestChaosUnknownValue(t *testing.T) {
	t.Parallel()
	srv, executed := server(t, demo.NewHandler(nil, nil, nil, logger(), time.Now, demo.WithDemoMode(true)))
	res, body, err := send(t, srv, "POST", "/v1/things", "{}", map[string]string{demo.HeaderChaos: "set-fire"})
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, res, body, http.StatusUnprocessableEntity, problem.ValidationFailed)
	if executed.Load() != 0 {
		t.Fatal("handler ran for an unknown chaos value")
	}
}

func TestEndpointsOutsideDemoMode(t *testing.T) {
	t.Parallel()
	replay := func(_ context.Context, _ uuid.UUID) error { return nil }
	_, sim := newPSP(t)
	srv, _ := server(t, demo.NewHandler(nil, nil, nil, logger(), time.Now, demo.WithSimulator(sim), demo.WithReplay(replay)))
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/demo", ""},
		{"GET", "/demo/faults", ""},
		{"PUT", "/demo/faults", `{"drop_next":1}`},
		{"GET", "/demo/orders/01a22931-c9da-71c4-a494-fc128972f4cb/payments", ""},
		{"POST", "/demo/events/01a22931-c9da-71c4-a494-fc128972f4cb/replay", ""},
	} {
		res, body, err := send(t, srv, r.method, r.path, r.body, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantCode(t, res, body, http.StatusNotFound, problem.NotFound)
	}
}

func TestStatus(t *testing.T) {
	t.Parallel()
	srv, _ := server(t, demo.NewHandler(nil, nil, nil, logger(), time.Now, demo.WithDemoMode(true)))
	res, body, err := send(t, srv, "GET", "/demo", "", nil)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /demo: %v %s", err, body)
	}
	for _, want := range []string{
		`"demo_mode":true`, `"api_key":"sk_test_acme"`, `"api_key":"sk_test_globex"`, `"pm_card_declined"`,
		`"chaos":{"lose_response":true,"provider_faults":false,"event_replay":false}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /demo = %s, want %s in it", body, want)
		}
	}
}

// provider_faults says whether the configured provider is a simulator that
// answers its admin API with our key: the simulator does, a provider that
// is none does not, and neither does a simulator that refuses the key.
func TestStatusAsksTheProvider(t *testing.T) {
	t.Parallel()
	_, sim := newPSP(t)
	psp, _ := newPSP(t)
	wrongKey := httptest.NewServer(psp.Handler())
	t.Cleanup(wrongKey.Close)
	for _, tc := range []struct {
		name string
		sim  *demo.Simulator
		want bool
	}{
		{"simulator", sim, true},
		{"not a simulator", notSimulator(t), false},
		{"simulator refusing the key", demo.NewSimulator(wrongKey.URL, demo.WithAPIKey("sk_sim_wrong")), false},
	} {
		srv, _ := server(t, demo.NewHandler(nil, nil, nil, logger(), time.Now, demo.WithDemoMode(true), demo.WithSimulator(tc.sim)))
		res, body, err := send(t, srv, "GET", "/demo", "", nil)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("%s: GET /demo: %v %s", tc.name, err, body)
		}
		if want := fmt.Sprintf(`"provider_faults":%t`, tc.want); !strings.Contains(body, want) {
			t.Errorf("%s: GET /demo = %s, want %s in it", tc.name, body, want)
		}
	}
}

// PUT /demo/faults arms the tenant's own faults at the simulator: another
// tenant's, and the simulator's global settings, stay as they were.
func TestSetFaults(t *testing.T) {
	t.Parallel()
	psp, sim := newPSP(t)
	if err := psp.SetFaults(pspsim.Faults{LatencyMS: 7, FailNext: 2}); err != nil {
		t.Fatal(err)
	}
	if err := psp.SetScopedFaults(pspsim.ScopedFaults{Scope: tenantB.String(), TimeoutNext: 3}); err != nil {
		t.Fatal(err)
	}
	srv, _ := server(t, demo.NewHandler(nil, nil, nil, logger(), time.Now, demo.WithDemoMode(true), demo.WithSimulator(sim)))
	res, body, err := send(t, srv, "PUT", "/demo/faults", `{"drop_next":1}`, nil)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("PUT /demo/faults: %v %s", err, body)
	}
	if body != `{"timeout_next":0,"fail_next":0,"drop_next":1}` {
		t.Fatalf("answer = %s", body)
	}
	// Idempotent: the same PUT arms one drop, not two.
	if _, _, err := send(t, srv, "PUT", "/demo/faults", `{"drop_next":1,"fail_next":1}`, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := send(t, srv, "PUT", "/demo/faults", `{"drop_next":1}`, nil); err != nil {
		t.Fatal(err)
	}
	if f := psp.ScopedFaults(tenantA.String()); f.DropNext != 1 || f.FailNext != 1 || f.TimeoutNext != 0 {
		t.Fatalf("tenant A's faults = %+v, want drop_next 1 and fail_next 1", f)
	}
	if f := psp.ScopedFaults(tenantB.String()); f != (pspsim.ScopedFaults{Scope: tenantB.String(), TimeoutNext: 3}) {
		t.Fatalf("tenant B's faults = %+v: tenant A changed them", f)
	}
	if f := psp.Faults(); f.DropNext != 0 || f.FailNext != 2 || f.LatencyMS != 7 {
		t.Fatalf("global faults = %+v, want fail_next 2 and latency 7 kept, nothing armed", f)
	}
	for _, bad := range []string{`{"timeout_next":6}`, `{"fail_next":-1}`, `{"drop_nxt":1}`} {
		res, body, err := send(t, srv, "PUT", "/demo/faults", bad, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantCode(t, res, body, http.StatusUnprocessableEntity, problem.ValidationFailed)
	}
	res, body, err = send(t, srv, "GET", "/demo/faults", "", nil)
	if err != nil || res.StatusCode != http.StatusOK || body != `{"timeout_next":0,"fail_next":1,"drop_next":1}` {
		t.Fatalf("GET /demo/faults = %v %s", err, body)
	}
	res, body, err = send(t, srv, "GET", "/demo/faults", "", map[string]string{testTenantHeader: tenantB.String()})
	if err != nil || res.StatusCode != http.StatusOK || body != `{"timeout_next":3,"fail_next":0,"drop_next":0}` {
		t.Fatalf("GET /demo/faults of tenant B = %v %s", err, body)
	}
}

// A simulator that answers its fault switches without scoping them would
// make one tenant's faults everyone's: the demo does not use it.
func TestFaultsNeedASimulatorThatScopesThem(t *testing.T) {
	t.Parallel()
	unscoped := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"latency_ms":0,"fail_rate":0,"fail_next":0,"drop_next":0,"timeout_next":0}`))
	}))
	t.Cleanup(unscoped.Close)
	srv, _ := server(t, demo.NewHandler(nil, nil, nil, logger(), time.Now, demo.WithDemoMode(true), demo.WithSimulator(demo.NewSimulator(unscoped.URL))))
	res, body, err := send(t, srv, "PUT", "/demo/faults", `{"drop_next":1}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, res, body, http.StatusNotFound, problem.NotFound)
	if _, body, _ := send(t, srv, "GET", "/demo", "", nil); !strings.Contains(body, `"provider_faults":false`) {
		t.Fatalf("GET /demo = %s, want provider_faults false", body)
	}
}

func TestWithoutSimulatorOrReplay(t *testing.T) {
	t.Parallel()
	for _, sim := range []*demo.Simulator{nil, notSimulator(t)} {
		srv, _ := server(t, demo.NewHandler(nil, nil, nil, logger(), time.Now, demo.WithDemoMode(true), demo.WithSimulator(sim)))
		for _, r := range []struct{ method, path, body string }{
			{"GET", "/demo/faults", ""},
			{"PUT", "/demo/faults", `{"drop_next":1}`},
			{"POST", "/demo/events/01a22931-c9da-71c4-a494-fc128972f4cb/replay", ""},
		} {
			res, body, err := send(t, srv, r.method, r.path, r.body, nil)
			if err != nil {
				t.Fatal(err)
			}
			wantCode(t, res, body, http.StatusNotFound, problem.NotFound)
		}
	}
}
