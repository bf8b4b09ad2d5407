package idempotency

import (
	"net/http"
	"strings"

	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/wire"
)

// HeaderKey is the request header that carries the idempotency key.
const HeaderKey = "Idempotency-Key"

// MaxKeyLength is the longest key accepted, in bytes (all visible ASCII).
const MaxKeyLength = 255

// Key is a validated idempotency key: 1 to 255 visible ASCII characters. It
// names one business intent of the client, never one attempt.
type Key string

// ParseKey reads the Idempotency-Key header of h. The key is either a bare
// token or a Structured Field string ("abc", as the IETF draft writes it);
// both forms of the same characters name the same key.
func ParseKey(h http.Header) (Key, error) {
	values := h.Values(HeaderKey)
	switch {
	case len(values) == 0 || (len(values) == 1 && values[0] == ""):
		return "", problem.New(problem.IdempotencyKeyMissing, "The %s header is required on every POST.", HeaderKey)
	case len(values) > 1:
		return "", problem.New(problem.IdempotencyKeyInvalid, "Send exactly one %s header.", HeaderKey)
	}
	k, ok := parseKey(values[0])
	if !ok {
		return "", problem.New(problem.IdempotencyKeyInvalid,
			"The %s must be 1 to %d visible ASCII characters, bare or as a quoted Structured Field string.", HeaderKey, MaxKeyLength)
	}
	return k, nil
}

// KeyOf validates a key given bare, as a URL names it (GET
// /v1/idempotency-keys/{operation}/{key}): the same 1 to 255 visible ASCII
// characters as the header's.
func KeyOf(v string) (Key, error) {
	if !wire.VisibleASCII(v, MaxKeyLength) {
		return "", problem.New(problem.IdempotencyKeyInvalid,
			"An idempotency key is 1 to %d visible ASCII characters (URL-encoded in a path).", MaxKeyLength)
	}
	return Key(v), nil
}

// parseKey validates one header value.
func parseKey(v string) (Key, bool) {
	if strings.HasPrefix(v, `"`) {
		var ok bool
		if v, ok = unquoteSFString(v); !ok {
			return "", false
		}
	}
	k, err := KeyOf(v)
	return k, err == nil
}

// unquoteSFString parses an RFC 8941 sf-string: DQUOTE *( unescaped / "\"
// ( DQUOTE / "\" ) ) DQUOTE, where unescaped is printable ASCII.
func unquoteSFString(v string) (string, bool) {
	if len(v) < 2 || v[len(v)-1] != '"' {
		return "", false
	}
	inner := v[1 : len(v)-1]
	var b strings.Builder
	for i := 0; i < len(inner); i++ {
		c := inner[i]
		switch {
		case c == '\\':
			i++
			if i == len(inner) || (inner[i] != '"' && inner[i] != '\\') {
				return "", false
			}
			b.WriteByte(inner[i])
		case c == '"':
			return "", false
		case c < 0x20 || c > 0x7e:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}
