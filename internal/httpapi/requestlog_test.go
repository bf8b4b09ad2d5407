package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/demo"
	"github.com/oncepay/oncepay/internal/httpapi"
	"github.com/oncepay/oncepay/internal/testkit"
)

// A 5xx is logged once, on the request's own line, at ERROR: that line
// carries the request id, the method, the route, the status, the error and
// its code, whichever way the error reached the error handler (returned by
// the handler, recovered from a panic, rendered into a lost answer, or after
// the answer was sent). Two ERROR lines for one failure would double every
// alert that counts them.
func TestA5xxIsLoggedOnce(t *testing.T) {
	t.Parallel()
	logs := &logBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	service := httpapi.New(hangingUpDatabase(t), nil, nil, nil, nil, nil, nil,
		demo.NewHandler(nil, nil, nil, logger, time.Now, demo.WithDemoMode(true)), logger)
	// Routes added to the service's echo run through its whole chain.
	service.GET("/test/fails", fail(errors.New("cause of the failure")))
	service.GET("/test/panics", func(echo.Context) error { panic("cause of the failure") })
	service.GET("/test/fails-after-answering", func(c echo.Context) error {
		if err := c.String(http.StatusOK, "partial answer"); err != nil {
			return err
		}
		return errors.New("cause of the failure")
	})
	starting := httpapi.Starting(func() string { return "the database" }, logger)

	for _, tc := range []struct {
		name         string
		e            *echo.Echo
		path, header string
		route        string
		status       int
		code         string
		cause        string // in the logged error
	}{
		{"returned by the handler", service, "/test/fails", "", "/test/fails", 500, "internal_error", "cause of the failure"},
		{"a panic", service, "/test/panics", "", "/test/panics", 500, "internal_error", "cause of the failure"},
		{"after the answer was sent", service, "/test/fails-after-answering", "", "/test/fails-after-answering", 200, "internal_error", "cause of the failure"},
		{"a lost answer", service, "/test/fails", demo.ChaosLoseResponse, "/test/fails", 500, "internal_error", "cause of the failure"},
		{"the database hangs up", service, "/readyz", "", "/readyz", 503, "service_unavailable", "The database is not reachable"},
		{"starting", starting, "/v1/orders", "", "/*", 503, "service_unavailable", "waits for the database"},
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
			if tc.header != "" {
				req.Header.Set(demo.HeaderChaos, tc.header)
			}
			res, err := srv.Client().Do(req)
			if tc.header == "" {
				if err != nil {
					t.Fatal(err)
				}
				_ = res.Body.Close()
			} else if err == nil {
				_ = res.Body.Close()
				t.Fatalf("the answer of a request that loses it arrived: %d", res.StatusCode)
			}
			// The request's line is its last; a lost answer's client sees
			// the connection close before it is written.
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
