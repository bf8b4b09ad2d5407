// Package wire decodes request bodies strictly and encodes response bodies,
// turning every client mistake into a problem with a stable code: malformed
// JSON is 400 invalid_json, a well-formed body of the wrong shape is 422
// validation_failed naming the field. Client input never reaches a 500.
package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/problem"
)

// MaxBodyBytes bounds every request body: 64 KiB, 65,536 bytes. A larger
// one is refused with 413 request_too_large.
const MaxBodyBytes = 64 << 10

// ReadBody reads a request's body, at most MaxBodyBytes of it. Every
// handler that reads a body reads it here, so the limit is the same
// everywhere and is exactly the number the docs and the 413 state. A
// Content-Length over the limit is refused before a byte is read. A body
// that never arrives whole is a client error: 408 request_timeout when the
// client was slower than the server's read timeout, 499
// client_closed_request when it hung up first.
func ReadBody(r *http.Request) ([]byte, error) {
	if r.ContentLength > MaxBodyBytes {
		return nil, tooLarge()
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, tooLarge()
		}
		// Reading a request body fails only on the client's side of the
		// connection: it hung up (or reset) before the body was complete,
		// or it was slower than the server's read timeout. Either is a
		// client error, never a 500.
		var netErr net.Error
		if errors.As(err, &netErr) && netErr.Timeout() {
			return nil, &problem.Error{Code: problem.RequestTimeout, Detail: "The request body did not arrive within the server's read timeout.", Err: err}
		}
		return nil, &problem.Error{Code: problem.ClientClosedRequest, Detail: "The connection ended before the request body was complete.", Err: err}
	}
	return body, nil
}

func tooLarge() error {
	return problem.New(problem.RequestTooLarge, "The request body is larger than %d bytes (64 KiB).", MaxBodyBytes)
}

// Decode parses body, a single JSON object, into v. Unknown fields are
// refused: a typo must not silently change what a request means.
func Decode(body []byte, v any) error {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return problem.New(problem.InvalidJSON, "The request body must be a JSON object.")
	}
	if trimmed[0] != '{' {
		if json.Valid(trimmed) {
			return problem.Validation(problem.FieldError{Field: "", Message: "must be a JSON object"})
		}
		return problem.New(problem.InvalidJSON, "The request body is not valid JSON.")
	}
	if !json.Valid(trimmed) {
		return problem.New(problem.InvalidJSON, "The request body is not valid JSON.")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return shapeError(trimmed, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return problem.New(problem.InvalidJSON, "The request body must hold exactly one JSON object.")
	}
	return nil
}

// shapeError turns a decoding error of body, valid JSON, into
// validation_failed.
func shapeError(body []byte, err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		field := typeErr.Field
		if p, ok := pathAt(body, typeErr.Offset); ok {
			field = p // with array indices, which typeErr.Field lacks
		}
		if field == "" {
			field = "(root)"
		}
		kind := jsonKind(typeErr.Type.Kind().String())
		if strings.HasPrefix(typeErr.Value, "number") { // a number its field cannot hold
			switch kind {
			case "a number":
				return problem.Validation(problem.FieldError{Field: field, Message: "is out of range"})
			case "an integer":
				return problem.Validation(problem.FieldError{Field: field, Message: "must be an integer in range"})
			}
		}
		return problem.Validation(problem.FieldError{Field: field, Message: "must be " + kind})
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return problem.Validation(problem.FieldError{Field: strings.Trim(name, `"`), Message: "unknown field"})
	}
	return &problem.Error{Code: problem.InvalidJSON, Detail: "The request body could not be decoded.", Err: err}
}

// pathAt returns the path (items[0].quantity) of the value of body, valid
// JSON, that ends at offset, the place encoding/json reports a type error
// at (the end of a scalar, or just after the opening of an array or object).
func pathAt(body []byte, offset int64) (string, bool) {
	type frame struct {
		array   bool
		index   int
		key     string
		wantKey bool
	}
	var stack []frame
	path := func() string {
		var b strings.Builder
		for _, f := range stack {
			if f.array {
				fmt.Fprintf(&b, "[%d]", f.index)
				continue
			}
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(f.key)
		}
		return b.String()
	}
	afterValue := func() {
		if n := len(stack); n > 0 {
			if stack[n-1].array {
				stack[n-1].index++
			} else {
				stack[n-1].wantKey = true
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		if n := len(stack); n > 0 && !stack[n-1].array && stack[n-1].wantKey {
			if key, ok := tok.(string); ok {
				stack[n-1].key, stack[n-1].wantKey = key, false
				continue
			}
		}
		switch tok {
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			afterValue()
			continue
		}
		if dec.InputOffset() >= offset {
			return path(), true
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{wantKey: true})
		case json.Delim('['):
			stack = append(stack, frame{array: true})
		default:
			afterValue()
		}
	}
}

func jsonKind(goKind string) string {
	switch {
	case strings.HasPrefix(goKind, "int"), strings.HasPrefix(goKind, "uint"):
		return "an integer"
	case strings.HasPrefix(goKind, "float"):
		return "a number"
	case goKind == "string":
		return "a string"
	case goKind == "slice" || goKind == "array":
		return "an array"
	case goKind == "struct" || goKind == "map":
		return "an object"
	case goKind == "bool":
		return "a boolean"
	}
	return "of another type"
}

// Encode renders v as a response body. Types passed here are the handlers'
// own response types, which always encode.
func Encode(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode response: %w", err)
	}
	return b, nil
}

// JSON writes v as a JSON response, encoded exactly as a stored idempotent
// response is (no trailing newline), so GET and POST bodies of the same
// resource are byte-identical.
func JSON(c echo.Context, status int, v any) error {
	b, err := Encode(v)
	if err != nil {
		return err
	}
	return c.Blob(status, echo.MIMEApplicationJSON, b)
}

// CheckText checks a short identifier-like string of a request (a SKU, a
// payment method): it must not be empty, must be at most max characters
// (Unicode code points, as JSON Schema's maxLength counts them) and must hold
// no control characters. PostgreSQL's text cannot store U+0000 at all, so
// without this check such a string would fail in the database, as a 500. It
// returns what is wrong, or "".
func CheckText(s string, max int) string {
	switch {
	case s == "":
		return "is required"
	case utf8.RuneCountInString(s) > max:
		return fmt.Sprintf("must be at most %d characters", max)
	case strings.ContainsFunc(s, unicode.IsControl):
		return "must not contain control characters"
	}
	return ""
}

// VisibleASCII reports whether s is 1 to max visible ASCII characters
// (0x21 to 0x7e): what a header value that we store, log and echo may hold,
// such as an Idempotency-Key or an X-Request-Id.
func VisibleASCII(s string, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := range len(s) {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// Page sizes of every list endpoint.
const (
	DefaultPageSize = 20
	MaxPageSize     = 100
)

// ParseLimit reads a list's `limit` query parameter: absent means
// DefaultPageSize; anything but an integer from 1 to MaxPageSize is a
// validation error naming the field.
func ParseLimit(raw string) (int, error) {
	if raw == "" {
		return DefaultPageSize, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 || n > MaxPageSize {
		return 0, problem.Validation(problem.FieldError{Field: "limit", Message: fmt.Sprintf("must be an integer between 1 and %d", MaxPageSize)})
	}
	return n, nil
}
