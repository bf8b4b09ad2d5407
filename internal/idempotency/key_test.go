package idempotency_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/problem"
)

func TestParseKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		values  []string
		want    idempotency.Key
		wantErr problem.Code
	}{
		{"bare", []string{"order-42"}, "order-42", ""},
		{"uuid", []string{"3b9f1d2e-8c1f-4b7a-9f0e-2a1d6c5e4b3a"}, "3b9f1d2e-8c1f-4b7a-9f0e-2a1d6c5e4b3a", ""},
		{"quoted", []string{`"order-42"`}, "order-42", ""},
		{"quoted with escapes", []string{`"a\"b\\c"`}, `a"b\c`, ""},
		{"all visible ascii", []string{"!~#$%&'()*+,-./:;<=>?@[]^_`{|}"}, "!~#$%&'()*+,-./:;<=>?@[]^_`{|}", ""},
		{"255 chars", []string{strings.Repeat("k", 255)}, idempotency.Key(strings.Repeat("k", 255)), ""},
		{"missing", nil, "", problem.IdempotencyKeyMissing},
		{"empty", []string{""}, "", problem.IdempotencyKeyMissing},
		{"256 chars", []string{strings.Repeat("k", 256)}, "", problem.IdempotencyKeyInvalid},
		{"space", []string{"a b"}, "", problem.IdempotencyKeyInvalid},
		{"tab", []string{"a\tb"}, "", problem.IdempotencyKeyInvalid},
		{"non-ascii", []string{"caf\u00e9"}, "", problem.IdempotencyKeyInvalid},
		{"control", []string{"a\x00b"}, "", problem.IdempotencyKeyInvalid},
		{"empty quoted", []string{`""`}, "", problem.IdempotencyKeyInvalid},
		{"quoted space", []string{`"a b"`}, "", problem.IdempotencyKeyInvalid},
		{"unterminated", []string{`"abc`}, "", problem.IdempotencyKeyInvalid},
		{"bad escape", []string{`"a\nb"`}, "", problem.IdempotencyKeyInvalid},
		{"inner quote", []string{`"a"b"`}, "", problem.IdempotencyKeyInvalid},
		{"lone quote", []string{`"`}, "", problem.IdempotencyKeyInvalid},
		{"two headers", []string{"a", "b"}, "", problem.IdempotencyKeyInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range tc.values {
				h.Add(idempotency.HeaderKey, v)
			}
			got, err := idempotency.ParseKey(h)
			if tc.wantErr != "" {
				if code := problem.CodeOf(err); code != tc.wantErr {
					t.Fatalf("ParseKey(%q) error = %v, want code %s", tc.values, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseKey(%q) = %q, %v; want %q", tc.values, got, err, tc.want)
			}
		})
	}
}

// FuzzParseKey: any header value either parses to 1-255 visible ASCII
// characters or is refused with a key error; never a panic, never another
// error. A parsed key written back in quoted form parses to itself.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, `"a\"b"`, "", " ", strings.Repeat("x", 300), "\xff", `"\`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		h := http.Header{idempotency.HeaderKey: []string{v}}
		k, err := idempotency.ParseKey(h)
		if err != nil {
			if c := problem.CodeOf(err); c != problem.IdempotencyKeyInvalid && c != problem.IdempotencyKeyMissing {
				t.Fatalf("ParseKey(%q): unexpected error %v", v, err)
			}
			return
		}
		if len(k) < 1 || len(k) > idempotency.MaxKeyLength {
			t.Fatalf("ParseKey(%q) = %q: bad length", v, k)
		}
		for i := 0; i < len(k); i++ {
			if k[i] < 0x21 || k[i] > 0x7e {
				t.Fatalf("ParseKey(%q) = %q: byte %#x is not visible ASCII", v, k, k[i])
			}
		}
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(string(k)) + `"`
		k2, err := idempotency.ParseKey(http.Header{idempotency.HeaderKey: []string{quoted}})
		if err != nil || k2 != k {
			t.Fatalf("quoted form %q of %q parses to %q, %v", quoted, k, k2, err)
		}
	})
}
