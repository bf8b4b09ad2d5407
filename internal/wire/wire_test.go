package wire_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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
