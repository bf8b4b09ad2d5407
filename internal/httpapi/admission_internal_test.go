package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/problem"
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
	testkit.WaitFor(t, 5*time.Second, "two requests admitted", func() bool { return a.InFlight() == 2 && started.Load() == 2 })

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
	if n := a.InFlight(); n != 0 {
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
	testkit.WaitFor(t, 5*time.Second, "the second request waiting", func() bool { return len(a.slots) == 1 && started.Load() == 1 })
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
	a.slots <- struct{}{} // full
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
