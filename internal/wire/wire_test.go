package wire_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/wire"
)

type line struct {
	SKU      *string  `json:"sku"`
	Quantity *float64 `json:"quantity"`
}

type order struct {
	Currency *string `json:"currency"`
	Items    []line  `json:"items"`
	Meta     *struct {
		Tags []string `json:"tags"`
	} `json:"meta"`
}

// A value of the wrong JSON type is named by its full path, array indices
// included, as the fields of every other validation error are.
func TestDecodeNamesTheFieldWithItsIndex(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ body, field, message string }{
		{`{"items":[{"sku":"a","quantity":1},{"sku":"b","quantity":"2"}]}`, "items[1].quantity", "must be a number"},
		{`{"items":[{"sku":"a","quantity":1e400}]}`, "items[0].quantity", "is out of range"},
		{`{"currency":5}`, "currency", "must be a string"},
		{`{"items":{"sku":"a"}}`, "items", "must be an array"},
		{`{"items":[{"sku":"a"},7]}`, "items[1]", "must be an object"},
		{` {"meta":{"tags":["x",[1]]}}`, "meta.tags[1]", "must be a string"},
		{`{"items":[{"sku":{"nested":[1,2]},"quantity":1}]}`, "items[0].sku", "must be a string"},
	} {
		var v order
		err := wire.Decode([]byte(tc.body), &v)
		var p *problem.Error
		if !errors.As(err, &p) || p.Code != problem.ValidationFailed || len(p.Fields) != 1 {
			t.Fatalf("Decode(%s) = %v, want one validation_failed field", tc.body, err)
		}
		if f := p.Fields[0]; f.Field != tc.field || f.Message != tc.message {
			t.Fatalf("Decode(%s) names %q %q, want %q %q", tc.body, f.Field, f.Message, tc.field, tc.message)
		}
	}
}

// The body limit is exactly MaxBodyBytes, 65,536 bytes, whether the client
// sends a Content-Length or streams the body chunked: one byte more is 413
// request_too_large, with the number in the detail.
func TestReadBodyLimitIsExactly64KiB(t *testing.T) {
	t.Parallel()
	if wire.MaxBodyBytes != 65536 {
		t.Fatalf("MaxBodyBytes = %d, want 65536 as the docs say", wire.MaxBodyBytes)
	}
	for _, chunked := range []bool{false, true} {
		for _, n := range []int{0, 1, wire.MaxBodyBytes - 1, wire.MaxBodyBytes, wire.MaxBodyBytes + 1, 2 * wire.MaxBodyBytes} {
			t.Run(fmt.Sprintf("chunked=%v/%d", chunked, n), func(t *testing.T) {
				t.Parallel()
				req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(bytes.Repeat([]byte(" "), n)))
				if chunked {
					req.ContentLength = -1
				}
				body, err := wire.ReadBody(req)
				if n <= wire.MaxBodyBytes {
					if err != nil || len(body) != n {
						t.Fatalf("ReadBody of %d bytes = %d bytes, %v", n, len(body), err)
					}
					return
				}
				var p *problem.Error
				if !errors.As(err, &p) || p.Code != problem.RequestTooLarge || !strings.Contains(p.Detail, "65536 bytes") {
					t.Fatalf("ReadBody of %d bytes: %v, want request_too_large naming 65536 bytes", n, err)
				}
			})
		}
	}
}

// Member names match exactly: a name that differs from a field's only by
// case is an unknown member (422 naming it), a name twice in one object is
// 400 invalid_json (whichever the spelling), and an open object (DecodeOpen)
// ignores the variant instead of reading it into the field.
func TestDecodeMatchesNamesExactly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body, field string
		code        problem.Code
	}{
		{`{"CURRENCY":"EUR"}`, "CURRENCY", problem.ValidationFailed},
		{`{"currency":"EUR","Currency":"USD"}`, "Currency", problem.ValidationFailed},
		{`{"items":[{"sku":"a","quantity":1,"QUANTITY":7}]}`, "items[0].QUANTITY", problem.ValidationFailed},
		{`{"meta":{"Tags":["x"]}}`, "meta.Tags", problem.ValidationFailed},
		{`{"currency":"EUR","currency":"USD"}`, "", problem.InvalidJSON},
		{`{"items":[{"sku":"a","sku":"b"}]}`, "", problem.InvalidJSON},
		{`{"currency":"EUR","\u0063urrency":"USD"}`, "", problem.InvalidJSON}, // the same name, escaped
		{"{\"currency\":\"\xff\"}", "", problem.InvalidJSON},
		{`{"currency":"EUR"} {"currency":"USD"}`, "", problem.InvalidJSON},
	} {
		var v order
		err := wire.Decode([]byte(tc.body), &v)
		var p *problem.Error
		if !errors.As(err, &p) || p.Code != tc.code {
			t.Fatalf("Decode(%s) = %v, want %s", tc.body, err, tc.code)
		}
		if tc.field != "" && (len(p.Fields) != 1 || p.Fields[0] != (problem.FieldError{Field: tc.field, Message: "unknown field"})) {
			t.Fatalf("Decode(%s) names %+v, want %s unknown", tc.body, p.Fields, tc.field)
		}
	}
	var open order
	if err := wire.DecodeOpen([]byte(`{"currency":"EUR","CURRENCY":"USD","extra":1}`), &open); err != nil || *open.Currency != "EUR" {
		t.Fatalf("DecodeOpen = %v, currency %v; want EUR, the variant ignored", err, open.Currency)
	}
	if err := wire.DecodeOpen([]byte(`{"currency":"EUR","currency":"USD"}`), &open); problem.CodeOf(err) != problem.InvalidJSON {
		t.Fatalf("DecodeOpen of a duplicate = %v, want invalid_json", err)
	}
}

// memberNames returns the byte ranges of the object member names in body,
// valid JSON, that hold no escape: those whose case a test can flip in
// place.
func memberNames(body []byte) [][2]int {
	var names [][2]int
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	for {
		if dec.PeekKind() == '"' && dec.StackDepth() > 0 {
			if kind, n := dec.StackIndex(dec.StackDepth()); kind == '{' && n%2 == 0 { // a name is due
				raw, err := dec.ReadValue()
				if err != nil {
					return names
				}
				end := int(dec.InputOffset())
				if !bytes.ContainsRune(raw, '\\') {
					names = append(names, [2]int{end - len(raw), end})
				}
				continue
			}
		}
		if _, err := dec.ReadToken(); err != nil {
			return names
		}
	}
}

// flipCase swaps the case of every ASCII letter of b.
func flipCase(b []byte) []byte {
	out := bytes.Clone(b)
	for i, c := range out {
		switch {
		case 'a' <= c && c <= 'z':
			out[i] = c - 'a' + 'A'
		case 'A' <= c && c <= 'Z':
			out[i] = c - 'A' + 'a'
		}
	}
	return out
}

// FuzzDecodeCaseVariants: whatever the body, Decode accepts it or answers
// invalid_json or validation_failed, never anything else; and when it
// accepts a body, the same body with any one member name spelt in another
// case is refused as validation_failed naming that unknown member. With
// encoding/json's case-insensitive matching, the variant was read into the
// field.
func FuzzDecodeCaseVariants(f *testing.F) {
	for _, s := range []string{
		`{"currency":"EUR","items":[{"sku":"a","quantity":2}]}`,
		`{"currency":"EUR","items":[{"sku":"a","quantity":1},{"sku":"b","quantity":7}],"meta":{"tags":["x"]}}`,
		`{"currency":"EUR","CURRENCY":"USD"}`, `{"items":[{"quantity":1,"QUANTITY":7}]}`,
		`{"currency":"EUR","currency":"USD"}`, `{"Items":[]}`, `{"meta":{"TAGS":null}}`, `{}`, `[]`, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var v order
		err := wire.Decode(body, &v)
		if err != nil {
			if c := problem.CodeOf(err); c != problem.InvalidJSON && c != problem.ValidationFailed {
				t.Fatalf("Decode(%q): error %v has code %s", body, err, c)
			}
			return
		}
		for _, r := range memberNames(bytes.TrimSpace(body)) {
			trimmed := bytes.TrimSpace(body)
			name := trimmed[r[0]:r[1]]
			flipped := flipCase(name)
			if bytes.Equal(flipped, name) {
				continue // no letters to flip
			}
			variant := append(append(append([]byte{}, trimmed[:r[0]]...), flipped...), trimmed[r[1]:]...)
			var w order
			err := wire.Decode(variant, &w)
			var p *problem.Error
			if !errors.As(err, &p) || p.Code != problem.ValidationFailed || len(p.Fields) != 1 || p.Fields[0].Message != "unknown field" {
				t.Fatalf("Decode accepted %q, and its variant %q gave %v; want validation_failed, unknown field", body, variant, err)
			}
		}
	})
}

// A value for a log line is kept up to MaxLoggedBytes and cut after, to
// valid UTF-8, with a marker that says how long it was.
func TestLoggable(t *testing.T) {
	t.Parallel()
	exact := strings.Repeat("a", wire.MaxLoggedBytes)
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"order-7f3a", "order-7f3a"},
		{exact, exact},
		{exact + "b", exact + "…(truncated, 257 bytes)"},
		{strings.Repeat("a", wire.MaxLoggedBytes-1) + "é", strings.Repeat("a", wire.MaxLoggedBytes-1) + "…(truncated, 257 bytes)"},
	} {
		if got := wire.Loggable(tc.in); got != tc.want {
			t.Errorf("Loggable(%.40q...) = %.300q, want %.300q", tc.in, got, tc.want)
		}
	}
}

// integerMember is a body with one wire.Integer member.
type integerMember struct {
	N *wire.Integer `json:"n"`
}

// An Integer is read from the digits the client sent, never through a
// float64: the spelling of a whole number does not matter, its value does,
// exactly, to the last digit of an int64.
func TestIntegerIsReadExactly(t *testing.T) {
	t.Parallel()
	const lo, hi = math.MinInt64, math.MaxInt64
	for _, tc := range []struct {
		literal string
		want    int64
		err     error
	}{
		{"2", 2, nil}, {"2.0", 2, nil}, {"2e0", 2, nil}, {"0.2e1", 2, nil}, {"20E-1", 2, nil}, {"1e2", 100, nil}, {"1E+2", 100, nil},
		{"0", 0, nil}, {"-0", 0, nil}, {"0.000e-7", 0, nil}, {"0e99999999999999999999", 0, nil},
		{"-15", -15, nil}, {"150e-1", 15, nil}, {"1.5e1", 15, nil},
		{"9007199254740993", 9007199254740993, nil},
		{"9223372036854775807", math.MaxInt64, nil}, {"-9223372036854775808", math.MinInt64, nil},
		{"922337203685477580.7e1", math.MaxInt64, nil},
		{"2.5", 0, wire.ErrNotWhole}, {"2.0000000000000001", 0, wire.ErrNotWhole}, {"15e-1", 0, wire.ErrNotWhole},
		{"1e-400", 0, wire.ErrNotWhole}, {"1e-99999999999999999999", 0, wire.ErrNotWhole},
		{"9223372036854775808", 0, wire.ErrOutOfRange}, {"-9223372036854775809", 0, wire.ErrOutOfRange},
		{"1e19", 0, wire.ErrOutOfRange}, {"1e400", 0, wire.ErrOutOfRange}, {"1e99999999999999999999", 0, wire.ErrOutOfRange},
	} {
		var v integerMember
		if err := wire.Decode([]byte(`{"n":`+tc.literal+`}`), &v); err != nil || v.N == nil {
			t.Fatalf("Decode(%s) = %v", tc.literal, err)
		}
		got, err := v.N.Int(lo, hi)
		if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("%s: Int = %d, %v; want %d, %v", tc.literal, got, err, tc.want, tc.err)
		}
	}
	var v integerMember
	if err := wire.Decode([]byte(`{"n":1000}`), &v); err != nil {
		t.Fatal(err)
	}
	if _, err := v.N.Int(1, 999); !errors.Is(err, wire.ErrOutOfRange) {
		t.Errorf("1000 within 1..999: %v, want ErrOutOfRange", err)
	}
	if err := wire.Decode([]byte(`{"n":null}`), &v); err != nil || v.N != nil {
		t.Errorf("null: %v, %v; want a nil Integer", v.N, err)
	}
	for _, other := range []string{`"2"`, `true`, `[2]`, `{"n":2}`} {
		err := wire.Decode([]byte(`{"n":`+other+`}`), &v)
		var p *problem.Error
		if !errors.As(err, &p) || p.Code != problem.ValidationFailed || len(p.Fields) != 1 ||
			p.Fields[0] != (problem.FieldError{Field: "n", Message: "must be an integer"}) {
			t.Errorf("%s: %v, want n \"must be an integer\"", other, err)
		}
	}
}

// FuzzInteger: whatever number a body holds, Integer.Int agrees with exact
// rational arithmetic (math/big): whole or not, in range or not, and the
// value itself. Numbers whose exponent big.Rat cannot afford are left to
// TestIntegerIsReadExactly.
func FuzzInteger(f *testing.F) {
	for _, s := range []string{"2", "2.0", "-0", "1e2", "2.0000000000000001", "9007199254740993", "9223372036854775808",
		"-9223372036854775808", "1e-400", "1e400", "922337203685477580.7e1", "0.000e-7", "12.5E-1", "x", `"2"`, "0 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, literal string) {
		var v integerMember
		if err := wire.Decode([]byte(`{"n":`+literal+`}`), &v); err != nil || v.N == nil {
			return // not a number: refused by Decode
		}
		literal = strings.Trim(literal, " \t\r\n") // JSON's whitespace around the number
		if _, exp, ok := strings.Cut(strings.ToLower(literal), "e"); ok && len(strings.TrimLeft(strings.TrimLeft(exp, "+-"), "0")) > 3 {
			return
		}
		r, ok := new(big.Rat).SetString(literal)
		if !ok {
			t.Fatalf("%q decoded as a number, but big.Rat cannot read it", literal)
		}
		got, err := v.N.Int(math.MinInt64, math.MaxInt64)
		switch {
		case !r.IsInt():
			if !errors.Is(err, wire.ErrNotWhole) {
				t.Fatalf("%s is not whole: Int = %d, %v", literal, got, err)
			}
		case !r.Num().IsInt64():
			if !errors.Is(err, wire.ErrOutOfRange) {
				t.Fatalf("%s is past int64: Int = %d, %v", literal, got, err)
			}
		case err != nil || got != r.Num().Int64():
			t.Fatalf("%s: Int = %d, %v; want %d", literal, got, err, r.Num().Int64())
		}
	})
}
