package orders

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/oncepay/oncepay/internal/problem"
)

func TestParseCreate(t *testing.T) {
	t.Parallel()
	in, err := parseCreate([]byte(`{"currency":"EUR","items":[{"sku":"a","quantity":2},{"sku":"b","quantity":1.0}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if in.Currency != "EUR" || len(in.Items) != 2 || in.Items[0] != (ItemInput{"a", 2}) || in.Items[1] != (ItemInput{"b", 1}) {
		t.Fatalf("parsed %+v", in)
	}
}

// FuzzParseCreate: whatever the body, the parser returns a valid input or a
// client error (invalid_json or validation_failed); never a panic, never an
// internal error, and a valid input always respects the limits and can be
// stored: PostgreSQL's text takes no U+0000. (Invalid UTF-8 never reaches
// the parser's output: internal/wire refuses it as invalid_json.) The seeds
// include members spelt in another case and members twice, which must be
// refused rather than read into the quantity.
func FuzzParseCreate(f *testing.F) {
	for _, s := range []string{
		`{"currency":"EUR","items":[{"sku":"a","quantity":2}]}`,
		`{"currency":"EUR","items":[{"sku":"a","quantity":1e400}]}`,
		`{"currency":null,"items":null}`, `[]`, `{`, ``, `{"items":[{}]}`,
		`{"currency":"EUR","items":[{"sku":"` + strings.Repeat("x", 70) + `","quantity":-0}]}`,
		`{"currency":"EUR","items":[{"sku":"a\u0000b","quantity":1}]}`,
		`{"currency":"EUR","items":[{"sku":"` + strings.Repeat("é", 64) + `","quantity":1}]}`,
		`{"currency":"EUR","items":[{"sku":"a","quantity":1,"QUANTITY":7}]}`,
		`{"currency":"EUR","items":[{"sku":"a","quantity":1,"quantity":7}]}`,
		`{"CURRENCY":"EUR","Items":[{"Sku":"a","Quantity":1}]}`,
		"{\"currency\":\"EUR\",\"items\":[{\"sku\":\"\xff\",\"quantity\":1}]}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		in, err := parseCreate(body)
		if err != nil {
			if c := problem.CodeOf(err); c != problem.InvalidJSON && c != problem.ValidationFailed {
				t.Fatalf("parseCreate(%q): error %v has code %s", body, err, c)
			}
			return
		}
		if len(in.Items) < 1 || len(in.Items) > MaxItems || len(in.Currency) != 3 || !utf8.ValidString(in.Currency) {
			t.Fatalf("parseCreate(%q) accepted %+v", body, in)
		}
		for _, it := range in.Items {
			if it.Quantity < 1 || it.Quantity > MaxQuantity || it.SKU == "" || utf8.RuneCountInString(it.SKU) > MaxSKULen ||
				strings.ContainsRune(it.SKU, 0) || !utf8.ValidString(it.SKU) {
				t.Fatalf("parseCreate(%q) accepted item %+v", body, it)
			}
		}
	})
}
