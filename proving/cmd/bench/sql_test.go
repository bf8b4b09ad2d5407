package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The floors' SQL is the service's, not a copy that drifted: every sqlX
// constant of sql.go is, up to whitespace, the text the service sends for
// its query X, as sqlc generated it into the features' internal/dbsqlc
// (which `make check-generated` keeps equal to db/queries). Those
// packages are reachable from their features only, so the text is read
// from their source.
func TestFloorSQLIsTheServices(t *testing.T) {
	t.Parallel()
	generated := generatedQueries(t, "../../../internal/*/internal/dbsqlc/*.go")
	copies := stringConsts(t, "sql.go")
	n := 0
	for name, text := range copies {
		query, ok := strings.CutPrefix(name, "sql")
		if !ok {
			continue
		}
		n++
		want, ok := generated[query]
		if !ok {
			t.Errorf("%s copies query %s, which no feature's internal/dbsqlc has: rename it after the query it copies", name, query)
			continue
		}
		if got := normalizeSQL(text); got != normalizeSQL(want) {
			t.Errorf("%s drifted from the service's %s:\n floor:   %s\n service: %s", name, query, got, normalizeSQL(want))
		}
	}
	if n == 0 {
		t.Fatal("sql.go has no sqlX constants: the test reads the wrong file")
	}
}

// generatedQueries returns the SQL of every query sqlc generated into the
// files glob matches, by name: sqlc writes each as a constant whose text
// starts "-- name: Name :kind".
func generatedQueries(t *testing.T, glob string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		t.Fatalf("no generated queries at %s (%v)", glob, err)
	}
	queries := map[string]string{}
	for _, f := range files {
		for _, text := range stringConsts(t, f) {
			header, sql, ok := strings.Cut(text, "\n")
			fields := strings.Fields(header)
			if !ok || len(fields) != 4 || fields[0] != "--" || fields[1] != "name:" {
				continue
			}
			if _, dup := queries[fields[2]]; dup {
				t.Fatalf("query %s is generated twice", fields[2])
			}
			queries[fields[2]] = sql
		}
	}
	return queries
}

// stringConsts returns the file's top-level string constants by name.
func stringConsts(t *testing.T, file string) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	for _, decl := range f.Decls {
		g, ok := decl.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			v := spec.(*ast.ValueSpec)
			for i, name := range v.Names {
				if i >= len(v.Values) {
					continue
				}
				lit, ok := v.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatalf("%s: %s: %v", file, name.Name, err)
				}
				consts[name.Name] = s
			}
		}
	}
	return consts
}

// normalizeSQL makes every run of whitespace one space, and drops it
// around parentheses and before commas, where it means nothing.
func normalizeSQL(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	for _, r := range []struct{ old, new string }{{"( ", "("}, {" )", ")"}, {" ,", ","}, {";", ""}} {
		s = strings.ReplaceAll(s, r.old, r.new)
	}
	return strings.TrimSpace(s)
}
