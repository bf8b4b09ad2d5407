package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// report builds a govulncheck JSON stream: a config, the OSV entries, then
// the findings.
func report(lines ...string) string {
	return `{"config":{"protocol_version":"v1.0.0","scanner_name":"govulncheck"}}` + "\n" + strings.Join(lines, "\n")
}

const (
	osvEcho  = `{"osv":{"id":"GO-2026-6875","summary":"Reverse Proxy Forwards Attacker-Supplied X-Real-IP"}}`
	osvHTTP  = `{"osv":{"id":"GO-2026-1111","summary":"net/http: a bug"}}`
	echoCall = `{"finding":{"osv":"GO-2026-6875","trace":[{"module":"github.com/labstack/echo/v4","version":"v4.16.0","package":"github.com/labstack/echo/v4","function":"New"},{"module":"github.com/oncepay/oncepay","package":"github.com/oncepay/oncepay/internal/httpapi","function":"New"}]}}`
	httpCall = `{"finding":{"osv":"GO-2026-1111","fixed_version":"go1.26.10","trace":[{"module":"stdlib","version":"go1.26.8","package":"net/http","function":"Serve","receiver":"*Server"}]}}`
	// The same vulnerability found at the package level only: imported,
	// never called.
	httpImport = `{"finding":{"osv":"GO-2026-1111","fixed_version":"go1.26.10","trace":[{"module":"stdlib","version":"go1.26.8","package":"net/http"}]}}`
)

const listed = "# Security\n\n| Advisory | Module | Why |\n| --- | --- | --- |\n| `GO-2026-6875` | `github.com/labstack/echo/v4` | we use no echo proxy middleware |\n"

func TestPolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, doc, report string
		code              int
		says              string
	}{
		{"nothing called", "# Security\n", report(osvHTTP, httpImport), 0, "0 called vulnerabilities"},
		{"called with a fix", "# Security\n", report(osvHTTP, httpCall, httpCall), 1, "FAIL GO-2026-1111 stdlib@go1.26.8 is called and fixed in go1.26.10"},
		{"listed but fixed", listed + "| `GO-2026-1111` | stdlib | not ours |\n", report(osvEcho, osvHTTP, echoCall, httpCall), 1, "is called and fixed in go1.26.10"},
		{"called, no fix, not listed", "# Security\n", report(osvEcho, echoCall), 1, "FAIL GO-2026-6875 github.com/labstack/echo/v4@v4.16.0 is called and has no fix"},
		{"called, no fix, listed", listed, report(osvEcho, echoCall), 0, "ok   GO-2026-6875"},
		{"listed, no longer called", listed, report(osvEcho), 1, "FAIL GO-2026-6875 is listed"},
		{"listed without a reason", "| `GO-2026-6875` | echo |  |\n", report(osvEcho, echoCall), 1, "without a reason"},
		{"not a govulncheck report", listed, "", 2, "no govulncheck output"},
		{"broken report", listed, report("{"), 2, "read the govulncheck report"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			doc := filepath.Join(t.TempDir(), "SECURITY.md")
			if err := os.WriteFile(doc, []byte(tc.doc), 0o600); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			code := run(strings.NewReader(tc.report), []string{doc}, &out, &out)
			if code != tc.code || !strings.Contains(out.String(), tc.says) {
				t.Fatalf("exit %d, output:\n%s\nwant exit %d and %q", code, out.String(), tc.code, tc.says)
			}
		})
	}
}
