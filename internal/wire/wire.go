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
	"reflect"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
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

// Request bodies are decoded by github.com/go-json-experiment/json, the
// implementation of encoding/json/v2 (in the standard library only behind
// GOEXPERIMENT=jsonv2 so far), not by encoding/json, whose defaults break
// the contract: encoding/json matches member names case-insensitively
// ({"amount":1,"AMOUNT":2} refunds 2, though the contract knows no member
// AMOUNT) and lets the last of two equal names win. The v2 defaults are the
// contract's: a name matches its field exactly, a name twice in one object
// is a syntax error, and so is invalid UTF-8. Responses are still encoded by
// encoding/json (Encode): what it writes is the contract's already.

// Decode parses body, a single JSON object, into v strictly: every member
// name must be one of v's field names, exactly as spelt (a name that
// differs only by case is unknown), so a typo must not silently change what
// a request means. What is not JSON, a name twice in one object, and invalid
// UTF-8 are 400 invalid_json; a well-formed body of the wrong shape, or with
// an unknown member, is 422 validation_failed naming the member by its path
// (items[0].quantity).
func Decode(body []byte, v any) error { return decode(body, v, true) }

// DecodeOpen is Decode for an open object, one whose sender may add
// members: unknown members are ignored instead of refused. Names still
// match exactly, so a member that differs from a known one only by case is
// one of those ignored, and duplicates are still refused. The provider's
// webhook events are open.
func DecodeOpen(body []byte, v any) error { return decode(body, v, false) }

func decode(body []byte, v any, rejectUnknown bool) error {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return problem.New(problem.InvalidJSON, "The request body must be a JSON object.")
	}
	var syntaxErr *jsontext.SyntacticError
	if err := validJSON(trimmed); err != nil {
		if errors.As(err, &syntaxErr) && errors.Is(syntaxErr.Err, jsontext.ErrDuplicateName) {
			return &problem.Error{Code: problem.InvalidJSON, Detail: fmt.Sprintf("The request body names the member %q twice in one object.", syntaxErr.JSONPointer.LastToken()), Err: err}
		}
		return &problem.Error{Code: problem.InvalidJSON, Detail: "The request body is not valid JSON.", Err: err}
	}
	if trimmed[0] != '{' {
		return problem.Validation(problem.FieldError{Field: "", Message: "must be a JSON object"})
	}
	if err := jsonv2.Unmarshal(trimmed, v, jsonv2.RejectUnknownMembers(rejectUnknown)); err != nil {
		return shapeError(trimmed, err)
	}
	return nil
}

// validJSON reports the first syntax error of body: anything but exactly
// one JSON value, a name twice in one object, invalid UTF-8.
func validJSON(body []byte) error {
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	if _, err := dec.ReadValue(); err != nil {
		return err
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("more than one JSON value: %w", err)
	}
	return nil
}

// shapeError turns an error of decoding body, valid JSON, into
// validation_failed naming the member.
func shapeError(body []byte, err error) error {
	var semErr *jsonv2.SemanticError
	if !errors.As(err, &semErr) {
		return &problem.Error{Code: problem.InvalidJSON, Detail: "The request body could not be decoded.", Err: err}
	}
	field := fieldPath(body, semErr.JSONPointer)
	if errors.Is(semErr.Err, jsonv2.ErrUnknownName) {
		return &problem.Error{Code: problem.ValidationFailed, Detail: "The request has invalid fields.",
			Fields: []problem.FieldError{{Field: field, Message: "unknown field"}}, Err: err}
	}
	if field == "" {
		field = "(root)"
	}
	kind := "of another type"
	switch {
	case semErr.GoType == integerType:
		kind = "an integer"
	case semErr.GoType != nil:
		kind = jsonKind(semErr.GoType.Kind())
	}
	message := "must be " + kind
	if semErr.JSONKind == '0' { // a number its field cannot hold
		switch kind {
		case "a number":
			message = "is out of range"
		case "an integer":
			message = "must be an integer in range"
		}
	}
	return &problem.Error{Code: problem.ValidationFailed, Detail: "The request has invalid fields.",
		Fields: []problem.FieldError{{Field: field, Message: message}}, Err: err}
}

// fieldPath spells ptr, a JSON Pointer into body (valid JSON), as the
// contract names fields: items[1].quantity. Whether a token is an index or
// a name is read from body itself, since a name may be all digits.
func fieldPath(body []byte, ptr jsontext.Pointer) string {
	var b strings.Builder
	cur := jsontext.Value(body)
	for tok := range ptr.Tokens() {
		if cur.Kind() == '[' {
			var elems []jsontext.Value
			_ = jsonv2.Unmarshal(cur, &elems)
			fmt.Fprintf(&b, "[%s]", tok)
			cur = nil
			if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(elems) {
				cur = elems[i]
			}
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
		var members map[string]jsontext.Value
		_ = jsonv2.Unmarshal(cur, &members)
		cur = members[tok]
	}
	return b.String()
}

func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Bool:
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

// MaxLoggedBytes bounds a value a client chose (a header, the method, the
// path) in a log line.
const MaxLoggedBytes = 256

// Loggable returns s, a value taken from a request, as a log line may carry
// it: s itself when it is at most MaxLoggedBytes long, otherwise its first
// MaxLoggedBytes (cut to valid UTF-8) and a marker that says how long it
// was. A client must not decide how large our log lines are: a header may
// be tens of kilobytes.
func Loggable(s string) string {
	if len(s) <= MaxLoggedBytes {
		return s
	}
	return fmt.Sprintf("%s…(truncated, %d bytes)", strings.ToValidUTF8(s[:MaxLoggedBytes], ""), len(s))
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
