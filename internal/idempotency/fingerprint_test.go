package idempotency_test

import (
	"encoding/json"
	"testing"

	"github.com/oncepay/oncepay/internal/idempotency"
)

func fp(t testing.TB, op idempotency.Operation, params []string, body string) idempotency.Fingerprint {
	t.Helper()
	f, err := idempotency.NewFingerprint(op, params, []byte(body))
	if err != nil {
		t.Fatalf("NewFingerprint(%s): %v", body, err)
	}
	return f
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	base := fp(t, opOrders, nil, `{"currency":"EUR","items":[{"sku":"a","quantity":2}]}`)
	for _, tc := range []struct {
		name   string
		op     idempotency.Operation
		params []string
		body   string
		same   bool
	}{
		{"identical", opOrders, nil, `{"currency":"EUR","items":[{"sku":"a","quantity":2}]}`, true},
		{"key order", opOrders, nil, `{"items":[{"quantity":2,"sku":"a"}],"currency":"EUR"}`, true},
		{"whitespace", opOrders, nil, "{ \"currency\" : \"EUR\",\n\t\"items\":[ {\"sku\":\"a\", \"quantity\":2} ] }", true},
		{"number spelling", opOrders, nil, `{"currency":"EUR","items":[{"sku":"a","quantity":2.0}]}`, true},
		{"string escapes", opOrders, nil, `{"currency":"\u0045UR","items":[{"sku":"a","quantity":2}]}`, true},
		{"other quantity", opOrders, nil, `{"currency":"EUR","items":[{"sku":"a","quantity":3}]}`, false},
		{"other currency", opOrders, nil, `{"currency":"USD","items":[{"sku":"a","quantity":2}]}`, false},
		{"array order matters", opOrders, nil, `{"currency":"EUR","items":[{"sku":"a","quantity":2},{"sku":"b","quantity":1}]}`, false},
		{"other operation", opPayments, nil, `{"currency":"EUR","items":[{"sku":"a","quantity":2}]}`, false},
		{"path parameter", opOrders, []string{"x"}, `{"currency":"EUR","items":[{"sku":"a","quantity":2}]}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fp(t, tc.op, tc.params, tc.body)
			if (got == base) != tc.same {
				t.Fatalf("same fingerprint = %t, want %t", got == base, tc.same)
			}
		})
	}
	// Path parameters are framed: ("ab","c") and ("a","bc") differ.
	if fp(t, opRefunds, []string{"ab", "c"}, `{}`) == fp(t, opRefunds, []string{"a", "bc"}, `{}`) {
		t.Fatal("path parameters run together")
	}
	if _, err := idempotency.NewFingerprint(opOrders, nil, []byte(`{"a":1,"a":2}`)); err == nil {
		t.Fatal("duplicate member names must not fingerprint: their meaning is ambiguous")
	}
}

// FuzzFingerprint: a document and its re-encoding (another key order and
// whitespace, the same meaning) hash equal; a document with one more member
// hashes differently. Never a panic.
func FuzzFingerprint(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"b":[1,2,{"c":"d"}],"a":null}`, `{"x":1.5e3,"y":"\u00e9"}`, `[]`, `"s"`, `{`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		a, err := idempotency.NewFingerprint(opOrders, nil, []byte(doc))
		if err != nil {
			return // not canonicalizable JSON: the handler answers invalid_json
		}
		var v any
		if err := json.Unmarshal([]byte(doc), &v); err != nil {
			t.Fatalf("canonicalized a document encoding/json rejects: %q", doc)
		}
		again, err := json.MarshalIndent(v, " ", "   ") // maps re-encode sorted, with other whitespace
		if err != nil {
			return
		}
		b, err := idempotency.NewFingerprint(opOrders, nil, again)
		if err != nil {
			return // a float that does not survive a float64 round trip
		}
		if a != b {
			t.Fatalf("equal documents hash differently:\n%s\n%s", doc, again)
		}
		if m, ok := v.(map[string]any); ok {
			m["\x00extra"] = true
			changed, _ := json.Marshal(m)
			c, err := idempotency.NewFingerprint(opOrders, nil, changed)
			if err == nil && c == a {
				t.Fatalf("different documents hash equal:\n%s\n%s", doc, changed)
			}
		}
	})
}
