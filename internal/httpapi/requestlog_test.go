package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/httpapi"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/tenants"
	"github.com/oncepay/oncepay/internal/testkit"
)

// A 5xx is logged once, on the request's own line, at ERROR: that line
// carries the request id, the method, the route, the status, the error and
// its code, whichever way the error reached the error handler (returned by
// the handler, recovered from a panic, or after the answer was sent; an
// answer a demo loses on purpose has its own test where the demo is). Two
// ERROR lines for one failure would double every alert that counts them.
func TestA5xxIsLoggedOnce(t *testing.T) {
	t.Parallel()
	logs := &logBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	service := httpapi.New(hangingUpDatabase(t), nil, nil, nil, nil, nil, nil, nil, logger)
	// Routes added to the service's echo run through its whole chain.
	service.GET("/test/fails", fail(errors.New("cause of the failure")))
	service.GET("/test/panics", func(echo.Context) error { panic("cause of the failure") })
	service.GET("/test/fails-after-answering", func(c echo.Context) error {
		if err := c.String(http.StatusOK, "partial answer"); err != nil {
			return err
		}
		return errors.New("cause of the failure")
	})

	for _, tc := range []struct {
		name   string
		e      *echo.Echo
		path   string
		route  string
		status int
		code   string
		cause  string // in the logged error
	}{
		{"returned by the handler", service, "/test/fails", "/test/fails", 500, "internal_error", "cause of the failure"},
		{"a panic", service, "/test/panics", "/test/panics", 500, "internal_error", "cause of the failure"},
		{"after the answer was sent", service, "/test/fails-after-answering", "/test/fails-after-answering", 200, "internal_error", "cause of the failure"},
		{"the database hangs up", service, "/readyz", "/readyz", 503, "service_unavailable", "The database is not reachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(tc.e)
			t.Cleanup(srv.Close)
			rid := "rid-" + strings.ReplaceAll(tc.name, " ", "-")
			req, err := http.NewRequest(http.MethodGet, srv.URL+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set(echo.HeaderXRequestID, rid)
			res, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = res.Body.Close()
			lines := func() []map[string]any {
				var mine []map[string]any
				for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
					var got map[string]any
					if err := json.Unmarshal([]byte(line), &got); err != nil {
						t.Fatalf("log line %q: %v", line, err)
					}
					if got["request_id"] == rid {
						mine = append(mine, got)
					}
				}
				return mine
			}
			testkit.WaitFor(t, 10*time.Second, "the request's log line", func() bool {
				return slices.ContainsFunc(lines(), func(l map[string]any) bool { return l["msg"] == "request" })
			})
			var errorLines []map[string]any
			for _, l := range lines() {
				if l["level"] == "ERROR" {
					errorLines = append(errorLines, l)
				}
			}
			if len(errorLines) != 1 {
				t.Fatalf("%d ERROR lines for one 5xx, want 1: %v", len(errorLines), errorLines)
			}
			got := errorLines[0]
			for field, want := range map[string]any{
				"msg": "request", "method": "GET", "path": tc.path, "route": tc.route,
				"status": float64(tc.status), "code": tc.code,
			} {
				if got[field] != want {
					t.Errorf("%s = %v, want %v (line %v)", field, got[field], want, got)
				}
			}
			if e, _ := got["error"].(string); !strings.Contains(e, tc.cause) {
				t.Errorf("error = %q, want it to contain %q", e, tc.cause)
			}
		})
	}
}

// The answers that are the service working as designed are not errors: a
// client that hangs up is logged as what it is, 499 client_closed_request
// at INFO, whatever its request was waiting for (here: the lookup of an
// unknown key in a database that has not answered yet, after a complete
// GET), and a starting service's 503s, /readyz's above all, are how a
// start looks: logged at INFO with their code, never at ERROR.
func TestExpectedAnswersAreLoggedAtInfo(t *testing.T) {
	t.Parallel()
	logs := &logBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	db := silentDatabase(t)
	service := httpapi.New(db, nil, nil, tenants.NewService(db, time.Now), nil, nil, nil, nil, logger)
	starting := httpapi.Starting(func() string { return "the database" }, logger)

	for _, tc := range []struct {
		name   string
		e      *echo.Echo
		path   string
		hangUp bool
		route  string
		status int
		code   string
	}{
		{"a client that hangs up, with an unknown key", service, "/v1/orders", true, "/v1/orders", problem.StatusClientClosedRequest, "client_closed_request"},
		{"a client that hangs up while the database is asked if it is ready", service, "/readyz", true, "/readyz", problem.StatusClientClosedRequest, "client_closed_request"},
		{"readiness while starting", starting, "/readyz", false, "/*", 503, "service_unavailable"},
		{"a request while starting", starting, "/v1/orders", false, "/*", 503, "service_unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(tc.e)
			t.Cleanup(srv.Close)
			rid := "rid-" + strings.ReplaceAll(tc.name, " ", "-")
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			req := "GET " + tc.path + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk_live_unknown\r\nX-Request-Id: " + rid + "\r\n\r\n"
			if _, err := conn.Write([]byte(req)); err != nil {
				t.Fatal(err)
			}
			if tc.hangUp {
				_ = conn.Close() // the whole request was sent; its answer is not awaited
			} else if _, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil {
				t.Fatal(err)
			}
			var mine []map[string]any
			testkit.WaitFor(t, 10*time.Second, "the request's log line", func() bool {
				mine = nil
				for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
					var got map[string]any
					if json.Unmarshal([]byte(l), &got) == nil && got["request_id"] == rid {
						mine = append(mine, got)
					}
				}
				return slices.ContainsFunc(mine, func(l map[string]any) bool { return l["msg"] == "request" })
			})
			if len(mine) != 1 {
				t.Fatalf("%d lines for one request, want 1: %v", len(mine), mine)
			}
			for field, want := range map[string]any{
				"msg": "request", "level": "INFO", "route": tc.route, "status": float64(tc.status), "code": tc.code,
			} {
				if mine[0][field] != want {
					t.Errorf("%s = %v, want %v (line %v)", field, mine[0][field], want, mine[0])
				}
			}
		})
	}
}

// silentDatabase returns a pool whose server accepts each connection and
// never answers: every statement waits until its context ends, as with a
// database that is slow to answer.
func silentDatabase(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	}()
	pool, err := pgxpool.New(context.Background(), "postgres://oncepay@"+ln.Addr().String()+"/oncepay?sslmode=disable&connect_timeout=30")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// hangingUpDatabase returns a pool whose server accepts each connection and
// closes it at once: every statement fails, as with a database that went
// away.
func hangingUpDatabase(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_ = conn.Close()
		}
	}()
	pool, err := pgxpool.New(context.Background(), "postgres://oncepay@"+ln.Addr().String()+"/oncepay?sslmode=disable&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
