package wire

import (
	"errors"
	"reflect"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// Integer is a whole-number member of a request (a quantity, an amount in
// minor units), read exactly from the digits the client sent, never through
// float64: a float64 holds every integer only up to 2^53, and rounds
// 2.0000000000000001 to 2 and 9007199254740993 to 9007199254740992, so a
// number that is not the one accepted would be accepted. The spelling of a
// number does not matter, its value does: 2, 2.0, 2e0 and 0.2e1 are the same
// whole number (as they are the same number in the request's fingerprint);
// 2.5 is not whole, and neither is 2.0000000000000001. Decode refuses any
// JSON value but a number in its place ("must be an integer"); Int then
// checks the value.
type Integer struct {
	literal string // a JSON number, as jsontext read it
}

// Int returns the number when it is a whole number from lo to hi:
// ErrNotWhole when it has a fractional part, ErrOutOfRange when it is
// whole and outside lo..hi (or beyond what an int64 holds).
func (n Integer) Int(lo, hi int64) (int64, error) {
	v, err := parseWhole(n.literal)
	if err != nil {
		return 0, err
	}
	if v < lo || v > hi {
		return 0, ErrOutOfRange
	}
	return v, nil
}

// Errors of Integer.Int.
var (
	ErrNotWhole   = errors.New("not a whole number")
	ErrOutOfRange = errors.New("out of range")
)

// errNotANumber is what Decode reports, as "must be an integer" naming the
// member, for an Integer member that holds another JSON value.
var errNotANumber = errors.New("not a JSON number")

var integerType = reflect.TypeFor[Integer]()

// UnmarshalJSONFrom reads a JSON number; null is left to the pointer that
// holds an optional Integer (nil), any other value is refused.
func (n *Integer) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	if dec.PeekKind() != '0' {
		return errNotANumber
	}
	v, err := dec.ReadValue()
	if err != nil {
		return err
	}
	n.literal = string(v)
	return nil
}

// maxExponentDigits bounds the exponent of a number parseWhole reads
// whole: 10^999999999 is past every range, and 10^-999999999 of a digit
// that is not zero is not whole, so a longer exponent is one of those.
const maxExponentDigits = 9

// parseWhole returns the value of s, a JSON number, when it is a whole
// number an int64 holds, computed from its decimal digits and exponent
// alone: time and memory grow with the length of s, never with the size
// of its exponent.
func parseWhole(s string) (int64, error) {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mantissa, exp, hasExp := strings.Cut(strings.ToLower(s), "e")
	intPart, frac, _ := strings.Cut(mantissa, ".")
	if intPart == "" || !allDigits(intPart) || !allDigits(frac) {
		return 0, errNotANumber
	}
	// The value is digits * 10^e.
	e := 0
	if hasExp {
		expNeg := strings.HasPrefix(exp, "-")
		exp = strings.TrimLeft(strings.TrimPrefix(strings.TrimPrefix(exp, "-"), "+"), "0")
		if !allDigits(exp) {
			return 0, errNotANumber
		}
		if len(exp) > maxExponentDigits {
			exp = "999999999" // the same answer as any longer one
		}
		for i := range len(exp) {
			e = e*10 + int(exp[i]-'0')
		}
		if expNeg {
			e = -e
		}
	}
	digits := strings.TrimLeft(intPart+frac, "0")
	e -= len(frac)
	trimmed := strings.TrimRight(digits, "0")
	e += len(digits) - len(trimmed)
	digits = trimmed
	switch {
	case digits == "":
		return 0, nil // zero, however spelt
	case e < 0:
		return 0, ErrNotWhole // its last digit, not a zero, is past the point
	case len(digits)+e > 19:
		return 0, ErrOutOfRange // at least 10^19, past every int64
	}
	var u uint64 // at most 19 digits: below 10^19, which a uint64 holds
	for i := range len(digits) {
		u = u*10 + uint64(digits[i]-'0')
	}
	for range e {
		u *= 10
	}
	switch {
	case !neg && u <= 1<<63-1:
		return int64(u), nil // #nosec G115 -- u is at most 2^63-1 here
	case neg && u <= 1<<63:
		return -int64(u-1) - 1, nil // #nosec G115 -- u-1 is at most 2^63-1 here; -2^63 too, without overflowing
	}
	return 0, ErrOutOfRange
}

func allDigits(s string) bool {
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
