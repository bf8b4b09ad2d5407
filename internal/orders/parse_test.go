package orders

import (
	"errors"
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

// A quantity is read exactly from its digits, never through a float64: its
// spelling does not matter (2.0, 1e2 and 0.2e1 are whole numbers), its
// value does: a number a float64 would round to a whole one is not whole,
// and one past 2^53 is out of range as it is, not rounded into range.
func TestParseCreateReadsQuantitiesExactly(t *testing.T) {
	t.Parallel()
	body := func(q string) []byte {
		return []byte(`{"currency":"EUR","items":[{"sku":"a","quantity":` + q + `}]}`)
	}
	for q, want := range map[string]int{"2.0": 2, "1e2": 100, "0.2e1": 2, "1000": 1000, "1.000e3": 1000, "20e-1": 2} {
		in, err := parseCreate(body(q))
		if err != nil || len(in.Items) != 1 || in.Items[0].Quantity != want {
			t.Errorf("quantity %s: %+v, %v; want %d", q, in, err, want)
		}
	}
	for q, message := range map[string]string{
		"2.0000000000000001":    "must be a whole number",
		"1.5":                   "must be a whole number",
		"1e-400":                "must be a whole number",
		"9007199254740993":      "must be between 1 and 1000",
		"1e400":                 "must be between 1 and 1000",
		"-0":                    "must be between 1 and 1000",
		"1000.0000000000000001": "must be a whole number",
		`"2"`:                   "must be an integer",
	} {
		_, err := parseCreate(body(q))
		var p *problem.Error
		if !errors.As(err, &p) || p.Code != problem.ValidationFailed || len(p.Fields) != 1 ||
			p.Fields[0] != (problem.FieldError{Field: "items[0].quantity", Message: message}) {
			t.Errorf("quantity %s: %v, want items[0].quantity %q", q, err, message)
		}
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
		`{"currency":"EUR","items":[{"sku":"a","quantity":2.0000000000000001}]}`,
		`{"currency":"EUR","items":[{"sku":"a","quantity":9007199254740993}]}`,
		`{"currency":"EUR","items":[{"sku":"a","quantity":1E+2}]}`,
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
