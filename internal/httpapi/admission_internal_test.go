package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/tenants"
	"github.com/oncepay/oncepay/internal/testkit"
	"github.com/oncepay/oncepay/internal/wire"
)

// admissionServer serves /v1/work, which blocks until release is closed,
// and /healthz, behind a, on a loopback port.
func admissionServer(t *testing.T, a *Admission, release <-chan struct{}) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var started atomic.Int64
	e := echo.New()
	e.HideBanner = true
	e.HTTPErrorHandler = ErrorHandler(testkit.Logger(t))
	e.Use(a.middleware)
	e.POST("/v1/work", func(c echo.Context) error {
		started.Add(1)
		select {
		case <-release:
		case <-c.Request().Context().Done():
		}
		return wire.JSON(c, http.StatusCreated, map[string]string{"status": "done"})
	})
	e.GET("/healthz", healthz)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv, &started
}

// testClient bounds every exchange, so a request that is never shed fails
// the test instead of hanging it.
var testClient = &http.Client{Timeout: 10 * time.Second}

func post(t *testing.T, url string) (*http.Response, problem.Error) {
	t.Helper()
	resp, err := testClient.Post(url+"/v1/work", "application/json", nil)
	if err != nil {
		t.Errorf("POST: %v", err)
		return nil, problem.Error{}
	}
	defer resp.Body.Close()
	var p struct {
		Code problem.Code `json:"code"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&p)
	return resp, problem.Error{Code: p.Code}
}

// Past the limit a request waits at most the admission wait and is then
// shed with 503 overloaded and Retry-After, without reaching its handler;
// routes outside admission (probes) are answered all the while, and a slot
// that frees lets the next request in.
func TestAdmissionShedsPastTheLimit(t *testing.T) {
	t.Parallel()
	var shed atomic.Int64
	release := make(chan struct{})
	a := NewAdmission(2, 50*time.Millisecond, WithShedObserver(func(route string) {
		if route != "/v1/work" {
			t.Errorf("shed route = %q, want the template /v1/work", route)
		}
		shed.Add(1)
	}))
	srv, started := admissionServer(t, a, release)

	done := make(chan int, 2)
	for range 2 {
		go func() {
			resp, _ := post(t, srv.URL)
			if resp != nil {
				done <- resp.StatusCode
			}
		}()
	}
	testkit.WaitFor(t, 5*time.Second, "two requests admitted", func() bool { return a.InFlight(PoolAPI) == 2 && started.Load() == 2 })

	t0 := time.Now()
	resp, p := post(t, srv.URL)
	if resp == nil {
		t.Fatal("the request past the limit got no answer: it was not shed")
	}
	if waited := time.Since(t0); waited > 2*time.Second {
		t.Errorf("shed after %s, want about the admission wait (50ms)", waited)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || p.Code != problem.Overloaded {
		t.Fatalf("third request = %d %q, want 503 overloaded", resp.StatusCode, p.Code)
	}
	if got := resp.Header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After = %q, want 1", got)
	}
	if ct := resp.Header.Get("Content-Type"); ct != problem.ContentType {
		t.Errorf("Content-Type = %q, want %s", ct, problem.ContentType)
	}
	if n := started.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2: a shed request must do nothing", n)
	}
	if n := shed.Load(); n != 1 {
		t.Errorf("shed observer saw %d, want 1", n)
	}
	h, err := testClient.Get(srv.URL + "/healthz")
	if err != nil || h.StatusCode != http.StatusOK {
		t.Fatalf("healthz while full = %v %v, want 200", h, err)
	}
	h.Body.Close()

	close(release)
	for range 2 {
		if code := <-done; code != http.StatusCreated {
			t.Errorf("admitted request = %d, want 201", code)
		}
	}
	if resp, _ := post(t, srv.URL); resp == nil || resp.StatusCode != http.StatusCreated {
		t.Errorf("after the slots freed = %d, want 201", resp.StatusCode)
	}
	if n := a.InFlight(PoolAPI); n != 0 {
		t.Errorf("in flight after all answered = %d, want 0", n)
	}
}

// A request waiting for a slot is admitted when one frees within the wait.
func TestAdmissionWaitsForAFreedSlot(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	a := NewAdmission(1, time.Minute)
	srv, started := admissionServer(t, a, release)
	first := make(chan int, 1)
	go func() {
		if resp, _ := post(t, srv.URL); resp != nil {
			first <- resp.StatusCode
		}
	}()
	testkit.WaitFor(t, 5*time.Second, "the first request admitted", func() bool { return started.Load() == 1 })
	second := make(chan int, 1)
	go func() {
		if resp, _ := post(t, srv.URL); resp != nil {
			second <- resp.StatusCode
		}
	}()
	// The second request is at the gate (not in its handler) until the
	// first one ends.
	testkit.WaitFor(t, 5*time.Second, "the second request waiting", func() bool { return len(a.api.slots) == 1 && started.Load() == 1 })
	close(release)
	if c := <-first; c != http.StatusCreated {
		t.Errorf("first = %d, want 201", c)
	}
	if c := <-second; c != http.StatusCreated {
		t.Errorf("second = %d, want 201 (admitted when the slot freed)", c)
	}
}

// A client that goes away while its request waits is a client error, and
// the request never starts.
func TestAdmissionClientGoneWhileWaiting(t *testing.T) {
	t.Parallel()
	a := NewAdmission(1, time.Minute)
	a.api.slots <- struct{}{} // full
	e := echo.New()
	var ran atomic.Bool
	h := a.middleware(func(echo.Context) error { ran.Store(true); return nil })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/orders", nil)
	c := e.NewContext(req, httptest.NewRecorder())
	c.SetPath("/v1/orders")
	err := h(c)
	var p *problem.Error
	if !errors.As(err, &p) || p.Code != problem.ClientClosedRequest {
		t.Fatalf("err = %v, want client_closed_request", err)
	}
	if ran.Load() {
		t.Fatal("the handler ran")
	}
}

// Only the routes that do the service's work are subject to admission.
func TestAdmittedRoutes(t *testing.T) {
	t.Parallel()
	for route, want := range map[string]bool{
		"/v1/orders": true, "/v1/orders/:id/payments": true, "/webhooks/psp": true, "/demo/faults": true,
		"/healthz": false, "/readyz": false, "/metrics": false, "/openapi.yaml": false,
		"/admin/outbox/stuck": false, "/": false, "/assets/*": false, "": false,
	} {
		if got := admitted(route); got != want {
			t.Errorf("admitted(%q) = %t, want %t", route, got, want)
		}
	}
}

// workServer serves POST /v1/work and /webhooks/work, which block until
// release is closed, behind a, on a loopback port; /v1/work authenticates
// the tenant named by X-Tenant (a UUID) and holds it to its share. before
// runs ahead of admission.
func workServer(t *testing.T, a *Admission, release <-chan struct{}, before echo.MiddlewareFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var started atomic.Int64
	e := echo.New()
	e.HideBanner = true
	e.HTTPErrorHandler = ErrorHandler(testkit.Logger(t))
	if before != nil {
		e.Use(before)
	}
	e.Use(a.middleware)
	work := func(c echo.Context) error {
		started.Add(1)
		select {
		case <-release:
		case <-c.Request().Context().Done():
		}
		return wire.JSON(c, http.StatusCreated, map[string]string{"status": "done"})
	}
	auth := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			id, err := uuid.Parse(c.Request().Header.Get("X-Tenant"))
			if err != nil {
				return problem.New(problem.Unauthorized, "no tenant")
			}
			tenants.Put(c, tenants.Tenant{ID: id})
			return next(c)
		}
	}
	e.POST("/v1/work", work, a.authenticated(auth))
	e.POST("/webhooks/work", work)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv, &started
}

// send posts to path as tenant (none: uuid.Nil) and returns the status and
// the problem's code, in the background.
func send(t *testing.T, url string, tenant uuid.UUID) <-chan problem.Error {
	out := make(chan problem.Error, 1)
	go func() {
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{}`))
		if err != nil {
			t.Error(err)
			out <- problem.Error{}
			return
		}
		req.Header.Set("X-Tenant", tenant.String())
		resp, err := testClient.Do(req)
		if err != nil {
			t.Errorf("POST %s: %v", url, err)
			out <- problem.Error{}
			return
		}
		defer resp.Body.Close()
		var p struct {
			Code problem.Code `json:"code"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&p)
		out <- problem.Error{Code: p.Code, Detail: strconv.Itoa(resp.StatusCode)}
	}()
	return out
}

// A body that comes slowly holds no slot: while one request's body is
// still on its way, the only slot serves another request, and the slow one
// is answered 408 once the body timeout has passed, without reaching its
// handler.
func TestAdmissionReadsTheBodyBeforeTakingASlot(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	close(release)
	a := NewAdmission(1, 50*time.Millisecond, WithBodyReadTimeout(500*time.Millisecond))
	entered := make(chan struct{}, 1)
	srv, started := workServer(t, a, release, func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if c.Request().Header.Get("X-Slow") != "" {
				entered <- struct{}{}
			}
			return next(c)
		}
	})
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t0 := time.Now()
	if _, err := io.WriteString(conn, "POST /webhooks/work HTTP/1.1\r\nHost: x\r\nX-Slow: 1\r\nContent-Length: 300\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow request never reached admission")
	}
	for _, path := range []string{"/webhooks/work", "/webhooks/work"} {
		if p := <-send(t, srv.URL+path, uuid.Nil); p.Detail != "201" {
			t.Fatalf("a request while another's body is on its way = %s %q, want 201: the slow body holds the slot", p.Detail, p.Code)
		}
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to the slow body: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestTimeout {
		t.Errorf("slow body = %d, want 408", res.StatusCode)
	}
	if d := time.Since(t0); d < 500*time.Millisecond || d > 5*time.Second {
		t.Errorf("slow body answered after %s, want about the body timeout (500ms)", d)
	}
	if n := started.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2: the slow body must not reach it", n)
	}
}

// The provider's deliveries and the tenants' API have a pool each: either
// one full, the other still admits.
func TestAdmissionPoolsAreSeparate(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	a := NewAdmission(1, 20*time.Millisecond, WithWebhookLimit(1))
	srv, started := workServer(t, a, release, nil)
	tenant := uuid.New()
	api := send(t, srv.URL+"/v1/work", tenant)
	testkit.WaitFor(t, 5*time.Second, "the API's only slot taken", func() bool { return started.Load() == 1 })
	if p := <-send(t, srv.URL+"/v1/work", tenant); p.Code != problem.Overloaded {
		t.Fatalf("second API request = %s %q, want 503 overloaded", p.Detail, p.Code)
	}
	hook := send(t, srv.URL+"/webhooks/work", uuid.Nil)
	testkit.WaitFor(t, 5*time.Second, "the delivery admitted beside the full API pool", func() bool { return started.Load() == 2 })
	if p := <-send(t, srv.URL+"/webhooks/work", uuid.Nil); p.Code != problem.Overloaded {
		t.Fatalf("second delivery = %s %q, want 503 overloaded", p.Detail, p.Code)
	}
	if api, hooks := a.InFlight(PoolAPI), a.InFlight(PoolWebhooks); api != 1 || hooks != 1 {
		t.Errorf("in flight = api %d, webhooks %d, want 1 and 1", api, hooks)
	}
	close(release)
	for _, c := range []<-chan problem.Error{api, hook} {
		if p := <-c; p.Detail != "201" {
			t.Errorf("admitted request = %s, want 201", p.Detail)
		}
	}
}

// One tenant holds at most its share of the API's slots while another
// tenant holds some, and alone all but a reserve that another tenant's
// first request finds free: its request past its limit is shed at once
// though slots are free, and the other tenant is still admitted.
func TestAdmissionHoldsATenantToItsShare(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) (*Admission, string, *atomic.Int64, *atomic.Int64, chan struct{}) {
		release := make(chan struct{})
		var shed atomic.Int64
		a := NewAdmission(8, time.Minute, WithTenantShare(0.5), WithShedObserver(func(string) { shed.Add(1) }))
		srv, started := workServer(t, a, release, nil)
		return a, srv.URL + "/v1/work", started, &shed, release
	}
	shedAtOnce := func(t *testing.T, url string, tenant uuid.UUID, why string) {
		t.Helper()
		t0 := time.Now()
		if p := <-send(t, url, tenant); p.Code != problem.Overloaded || p.Detail != "503" {
			t.Fatalf("%s: %s %q, want 503 overloaded", why, p.Detail, p.Code)
		}
		if d := time.Since(t0); d > 5*time.Second {
			t.Errorf("shed after %s: a tenant past its limit is shed at once, not after the admission wait (1m)", d)
		}
	}
	finish := func(t *testing.T, release chan struct{}, held []<-chan problem.Error) {
		t.Helper()
		close(release)
		for _, c := range held {
			if p := <-c; p.Detail != "201" {
				t.Errorf("admitted request = %s, want 201", p.Detail)
			}
		}
	}
	t.Run("beside another tenant, its share", func(t *testing.T) {
		t.Parallel()
		a, url, started, shed, release := setup(t)
		if n := a.TenantLimit(); n != 4 {
			t.Fatalf("tenant limit = %d, want 4 (half of 8)", n)
		}
		greedy, other := uuid.New(), uuid.New()
		held := []<-chan problem.Error{send(t, url, other)}
		testkit.WaitFor(t, 5*time.Second, "the other tenant admitted", func() bool { return started.Load() == 1 })
		for range 4 {
			held = append(held, send(t, url, greedy))
		}
		testkit.WaitFor(t, 5*time.Second, "the greedy tenant's share admitted", func() bool { return started.Load() == 5 })
		shedAtOnce(t, url, greedy, "the greedy tenant's fifth request, 3 slots free")
		if n := shed.Load(); n != 1 {
			t.Errorf("shed observer saw %d, want 1", n)
		}
		if n := a.InFlight(PoolAPI); n != 5 {
			t.Errorf("in flight = %d, want 5: the shed request gave its slot back", n)
		}
		finish(t, release, held)
	})
	t.Run("alone, all but the reserve", func(t *testing.T) {
		t.Parallel()
		a, url, started, _, release := setup(t)
		if n := a.LoneLimit(); n != 7 {
			t.Fatalf("lone limit = %d, want 7 (all of 8 but one)", n)
		}
		greedy, other := uuid.New(), uuid.New()
		var held []<-chan problem.Error
		for range 7 {
			held = append(held, send(t, url, greedy))
		}
		testkit.WaitFor(t, 5*time.Second, "the lone tenant's seven requests admitted", func() bool { return started.Load() == 7 })
		shedAtOnce(t, url, greedy, "the lone tenant's eighth request: the last slot is kept for another tenant")
		held = append(held, send(t, url, other))
		testkit.WaitFor(t, 5*time.Second, "the other tenant admitted in the kept slot", func() bool { return started.Load() == 8 })
		finish(t, release, held)
		if p := <-send(t, url, greedy); p.Detail != "201" {
			t.Errorf("the greedy tenant after its requests ended = %s, want 201", p.Detail)
		}
	})
}
