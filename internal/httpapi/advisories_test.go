package httpapi_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// docs/SECURITY.md accepts two echo v4 advisories that have no fix
// (GO-2026-6875, GO-2026-6872) because the service uses neither affected
// middleware and never reads Context.RealIP, which trusts X-Forwarded-For
// by default. This test keeps that reason true: no Go file of the service
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
