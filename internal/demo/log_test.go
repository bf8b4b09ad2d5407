package demo_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/demo"
	"github.com/oncepay/oncepay/internal/httpapi"
	"github.com/oncepay/oncepay/internal/testkit"
)

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A 5xx whose answer the chaos middleware loses on purpose is logged once,
// on the request's own line, at ERROR with its cause, like any other 5xx of
// the service (internal/httpapi TestA5xxIsLoggedOnce): the error is
// rendered into the lost answer, not a second time by the service's error
// handler.
func TestALostAnswersFailureIsLoggedOnce(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	h := demo.NewHandler(nil, nil, nil, logger, time.Now, demo.WithDemoMode(true))
	service := httpapi.New(nil, nil, nil, nil, nil, nil, nil, nil, logger, httpapi.WithOuterMiddleware(h.Chaos))
	service.GET("/test/fails", func(echo.Context) error { return errors.New("cause of the failure") })
	srv := httptest.NewServer(service)
	t.Cleanup(srv.Close)

	req, err := http.NewRequest(http.MethodGet, srv.URL+"/test/fails", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(echo.HeaderXRequestID, "rid-lost")
	req.Header.Set(demo.HeaderChaos, demo.ChaosLoseResponse)
	if res, err := srv.Client().Do(req); err == nil {
		_ = res.Body.Close()
		t.Fatalf("the answer of a request that loses it arrived: %d", res.StatusCode)
	}
	// The client sees the connection close before the request's line is
	// written: wait for it.
	var lines []map[string]any
	testkit.WaitFor(t, 10*time.Second, "the request's log line", func() bool {
		lines = lines[:0]
		for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var got map[string]any
			if err := json.Unmarshal([]byte(line), &got); err == nil && got["request_id"] == "rid-lost" {
				lines = append(lines, got)
			}
		}
		for _, l := range lines {
			if l["msg"] == "request" {
				return true
			}
		}
		return false
	})
	var errorLines []map[string]any
	for _, l := range lines {
		if l["level"] == "ERROR" {
			errorLines = append(errorLines, l)
		}
	}
	if len(errorLines) != 1 {
		t.Fatalf("%d ERROR lines for one 5xx, want 1: %v", len(errorLines), errorLines)
	}
	got := errorLines[0]
	if got["msg"] != "request" || got["status"] != float64(500) || got["code"] != "internal_error" || got["route"] != "/test/fails" {
		t.Errorf("the ERROR line is %v, want the request's own line with 500 internal_error", got)
	}
	if e, _ := got["error"].(string); !strings.Contains(e, "cause of the failure") {
		t.Errorf("error = %q, want the cause", e)
	}
}
