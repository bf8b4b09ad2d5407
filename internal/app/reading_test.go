package app_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docs/ARCHITECTURE.md, "Read one payment", takes a newcomer through one
// payment in at most eight files. The list stays true: each line's file
// declares every function and method its line names (`Func`,
// `Type.Method`), and the list names every step of payments.create (the
// functions of its step table, paySteps) and the loop's functions a
// payment's request and its recovery run. A step or a piece of the loop
// that moves to a file the list does not name fails here.
func TestReadOnePaymentInEightFiles(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := string(doc)
	i := strings.Index(section, "\n## Read one payment\n")
	if i < 0 {
		t.Fatal(`docs/ARCHITECTURE.md has no section "Read one payment"`)
	}
	section = section[i+1:]
	if j := strings.Index(section[3:], "\n## "); j >= 0 {
		section = section[:j+3]
	}
	item := regexp.MustCompile("(?m)^[0-9]+\\. `([^`]+\\.go)`: (.*)$")
	name := regexp.MustCompile("`([A-Za-z_][A-Za-z0-9_]*(?:\\.[A-Za-z_][A-Za-z0-9_]*)?)`")
	items := item.FindAllStringSubmatch(section, -1)
	if len(items) == 0 || len(items) > 8 {
		t.Fatalf("the reading list has %d files, want 1 to 8", len(items))
	}
	named := map[string]bool{}
	for _, it := range items {
		path, line := it[1], it[2]
		decls := declared(t, filepath.Join(root, path))
		for _, m := range name.FindAllStringSubmatch(line, -1) {
			n := m[1]
			if pkg, _, ok := strings.Cut(n, "."); ok && pkg == strings.ToLower(pkg) {
				continue // another package's name, said in passing (operation.ParseRequest)
			}
			if !decls[n] {
				t.Errorf("%s does not declare %s, which the reading list names on its line", path, n)
			}
			named[n] = true
		}
	}
	// Every step of payments.create, and the loop a payment runs.
	want := stepTableFuncs(t, filepath.Join(root, "internal", "payments", "pay.go"), "paySteps")
	want = append(want, "Phases.RunWith", "Phases.drive", "Phases.transact", "Phases.inTx", "Phases.Resume", "Recoverer.RecoverOnce")
	for _, w := range want {
		if !named[w] {
			t.Errorf("the reading list does not name %s, which a payment runs", w)
		}
	}
}

// declared returns the functions and methods (Type.Method) file declares.
func declared(t *testing.T, file string) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("the reading list names %s: %v", file, err)
	}
	out := map[string]bool{}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		if fn.Recv == nil || len(fn.Recv.List) == 0 {
			out[fn.Name.Name] = true
			continue
		}
		typ := fn.Recv.List[0].Type
		if s, ok := typ.(*ast.StarExpr); ok {
			typ = s.X
		}
		if ix, ok := typ.(*ast.IndexExpr); ok {
			typ = ix.X
		}
		if id, ok := typ.(*ast.Ident); ok {
			out[id.Name+"."+fn.Name.Name] = true
		}
	}
	return out
}

// stepTableFuncs returns the methods (Service.name) that the step table
// built by the method table of file refers to: its Tx, Batch and Call
// entries.
func stepTableFuncs(t *testing.T, file, table string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != table {
			continue
		}
		out = append(out, "Service."+table)
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			kv, ok := n.(*ast.KeyValueExpr)
			if !ok {
				return true
			}
			if key, ok := kv.Key.(*ast.Ident); ok && slices.Contains([]string{"Tx", "Batch", "Call"}, key.Name) {
				if sel, ok := kv.Value.(*ast.SelectorExpr); ok {
					out = append(out, "Service."+sel.Sel.Name)
				}
			}
			return true
		})
	}
	if len(out) < 3 {
		t.Fatalf("%s: found no step table %s with its steps (%v)", file, table, out)
	}
	return out
}
