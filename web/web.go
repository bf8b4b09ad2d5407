// Package web owns the browser UI: plain HTML, CSS and JavaScript modules,
// embedded in the binary and served by the API at "/", with no build step
// and nothing loaded from elsewhere (no CDN, no web fonts).
//
// The UI is a client of the public API like any other. It shows the
// idempotency contract from the client's side: one Idempotency-Key per
// business intent, never per attempt, kept in sessionStorage until the
// intent has a final answer, and every
// retry of the intent with that same key. In demo mode it also drives the
// demo endpoints (internal/demo) to break things on purpose and shows, from
// the provider's own ledger, that the order was charged exactly once.
package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

//go:embed index.html assets
var files embed.FS

// FS returns the UI's files: index.html and assets/.
func FS() fs.FS { return files }

// contentSecurityPolicy allows only this origin: the page loads its own
// scripts, styles and images and talks to its own API, nothing else.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Handler serves the UI: GET / is index.html, GET /assets/{file} the rest.
// Mount it on both routes. Unknown files are a 404 problem like any other
// unknown resource. Every answer carries an ETag and Cache-Control: no-cache,
// so a browser revalidates and never runs an old script against a new API.
func Handler() echo.HandlerFunc {
	return func(c echo.Context) error {
		name := strings.TrimPrefix(path.Clean("/"+c.Request().URL.Path), "/")
		if name == "" {
			name = "index.html"
		}
		if name != "index.html" && !strings.HasPrefix(name, "assets/") {
			return echo.ErrNotFound
		}
		body, err := fs.ReadFile(files, name)
		if err != nil { // no such file, or a directory such as assets/
			return echo.ErrNotFound
		}
		sum := sha256.Sum256(body)
		h := c.Response().Header()
		h.Set("ETag", `"`+base64.RawURLEncoding.EncodeToString(sum[:16])+`"`)
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		if name == "index.html" {
			h.Set("Content-Security-Policy", contentSecurityPolicy)
		}
		// ServeContent sets Content-Type from the extension and answers
		// If-None-Match with 304.
		http.ServeContent(c.Response(), c.Request(), name, time.Time{}, bytes.NewReader(body))
		return nil
	}
}
