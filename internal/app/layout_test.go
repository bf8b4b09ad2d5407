package app_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is the service's module path.
const module = "github.com/oncepay/oncepay"

// tableOwners names the one package that may touch each table (STYLE.md,
// "Who may touch a table"). Every other package reads and writes through
// the owner's methods.
var tableOwners = map[string]string{
	"tenants":            "internal/tenants",
	"api_keys":           "internal/tenants",
	"products":           "internal/orders",
	"orders":             "internal/orders",
	"order_items":        "internal/orders",
	"payments":           "internal/payments",
	"refunds":            "internal/payments",
	"api_idempotency":    "internal/idempotency",
	"outbox_events":      "internal/outbox",
	"processed_messages": "internal/inbox",
	"webhook_receipts":   "internal/webhooks",
	"notifications":      "internal/fulfillment",
	"attention_items":    "internal/attention",
}

// goPackage is what the layout tests read of `go list -json`.
type goPackage struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Imports    []string
	Deps       []string
}

// rel is the package's path inside the module ("internal/app").
func (p goPackage) rel() string { return strings.TrimPrefix(p.ImportPath, module+"/") }

// goList returns the module's packages (their non-test files and imports)
// by path inside the module, and the module's root directory.
func goList(t *testing.T) (map[string]goPackage, string) {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := make(map[string]goPackage)
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p goPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list: %v", err)
		}
		pkgs[p.rel()] = p
	}
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return pkgs, filepath.Dir(strings.TrimSpace(string(gomod)))
}

// sqlTable finds the tables a statement names: what follows FROM, JOIN,
// INTO, UPDATE, TABLE or TRUNCATE.
var sqlTable = regexp.MustCompile(`(?i)\b(?:from|join|into|update|table|truncate)\s+(?:only\s+)?"?([a-z_][a-z0-9_]*)`)

// Each table is touched only by the package that owns it: no package of the
// production binary (cmd/api and everything it links) holds SQL that names
// another package's table, counting each feature's generated queries
// (internal/<feature>/internal/dbsqlc) as that feature's. The generated
// packages sit where Go's internal rule keeps every other package out, and
// only their feature imports them. Tests may write any table to build
// states the service cannot reach by itself; they are not read here.
func TestEachTableIsTouchedOnlyByItsOwner(t *testing.T) {
	t.Parallel()
	pkgs, root := goList(t)

	// Every table of the schema has an owner.
	migrations, err := filepath.Glob(filepath.Join(root, "db", "migrations", "*.up.sql"))
	if err != nil || len(migrations) == 0 {
		t.Fatalf("no migrations found under %s: %v", root, err)
	}
	createTable := regexp.MustCompile(`(?i)\bCREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?([a-z_][a-z0-9_]*)`)
	for _, m := range migrations {
		sql, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range createTable.FindAllSubmatch(sql, -1) {
			if _, ok := tableOwners[string(c[1])]; !ok {
				t.Errorf("%s creates table %s, which has no owner in tableOwners", filepath.Base(m), c[1])
			}
		}
	}

	api, ok := pkgs["cmd/api"]
	if !ok {
		t.Fatal("go list found no cmd/api")
	}
	linked := []string{api.rel()}
	for _, dep := range api.Deps {
		if rel, ok := strings.CutPrefix(dep, module+"/"); ok {
			linked = append(linked, rel)
		}
	}
	sawGenerated := false
	for _, rel := range linked {
		p := pkgs[rel]
		owner := rel
		if feature, ok := strings.CutSuffix(rel, "/internal/dbsqlc"); ok {
			owner, sawGenerated = feature, true
		}
		for _, f := range p.GoFiles {
			for _, table := range tablesNamedIn(t, filepath.Join(p.Dir, f)) {
				if tableOwners[table] != owner {
					t.Errorf("%s/%s names table %s, which %s owns", rel, f, table, tableOwners[table])
				}
			}
		}
	}
	if !sawGenerated {
		t.Fatal("cmd/api links no generated package: the test reads the wrong packages")
	}

	generated := regexp.MustCompile(`^internal/[a-z]+/internal/dbsqlc$`)
	for rel, p := range pkgs {
		if filepath.Base(rel) == "dbsqlc" && !generated.MatchString(rel) {
			t.Errorf("generated package %s is not internal to one feature (internal/<feature>/internal/dbsqlc)", rel)
		}
		for _, imp := range p.Imports {
			dep, ok := strings.CutPrefix(imp, module+"/")
			if !ok || !generated.MatchString(dep) {
				continue
			}
			if feature := strings.TrimSuffix(dep, "/internal/dbsqlc"); rel != feature && !strings.HasPrefix(rel, feature+"/") {
				t.Errorf("%s imports %s, the generated queries of %s", rel, dep, feature)
			}
		}
	}
}

// tablesNamedIn returns the known tables that the string literals of a Go
// file name in SQL.
func tablesNamedIn(t *testing.T, path string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	var tables []string
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		s, err := strconv.Unquote(lit.Value)
		if err != nil {
			t.Fatalf("%s: unquote %s: %v", path, lit.Value, err)
		}
		for _, m := range sqlTable.FindAllStringSubmatch(s, -1) {
			if _, known := tableOwners[strings.ToLower(m[1])]; known && !slices.Contains(tables, strings.ToLower(m[1])) {
				tables = append(tables, strings.ToLower(m[1]))
			}
		}
		return true
	})
	return tables
}

// The package picture in docs/ARCHITECTURE.md ("Packages") tells the truth:
// every package it draws exists, every arrow is a real dependency, and
// every import between two packages it draws follows its arrows (directly
// or through others it draws), so the picture's "arrows point down only"
// holds for the code. Go itself refuses import cycles, so the arrows can
// have none either. Packages the picture leaves out are not checked.
func TestPackagePictureMatchesTheImports(t *testing.T) {
	t.Parallel()
	pkgs, root := goList(t)
	nodes, arrows := readPackagePicture(t, filepath.Join(root, "docs", "ARCHITECTURE.md"))
	if len(arrows) == 0 {
		t.Fatal("docs/ARCHITECTURE.md draws no package arrows")
	}
	for _, n := range nodes {
		if _, ok := pkgs[n]; !ok {
			t.Errorf("the picture draws %s, which is no package of the module", n)
		}
	}
	below := make(map[string][]string)
	for _, a := range arrows {
		below[a[0]] = append(below[a[0]], a[1])
		if p, ok := pkgs[a[0]]; ok && !slices.Contains(p.Deps, module+"/"+a[1]) {
			t.Errorf("the picture draws %s --> %s, but %s does not depend on %s", a[0], a[1], a[0], a[1])
		}
	}
	reaches := func(from, to string) bool {
		seen := map[string]bool{}
		stack := []string{from}
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, next := range below[n] {
				if next == to {
					return true
				}
				if !seen[next] {
					seen[next] = true
					stack = append(stack, next)
				}
			}
		}
		return false
	}
	for _, from := range nodes {
		for _, imp := range pkgs[from].Imports {
			to, ok := strings.CutPrefix(imp, module+"/")
			if ok && slices.Contains(nodes, to) && !reaches(from, to) {
				t.Errorf("%s imports %s, but the picture does not draw %s below %s", from, to, to, from)
			}
		}
	}
}

// readPackagePicture reads the mermaid flowchart of the "## Packages"
// section: its packages (module paths, the nodes' labels) and its arrows
// between them. It understands `a[label] --> b[label]` (labels optional
// once given) and `a[label]` lines.
func readPackagePicture(t *testing.T, path string) (nodes []string, arrows [][2]string) {
	t.Helper()
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Packages\n")
	if !ok {
		t.Fatalf("%s has no Packages section", path)
	}
	_, chart, ok := strings.Cut(section, "```mermaid\n")
	if !ok {
		t.Fatalf("%s: the Packages section has no mermaid picture", path)
	}
	chart, _, _ = strings.Cut(chart, "```")
	node := `(\w+)(?:\[([^\]]+)\])?`
	arrow := regexp.MustCompile(`^` + node + `\s*-->\s*` + node + `$`)
	lone := regexp.MustCompile(`^` + node + `$`)
	labels := make(map[string]string)
	label := func(id, l string) {
		if l == "" {
			return
		}
		if old, ok := labels[id]; ok && old != l {
			t.Errorf("the picture labels %s both %s and %s", id, old, l)
		}
		labels[id] = l
	}
	var ids [][2]string
	for sc := bufio.NewScanner(strings.NewReader(chart)); sc.Scan(); {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "flowchart") || strings.HasPrefix(line, "%%"):
		case arrow.MatchString(line):
			m := arrow.FindStringSubmatch(line)
			label(m[1], m[2])
			label(m[3], m[4])
			ids = append(ids, [2]string{m[1], m[3]})
		case lone.MatchString(line):
			m := lone.FindStringSubmatch(line)
			label(m[1], m[2])
		default:
			t.Fatalf("the package picture has a line this test cannot read: %q", line)
		}
	}
	for _, l := range labels {
		nodes = append(nodes, l)
	}
	for _, a := range ids {
		from, ok1 := labels[a[0]]
		to, ok2 := labels[a[1]]
		if !ok1 || !ok2 {
			t.Fatalf("the picture's arrow %s --> %s names a node it never labels", a[0], a[1])
		}
		arrows = append(arrows, [2]string{from, to})
	}
	slices.Sort(nodes)
	return nodes, arrows
}

// maxFileLines bounds a hand-written Go file of the module: a file longer
// than this holds more than one concern and reads better split by them.
const maxFileLines = 600

// No hand-written, non-test Go file of the module is longer than
// maxFileLines; generated ones (sqlc's) are not counted.
func TestNoSourceFileIsLong(t *testing.T) {
	t.Parallel()
	pkgs, _ := goList(t)
	seen := 0
	for _, p := range pkgs {
		for _, f := range p.GoFiles {
			src, err := os.ReadFile(filepath.Join(p.Dir, f))
			if err != nil {
				t.Fatal(err)
			}
			seen++
			if generated.Match(src) {
				continue
			}
			if n := bytes.Count(src, []byte("\n")); n > maxFileLines {
				t.Errorf("%s/%s has %d lines, over %d: split it by concern", p.rel(), f, n, maxFileLines)
			}
		}
	}
	if seen < 100 {
		t.Fatalf("read %d files: go list found too few", seen)
	}
}

// generated matches the header of a generated Go file (go help generate).
var generated = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)
