package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/httpapi"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/testkit"
)

// routes builds the HTTP surface with opts and no working collaborators:
// enough for the routes that answer before any of them is called.
func routes(t *testing.T, opts ...httpapi.Option) *echo.Echo {
	t.Helper()
	logger := testkit.Logger(t)
	return httpapi.New(nil, nil, nil, nil, nil, nil, nil, nil, logger, opts...)
}

func status(e *echo.Echo, method, path string) int {
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Code
}

// The operator's outbox endpoints exist only with WithOutboxAdmin and a
// token (ADMIN_TOKEN): without either they answer 404 like a path that does
// not exist; with both they are routed, and refuse a request without the
// token.
func TestOutboxAdminRoutesNeedTheOptionAndAToken(t *testing.T) {
	t.Parallel()
	admin := outbox.NewAdminHandler(nil)
	for _, c := range []struct {
		name string
		opts []httpapi.Option
		want int
	}{
		{"without the option", nil, http.StatusNotFound},
		{"with an empty token", []httpapi.Option{httpapi.WithOutboxAdmin(admin, "")}, http.StatusNotFound},
		{"with a token", []httpapi.Option{httpapi.WithOutboxAdmin(admin, "admin-token-of-the-route-tests-0123456789")}, http.StatusUnauthorized},
	} {
		e := routes(t, c.opts...)
		for _, r := range []struct{ method, path string }{
			{"GET", "/admin/outbox/stuck"},
			{"POST", "/admin/outbox/events/01a22931-c9da-71c4-a494-fc128972f4cb/retry"},
			{"POST", "/admin/outbox/events/01a22931-c9da-71c4-a494-fc128972f4cb/replay"},
		} {
			if got := status(e, r.method, r.path); got != c.want {
				t.Errorf("%s: %s %s = %d, want %d", c.name, r.method, r.path, got, c.want)
			}
		}
	}
}

// WithRequestObserver sees every request with its route pattern and
// status; without it requests are served all the same.
func TestRequestObserver(t *testing.T) {
	t.Parallel()
	if got := status(routes(t), "GET", "/healthz"); got != http.StatusOK {
		t.Fatalf("GET /healthz without an observer = %d, want 200", got)
	}
	var (
		mu   sync.Mutex
		seen []string
	)
	e := routes(t, httpapi.WithRequestObserver(func(method, route string, status int, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, method+" "+route+" "+http.StatusText(status))
	}))
	status(e, "GET", "/healthz")
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0] != "GET /healthz OK" {
		t.Fatalf("observed %q, want [GET /healthz OK]", seen)
	}
}
