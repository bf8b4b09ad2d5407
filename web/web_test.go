package web_test

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/web"
)

func serve(t *testing.T, method, path string, header http.Header) *httptest.ResponseRecorder {
	t.Helper()
	e := echo.New()
	ui := web.Handler()
	e.GET("/", ui)
	e.GET("/assets/*", ui)
	req := httptest.NewRequest(method, path, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	return rec
}

func TestHandler(t *testing.T) {
	t.Parallel()
	tests := []struct {
		path       string
		status     int
		typePrefix string
	}{
		{"/", http.StatusOK, "text/html"},
		{"/assets/app.js", http.StatusOK, "text/javascript"},
		{"/assets/app.css", http.StatusOK, "text/css"},
		{"/assets/favicon.svg", http.StatusOK, "image/svg+xml"},
		{"/assets/missing.js", http.StatusNotFound, ""},
		{"/assets/", http.StatusNotFound, ""},
		{"/assets/../web.go", http.StatusNotFound, ""},
		{"/assets/%2e%2e/web.go", http.StatusNotFound, ""},
	}
	for _, tt := range tests {
		rec := serve(t, "GET", tt.path, nil)
		if rec.Code != tt.status {
			t.Errorf("GET %s = %d, want %d", tt.path, rec.Code, tt.status)
			continue
		}
		if tt.status != http.StatusOK {
			continue
		}
		if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, tt.typePrefix) {
			t.Errorf("GET %s Content-Type = %q, want %s", tt.path, ct, tt.typePrefix)
		}
		if rec.Header().Get("ETag") == "" || rec.Header().Get("Cache-Control") != "no-cache" {
			t.Errorf("GET %s: ETag %q, Cache-Control %q", tt.path, rec.Header().Get("ETag"), rec.Header().Get("Cache-Control"))
		}
	}
	if csp := serve(t, "GET", "/", nil).Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
		t.Errorf("index.html CSP = %q", csp)
	}
}

func TestHandlerRevalidates(t *testing.T) {
	t.Parallel()
	first := serve(t, "GET", "/assets/app.js", nil)
	again := serve(t, "GET", "/assets/app.js", http.Header{"If-None-Match": {first.Header().Get("ETag")}})
	if again.Code != http.StatusNotModified {
		t.Fatalf("revalidation = %d, want 304", again.Code)
	}
}

// TestEverythingIsLocal keeps the UI working offline: every file that
// index.html or a module names exists, and nothing is loaded from elsewhere.
func TestEverythingIsLocal(t *testing.T) {
	t.Parallel()
	fsys := web.FS()
	index, err := fs.ReadFile(fsys, "index.html")
	if err != nil {
		t.Fatal(err)
	}
	refs := regexp.MustCompile(`(?:src|href)="(/[^"]*)"`).FindAllStringSubmatch(string(index), -1)
	if len(refs) < 3 {
		t.Fatalf("index.html references %d local files, want the script, the styles and the icon", len(refs))
	}
	for _, m := range refs {
		if _, err := fs.Stat(fsys, strings.TrimPrefix(m[1], "/")); err != nil {
			t.Errorf("index.html references %s: %v", m[1], err)
		}
	}
	imports := regexp.MustCompile(`from '\./([^']+)'`)
	external := regexp.MustCompile(`(?i)(?:src|href)\s*=\s*["']?(?:https?:)?//|url\(\s*["']?(?:https?:)?//|@import|import\s*\(?\s*["'](?:https?:)?//`)
	err = fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return err
		}
		if loc := external.FindString(string(body)); loc != "" {
			t.Errorf("%s loads something from elsewhere: %q", name, loc)
		}
		if strings.HasSuffix(name, ".js") {
			for _, m := range imports.FindAllStringSubmatch(string(body), -1) {
				if _, err := fs.Stat(fsys, "assets/"+m[1]); err != nil {
					t.Errorf("%s imports %s: %v", name, m[1], err)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
