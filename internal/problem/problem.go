// Package problem is the service's one application error type and its
// rendering as RFC 9457 application/problem+json.
//
// Every error a client can see carries a stable Code; Status maps codes to HTTP
// status codes in exactly one table. Mechanisms and features return *Error;
// the HTTP layer renders it (internal/httpapi), and services that must store a
// business failure as an idempotent response (a declined card is a final,
// replayable outcome) render it with JSON.
package problem

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"
)

// ContentType is the media type of every error body (RFC 9457).
const ContentType = "application/problem+json"

// Code is a stable, machine-readable error identifier. Clients branch on it;
// it never changes meaning once published.
type Code string

// The codes of the HTTP contract. docs/CONTRACT.md lists them with their status.
const (
	Unauthorized               Code = "unauthorized"
	IdempotencyKeyMissing      Code = "idempotency_key_missing"
	IdempotencyKeyInvalid      Code = "idempotency_key_invalid"
	IdempotencyKeyReused       Code = "idempotency_key_reused"
	RequestInProgress          Code = "request_in_progress"
	AwaitingOperator           Code = "awaiting_operator"
	InvalidJSON                Code = "invalid_json"
	ValidationFailed           Code = "validation_failed"
	RequestTooLarge            Code = "request_too_large"
	RequestTimeout             Code = "request_timeout"
	ClientClosedRequest        Code = "client_closed_request"
	NotFound                   Code = "not_found"
	MethodNotAllowed           Code = "method_not_allowed"
	CardDeclined               Code = "card_declined"
	OrderAlreadyPaid           Code = "order_already_paid"
	OrderNotPayable            Code = "order_not_payable"
	OrderNotCancellable        Code = "order_not_cancellable"
	PaymentCancelled           Code = "payment_cancelled"
	RefundExceedsPayment       Code = "refund_exceeds_payment"
	PaymentNotRefundable       Code = "payment_not_refundable"
	PaymentRejected            Code = "payment_rejected"
	PaymentProviderUnavailable Code = "payment_provider_unavailable"
	ServiceUnavailable         Code = "service_unavailable"
	RateLimited                Code = "rate_limited"
	Overloaded                 Code = "overloaded"
	Internal                   Code = "internal_error"
)

// statuses is the one table from codes to HTTP status codes.
var statuses = map[Code]int{
	Unauthorized:               http.StatusUnauthorized,
	IdempotencyKeyMissing:      http.StatusBadRequest,
	IdempotencyKeyInvalid:      http.StatusBadRequest,
	IdempotencyKeyReused:       http.StatusUnprocessableEntity,
	RequestInProgress:          http.StatusConflict,
	AwaitingOperator:           http.StatusConflict,
	InvalidJSON:                http.StatusBadRequest,
	ValidationFailed:           http.StatusUnprocessableEntity,
	RequestTooLarge:            http.StatusRequestEntityTooLarge,
	RequestTimeout:             http.StatusRequestTimeout,
	ClientClosedRequest:        StatusClientClosedRequest,
	NotFound:                   http.StatusNotFound,
	MethodNotAllowed:           http.StatusMethodNotAllowed,
	CardDeclined:               http.StatusPaymentRequired,
	OrderAlreadyPaid:           http.StatusConflict,
	OrderNotPayable:            http.StatusConflict,
	OrderNotCancellable:        http.StatusConflict,
	PaymentCancelled:           http.StatusConflict,
	RefundExceedsPayment:       http.StatusUnprocessableEntity,
	PaymentNotRefundable:       http.StatusConflict,
	PaymentRejected:            http.StatusUnprocessableEntity,
	PaymentProviderUnavailable: http.StatusServiceUnavailable,
	ServiceUnavailable:         http.StatusServiceUnavailable,
	RateLimited:                http.StatusTooManyRequests,
	Overloaded:                 http.StatusServiceUnavailable,
	Internal:                   http.StatusInternalServerError,
}

// Codes returns every code, sorted: the contract's list (the OpenAPI
// ProblemCode enum and the Go client's Code constants list the same; tests
// keep them equal).
func Codes() []Code {
	return slices.Sorted(maps.Keys(statuses))
}

// StatusClientClosedRequest is the status of a request whose client hung up
// before its body arrived: nginx's 499, a client error for logs and
// metrics. Nobody reads the answer; HTTP itself has no such status.
const StatusClientClosedRequest = 499

// Title returns the title of a status: its reason phrase (RFC 9110), and
// "Client Closed Request" for StatusClientClosedRequest, which has none.
func Title(status int) string {
	if status == StatusClientClosedRequest {
		return "Client Closed Request"
	}
	return http.StatusText(status)
}

// Status returns the HTTP status code for code; unknown codes are internal
// errors, so a missing table entry shows up as a 500 in tests, not as a lie.
func Status(code Code) int {
	if s, ok := statuses[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// FieldError names one invalid request field, in JSON-path-like notation
// ("items[0].quantity").
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Error is the application error. Detail is safe to show to the client; Err is
// the cause, for logs only.
type Error struct {
	Code   Code
	Detail string
	// Fields lists the invalid fields of a validation_failed error.
	Fields []FieldError
	// Instance, when set, is a URI reference to the resource this occurrence
	// is about (RFC 9457 "instance"), e.g. the declined payment.
	Instance string
	// RetryAfter, when positive, is sent as the Retry-After header: the client
	// may retry the same request (same idempotency key) after this long.
	RetryAfter time.Duration
	// NoChallenge, on an unauthorized error, leaves out the Bearer
	// challenge (WWW-Authenticate) every other 401 carries: for a route
	// whose caller authenticates by signing the request (the provider's
	// webhooks), a challenge would ask for a token nobody has.
	NoChallenge bool
	// Err is the underlying cause. It is logged, never sent.
	Err error
}

// New returns an error with a code and a client-safe detail message.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Detail: fmt.Sprintf(format, args...)}
}

// Validation returns a validation_failed error naming the invalid fields.
func Validation(fields ...FieldError) *Error {
	return &Error{Code: ValidationFailed, Detail: "The request has invalid fields.", Fields: fields}
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Detail, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Detail)
}

func (e *Error) Unwrap() error { return e.Err }

// CodeOf returns the code of the first *Error in err's chain, or Internal.
func CodeOf(err error) Code {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return Internal
}

// body is the wire form of an Error (RFC 9457 members plus code and errors).
type body struct {
	Type     string       `json:"type"`
	Title    string       `json:"title"`
	Status   int          `json:"status"`
	Detail   string       `json:"detail,omitempty"`
	Instance string       `json:"instance,omitempty"`
	Code     Code         `json:"code"`
	Errors   []FieldError `json:"errors,omitempty"`
}

// JSON renders e as an application/problem+json body. It carries no request
// id or timestamp, so a stored failure replays byte for byte.
func (e *Error) JSON() []byte {
	status := Status(e.Code)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // bodies are JSON, not HTML: keep "<" readable
	err := enc.Encode(body{
		Type:     "urn:oncepay:problem:" + string(e.Code),
		Title:    Title(status),
		Status:   status,
		Detail:   e.Detail,
		Instance: e.Instance,
		Code:     e.Code,
		Errors:   e.Fields,
	})
	if err != nil {
		// Marshalling strings and ints cannot fail; keep the contract anyway.
		return []byte(`{"type":"urn:oncepay:problem:internal_error","title":"Internal Server Error","status":500,"code":"internal_error"}`)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
