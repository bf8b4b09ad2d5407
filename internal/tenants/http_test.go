package tenants_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/httpapi"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/tenants"
	"github.com/oncepay/oncepay/internal/testkit"
)

// whoami serves GET /whoami behind the middleware over loopback HTTP,
// answering with the tenant the middleware put into the context; reached
// counts the requests that got past the middleware.
func whoami(t *testing.T, svc *tenants.Service) (url string, reached *atomic.Int64) {
	t.Helper()
	reached = &atomic.Int64{}
	e := echo.New()
	e.HideBanner = true
	e.HTTPErrorHandler = httpapi.ErrorHandler(testkit.Logger(t))
	e.GET("/whoami", func(c echo.Context) error {
		reached.Add(1)
		tn := tenants.FromContext(c)
		return c.JSON(http.StatusOK, map[string]string{"id": tn.ID.String(), "slug": tn.Slug})
	}, tenants.Middleware(svc))
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv.URL + "/whoami", reached
}

func get(t *testing.T, url, authorization string) testkit.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	return testkit.Do(t, http.DefaultClient, req)
}

const (
	detailMissing = "Send your API key in the Authorization header as: Bearer <key>."
	detailInvalid = "The API key is not valid."
)

func TestMiddleware(t *testing.T) {
	t.Parallel()
	b := setup(t)
	svc, _ := b.service(t, tenants.WithCacheTTL(time.Minute))
	url, reached := whoami(t, svc)
	for _, tc := range []struct {
		name, authorization string
		detail              string // of the 401; "" when the key is good
	}{
		{"no header", "", detailMissing},
		{"other scheme", "Basic " + b.a.APIKey, detailMissing},
		{"no scheme", b.a.APIKey, detailMissing},
		{"scheme without a key", "Bearer ", detailMissing},
		{"unknown key", "Bearer sk_live_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", detailInvalid},
		{"good key", "Bearer " + b.a.APIKey, ""},
		{"scheme in any case", "bearer " + b.a.APIKey, ""},
		{"spaces around the key", "Bearer  " + b.a.APIKey + " ", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := reached.Load()
			r := get(t, url, tc.authorization)
			if tc.detail != "" {
				p := testkit.WantProblem(t, r, http.StatusUnauthorized, problem.Unauthorized)
				if p.Detail != tc.detail || r.Header.Get("WWW-Authenticate") == "" {
					t.Fatalf("401 detail %q, WWW-Authenticate %q; want %q and a scheme", p.Detail, r.Header.Get("WWW-Authenticate"), tc.detail)
				}
				if reached.Load() != before {
					t.Fatal("the handler ran for a refused request")
				}
				return
			}
			var got map[string]string
			if r.Status != http.StatusOK || json.Unmarshal(r.Body, &got) != nil {
				t.Fatalf("answer = %d %s, want 200", r.Status, r.Body)
			}
			if got["id"] != b.a.ID.String() || got["slug"] != b.a.Slug {
				t.Fatalf("tenant in the context = %v, want %s (%s)", got, b.a.Slug, b.a.ID)
			}
		})
	}
	// Each key puts its own tenant into the context.
	var got map[string]string
	if r := get(t, url, "Bearer "+b.b.APIKey); r.Status != http.StatusOK || json.Unmarshal(r.Body, &got) != nil || got["slug"] != b.b.Slug {
		t.Fatalf("key of %s: %d %s", b.b.Slug, r.Status, r.Body)
	}
}

// Two Authorization headers are refused, even when both name a good key
// (of one tenant or of two): the first one does not win silently.
func TestMiddlewareRefusesTwoAuthorizationHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	svc, _ := b.service(t, tenants.WithCacheTTL(time.Minute))
	url, reached := whoami(t, svc)
	for _, second := range []string{b.a.APIKey, b.b.APIKey} {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Add("Authorization", "Bearer "+b.a.APIKey)
		req.Header.Add("Authorization", "Bearer "+second)
		p := testkit.WantProblem(t, testkit.Do(t, http.DefaultClient, req), http.StatusUnauthorized, problem.Unauthorized)
		if p.Detail != "Send exactly one Authorization header." {
			t.Fatalf("detail %q", p.Detail)
		}
	}
	if n := reached.Load(); n != 0 {
		t.Fatalf("the handler ran %d times for refused requests", n)
	}
}

// When the keys cannot be read, the answer is a 500 the client may retry,
// not a 401 that tells it its key is bad.
func TestMiddlewareWithoutTheDatabaseIsNotUnauthorized(t *testing.T) {
	t.Parallel()
	b := setup(t)
	svc, cutOff := b.service(t, tenants.WithCacheTTL(0))
	url, reached := whoami(t, svc)
	cutOff()
	testkit.WantProblem(t, get(t, url, "Bearer "+b.a.APIKey), http.StatusInternalServerError, problem.Internal)
	if reached.Load() != 0 {
		t.Fatal("the handler ran without an authenticated tenant")
	}
}

// Behind no middleware there is no tenant: the zero Tenant, which matches
// no row, so a route wired without authentication fails closed.
func TestFromContextWithoutMiddleware(t *testing.T) {
	t.Parallel()
	c := echo.New().NewContext(httptest.NewRequest(http.MethodGet, "/", nil), httptest.NewRecorder())
	if got := tenants.FromContext(c); got != (tenants.Tenant{}) {
		t.Fatalf("FromContext = %+v, want the zero Tenant", got)
	}
}
