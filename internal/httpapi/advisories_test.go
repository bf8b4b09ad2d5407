package httpapi_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// docs/SECURITY.md accepts two echo v4 advisories that the pinned
// vulnerability database knows no v4 fix for (GO-2026-6875, GO-2026-6872)
// because the service uses neither affected middleware and never reads
// Context.RealIP, which trusted X-Forwarded-For by default before echo
// v4.16.3. This test keeps that reason true: no Go file of the service
// (everything but the proving ground) may use them.
func TestServiceAvoidsTheUnfixedEchoAdvisories(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	forbidden := []string{"middleware.Proxy", "middleware.RateLimiter", ".RealIP()"}
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "proving", ".git", ".data", "tools":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "advisories_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		for _, f := range forbidden {
			if strings.Contains(string(src), f) {
				t.Errorf("%s uses %s: docs/SECURITY.md accepts GO-2026-6875 and GO-2026-6872 because the service does not", path, f)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked %d Go files, want the whole service", checked)
	}
}

// docs/SECURITY.md relies on echo v4.16.3 or later, which fixed the two
// client-IP advisories, and names the echo version the service runs: the
// newest v4 tag, the only one that gets security fixes. This test keeps
// both true when go.mod changes.
func TestEchoIsTheV4TagSecurityNames(t *testing.T) {
	t.Parallel()
	gomod, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var version string
	for _, line := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "github.com/labstack/echo/v4" {
			version = f[1]
		}
	}
	var major, minor, patch int
	if n, _ := fmt.Sscanf(version, "v%d.%d.%d", &major, &minor, &patch); n != 3 {
		t.Fatalf("go.mod requires echo v4 at %q, want a release version", version)
	}
	if major != 4 || minor < 16 || minor == 16 && patch < 3 {
		t.Errorf("go.mod requires echo %s; docs/SECURITY.md relies on v4.16.3 or later (CVE-2026-118651, CVE-2026-118653)", version)
	}
	security, err := os.ReadFile(filepath.Join("..", "..", "docs", "SECURITY.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(security), "at its newest tag ("+version+";") {
		t.Errorf("docs/SECURITY.md does not name echo %s, the version go.mod requires", version)
	}
}
