package httpapi

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/testkit"
	"github.com/oncepay/oncepay/internal/wire"
)

// lines collects JSON log lines written from the server's goroutines.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buf.Len() == 0 {
		return nil
	}
	return strings.Split(strings.TrimSpace(l.buf.String()), "\n")
}

// Every value of the request log line that the client chose is bounded: an
// Idempotency-Key is logged as the key only when it parsed, any other value
// of the header is logged cut to wire.MaxLoggedBytes with a marker, and so
// are a long method and a long path. A 60 KB header makes a short line.
func TestRequestLogBoundsWhatTheClientSent(t *testing.T) {
	t.Parallel()
	logs := &lines{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	e := echo.New()
	e.HideBanner = true
	e.HTTPErrorHandler = ErrorHandler(logger)
	e.Use(clientRequestID, middleware.RequestID(),
		requestLogger(logger, func(string, string, int, time.Duration) {}))
	e.Any("/*", func(c echo.Context) error {
		if _, err := idempotency.ParseKey(c.Request().Header); err != nil {
			return err
		}
		return c.NoContent(http.StatusCreated)
	})
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)

	huge := strings.Repeat("k", 60<<10)
	for _, tc := range []struct {
		name, method, path, key string
		status                  int
		logged, invalid         string // the key logged as such, or the bounded invalid one
	}{
		{"valid key", "POST", "/orders", "order-7f3a", 201, "order-7f3a", ""},
		{"quoted key", "POST", "/orders", `"order-7f3b"`, 201, "order-7f3b", ""},
		{"key with a space", "POST", "/orders", "two words", 400, "", "two words"},
		{"60 KB key", "POST", "/orders", huge, 400, "", huge[:wire.MaxLoggedBytes] + "…(truncated, 61440 bytes)"},
		{"long method", strings.Repeat("M", 10<<10), "/orders", "k1", 405, "k1", ""},
		{"long path", "POST", "/" + strings.Repeat("p", 20<<10), "k2", 201, "k2", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(logs.all())
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set(idempotency.HeaderKey, tc.key)
			r := testkit.Do(t, srv.Client(), req)
			if r.Status != tc.status {
				t.Fatalf("status %d, want %d", r.Status, tc.status)
			}
			if tc.status == 400 {
				testkit.WantProblem(t, r, 400, problem.IdempotencyKeyInvalid)
			}
			all := logs.all()
			if len(all) != before+1 {
				t.Fatalf("%d new log lines, want 1", len(all)-before)
			}
			line := all[len(all)-1]
			if len(line) > 2*wire.MaxLoggedBytes+512 {
				t.Fatalf("log line of %d bytes: %.300s", len(line), line)
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(line), &got); err != nil {
				t.Fatal(err)
			}
			if k, _ := got["idempotency_key"].(string); k != tc.logged {
				t.Fatalf("idempotency_key %q, want %q", k, tc.logged)
			}
			if k, _ := got["idempotency_key_invalid"].(string); k != tc.invalid {
				t.Fatalf("idempotency_key_invalid %.300q, want %.300q", k, tc.invalid)
			}
			for _, f := range []string{"method", "path"} {
				if v, _ := got[f].(string); len(v) > wire.MaxLoggedBytes+64 || len(tc.method) > wire.MaxLoggedBytes && f == "method" && !strings.Contains(v, "(truncated, 10240 bytes)") {
					t.Fatalf("%s logged as %.300q", f, v)
				}
			}
		})
	}
}
