package app_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/proving/chaos" // starter:remove line
)

// A registered operation is known everywhere it must be, or this test
// says, one line per gap, where to add it: the chaos run drives it (or
// names why not), the metrics count it from zero, the OpenAPI document
// describes its path and lists it among the keys a client may look up, the
// Go client sends it, and every test fixture's
// idempotency store gets its retention from the registry (never a map
// written by hand, where a new operation would answer 500 in that
// package's tests until someone found the map).
func TestEveryOperationIsKnownEverywhere(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	spec := openAPIMust(t)
	b := setup(t)
	metrics := string(b.do(t, "GET", "/metrics", "", "", "").body)
	clientSrc := readGo(t, filepath.Join(root, "client"), false)
	skipped := chaos.NotDriven() // starter:remove line
	var lookable []any
	for _, p := range spec.doc.Paths.Value("/v1/idempotency-keys/{operation}/{key}").Parameters {
		if p.Value.Name == "operation" {
			lookable = p.Value.Schema.Value.Enum
		}
	}

	for _, s := range app.Operations() {
		name := string(s.Name)
		// starter:remove begin
		if _, notDriven := skipped[name]; !slices.Contains(chaos.Operations(), name) && !notDriven {
			t.Errorf("%s: the chaos run neither drives it nor says why not (proving/chaos: history.go Operations and load.go, or NotDriven with a reason)", name)
		}
		// starter:remove end
		if !strings.Contains(metrics, `oncepay_idempotency_outcomes_total{operation="`+name+`"`) {
			t.Errorf("%s: /metrics has no oncepay_idempotency_outcomes_total series for it (internal/app build.go metricsKinds reads the registry: is it in app.Operations?)", name)
		}
		if !slices.Contains(lookable, any(name)) {
			t.Errorf("%s: openapi/openapi.yaml's GET /v1/idempotency-keys/{operation}/{key} does not list it (add it to the operation parameter's enum)", name)
		}
		var path string
		for p, item := range spec.doc.Paths.Map() {
			if op := item.Post; op != nil && strings.Contains(op.Summary, "(idempotent, `"+name+"`)") {
				path = p
			}
		}
		if path == "" {
			t.Errorf("%s: openapi/openapi.yaml has no POST whose summary ends (idempotent, `%s`) (describe its path there)", name, name)
			continue
		}
		for _, chunk := range regexp.MustCompile(`\{[^}]*\}`).Split(path, -1) {
			if chunk != "" && !strings.Contains(clientSrc, `"`+chunk+`"`) {
				t.Errorf("%s: the Go client sends nothing to %s (add a method in client/client.go)", name, path)
				break
			}
		}
	}

	// Every idempotency store a test builds takes the registry's retention:
	// operation.PolicyOf of the features' Specs, or app.DefaultRetention.
	// The stores of internal/idempotency and internal/operation serve
	// operations of their own tests, and internal/retention tests the
	// policy itself.
	newStore := regexp.MustCompile(`idempotency\.NewStore\(([^,]*)`)
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "tools") {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") || strings.HasPrefix(rel, "internal/idempotency/") || strings.HasPrefix(rel, "internal/operation/") ||
			strings.HasPrefix(rel, "internal/retention/") || rel == "internal/app/known_test.go" {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(src), "\n") {
			if strings.Contains(line, "idempotency.Policy{") {
				t.Errorf("%s:%d: a test's idempotency policy written by hand; build it with operation.PolicyOf(<feature>.Specs()...)", rel, i+1)
			}
			m := newStore.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			arg := strings.TrimSpace(m[1])
			if !strings.HasPrefix(arg, "operation.PolicyOf(") && !strings.Contains(arg, "Retention().Idempotency") && arg != "policy" {
				t.Errorf("%s:%d: a test's idempotency store with a policy written by hand (%s); build it with operation.PolicyOf(<feature>.Specs()...)", rel, i+1, arg)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// readGo concatenates the Go files of dir (with or without tests).
func readGo(t *testing.T, dir string, tests bool) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	var b strings.Builder
	for _, f := range files {
		if !tests && strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(&b, string(src))
	}
	return b.String()
}
