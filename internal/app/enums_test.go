package app_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/attention"
	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/testkit"
)

// Every closed vocabulary of the contract is decided once, in Go, by the
// package that owns it (orders.Statuses, payments.Statuses, problem.Codes,
// attention.Reasons);
// the database's CHECKs, the OpenAPI description and the public Go client
// repeat it, and this test keeps them equal: a status or code added in one
// place and forgotten in another fails here.
func TestVocabulariesAgreeEverywhere(t *testing.T) {
	t.Parallel()
	spec, err := openAPI()
	if err != nil {
		t.Fatal(err)
	}
	enum := func(schema, property string) []string {
		t.Helper()
		s := spec.doc.Components.Schemas[schema]
		if s == nil || s.Value.Properties[property] == nil {
			t.Fatalf("OpenAPI has no %s.%s", schema, property)
		}
		var out []string
		for _, v := range s.Value.Properties[property].Value.Enum {
			out = append(out, v.(string))
		}
		return out
	}
	pool := testkit.Pool(t)
	check := func(table string) []string {
		t.Helper()
		var def string
		err := pool.QueryRow(context.Background(), `
			SELECT pg_get_constraintdef(oid) FROM pg_constraint
			WHERE conrelid = $1::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%status%'`, table).Scan(&def)
		if err != nil {
			t.Fatalf("the status CHECK of %s: %v", table, err)
		}
		var out []string
		for _, m := range regexp.MustCompile(`'([a-z_]+)'`).FindAllStringSubmatch(def, -1) {
			out = append(out, m[1])
		}
		return out
	}
	client := clientConstants(t)
	checkOf := func(table, column string) []string {
		t.Helper()
		var def string
		err := pool.QueryRow(context.Background(), `
			SELECT pg_get_constraintdef(oid) FROM pg_constraint
			WHERE conrelid = $1::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%(' || $2 || ' = %'`, table, column).Scan(&def)
		if err != nil {
			t.Fatalf("the %s CHECK of %s: %v", column, table, err)
		}
		var out []string
		for _, m := range regexp.MustCompile(`'([a-z_]+)'`).FindAllStringSubmatch(def, -1) {
			out = append(out, m[1])
		}
		return out
	}

	orderStatuses := names(orders.Statuses())
	paymentStatuses := names(payments.Statuses())
	var codes []string
	for _, c := range problem.Codes() {
		codes = append(codes, string(c))
	}
	for _, tc := range []struct {
		what       string
		server     []string
		elsewhere  map[string][]string
		ordered    bool // the lifecycle's order matters too
		clientName string
	}{
		{"order statuses (orders.Statuses)", orderStatuses, map[string][]string{
			"OpenAPI Order.status": enum("Order", "status"),
			"CHECK of orders":      check("orders"),
			"client Order*":        client["Order"],
		}, true, "Order"},
		{"payment statuses (payments.Statuses)", paymentStatuses, map[string][]string{
			"OpenAPI Payment.status": enum("Payment", "status"),
			"OpenAPI Refund.status":  enum("Refund", "status"),
			"CHECK of payments":      check("payments"),
			"CHECK of refunds":       check("refunds"),
			"client Status*":         client["Status"],
		}, false, "Status"},
		{"attention reasons (attention.Reasons)", names(attention.Reasons()), map[string][]string{
			"OpenAPI AttentionItem.reason": enum("AttentionItem", "reason"),
			"CHECK of attention_items":     checkOf("attention_items", "reason"),
		}, false, ""},
		{"problem codes (problem.Codes)", codes, map[string][]string{
			"client Code*": client["Code"],
		}, false, "Code"},
	} {
		for where, got := range tc.elsewhere {
			a, b := slices.Clone(got), slices.Clone(tc.server)
			if !tc.ordered || strings.HasPrefix(where, "client") {
				slices.Sort(a)
				slices.Sort(b)
			}
			if !slices.Equal(a, b) {
				t.Errorf("%s: %s has %v, the server %v", tc.what, where, got, tc.server)
			}
		}
	}
}

func names[S ~string](list []S) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = string(s)
	}
	return out
}

// clientConstants reads the public Go client's string constants, grouped by
// the prefix of their names (Order, Status, Code): what a user of the
// client compares answers with.
func clientConstants(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob("../../client/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("client sources: %v (%d files)", err, len(files))
	}
	out := map[string][]string{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					for _, prefix := range []string{"Order", "Status", "Code"} {
						if strings.HasPrefix(id.Name, prefix) {
							out[prefix] = append(out[prefix], v)
						}
					}
				}
			}
		}
	}
	return out
}
