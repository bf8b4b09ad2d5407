package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"
)

// The stable error codes of the API (docs/CONTRACT.md). A code never changes
// meaning, so branching on it with IsCode is safe across versions.
const (
	CodeUnauthorized               = "unauthorized"
	CodeIdempotencyKeyMissing      = "idempotency_key_missing"
	CodeIdempotencyKeyInvalid      = "idempotency_key_invalid"
	CodeIdempotencyKeyReused       = "idempotency_key_reused"
	CodeRequestInProgress          = "request_in_progress"
	CodeAwaitingOperator           = "awaiting_operator"
	CodeInvalidJSON                = "invalid_json"
	CodeValidationFailed           = "validation_failed"
	CodeRequestTooLarge            = "request_too_large"
	CodeRequestTimeout             = "request_timeout"
	CodeClientClosedRequest        = "client_closed_request"
	CodeNotFound                   = "not_found"
	CodeMethodNotAllowed           = "method_not_allowed"
	CodeCardDeclined               = "card_declined"
	CodeOrderAlreadyPaid           = "order_already_paid"
	CodeOrderNotPayable            = "order_not_payable"
	CodeOrderNotCancellable        = "order_not_cancellable"
	CodeRefundExceedsPayment       = "refund_exceeds_payment"
	CodePaymentNotRefundable       = "payment_not_refundable"
	CodePaymentCancelled           = "payment_cancelled"
	CodePaymentRejected            = "payment_rejected"
	CodePaymentProviderUnavailable = "payment_provider_unavailable"
	CodeServiceUnavailable         = "service_unavailable"
	CodeRateLimited                = "rate_limited"
	CodeOverloaded                 = "overloaded"
	CodeInternal                   = "internal_error"
)

// Error is an answer of the API that is not a success: an RFC 9457 problem
// with the API's stable Code. Obtain it with errors.As; IsCode covers the
// common case of branching on the code alone.
type Error struct {
	// Status is the HTTP status code of the answer.
	Status int
	// Code is the stable, machine-readable reason (one of the Code*
	// constants). It is empty only when the answer was not a problem of this
	// API, e.g. an HTML 502 from a proxy in between.
	Code string
	// Type and Title are the RFC 9457 members; Code says the same more
	// conveniently.
	Type  string
	Title string
	// Detail is a human-readable explanation, safe to show and to log.
	Detail string
	// Fields names the invalid fields of a validation_failed answer.
	Fields []FieldError
	// RetryAfter is the server's Retry-After: how long to wait before retrying
	// the same request with the same key. Zero when the server sent none.
	RetryAfter time.Duration
	// Replayed is true when this failure was stored by an earlier request with
	// the same key and replayed: e.g. a declined card stays declined under its
	// key, and a new attempt needs a new key.
	Replayed bool
	// IdempotencyKey is the key of the call, empty for a GET.
	IdempotencyKey string
	// RequestID names the HTTP attempt (X-Request-Id), for the service's logs.
	RequestID string
}

// FieldError names one invalid request member, in JSON-path-like notation
// such as "items[0].quantity".
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Error returns a one-line description with the status, the code and the
// detail, e.g. "oncepay: 402 card_declined: The card was declined (...)".
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "oncepay: %d", e.Status)
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	for _, f := range e.Fields {
		fmt.Fprintf(&b, "; %s: %s", f.Field, f.Message)
	}
	return b.String()
}

// retryable reports whether the same request with the same key may still get
// another, final answer: the outcome is open, not decided.
func (e *Error) retryable() bool {
	switch e.Status {
	case http.StatusConflict:
		return e.Code == CodeRequestInProgress
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// IsCode reports whether err is, or wraps, an *Error with the given code,
// such as CodeCardDeclined.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// Retryable reports whether err leaves the call's outcome open, so that the
// same call with the same idempotency key (Meta.IdempotencyKey) may still
// succeed later: a network failure, a 5xx, 409 request_in_progress, or a
// context that ended first. It is false for a definite answer, such as
// card_declined or idempotency_key_reused, which a retry would only replay,
// for 409 awaiting_operator, which no retry moves on before an operator
// has released the attempt, and for a mistake of the caller found before
// anything was sent.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	var e *Error
	if errors.As(err, &e) {
		return e.retryable()
	}
	var t *transportError
	return errors.As(err, &t) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// transportError marks a failure to exchange one request and its answer:
// the request may or may not have reached the server.
type transportError struct{ err error }

func (e *transportError) Error() string { return e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

// retryableTransport reports whether another attempt can help. A certificate
// the client rejects is a configuration error that no retry fixes; everything
// else (refused, reset, dropped, timed out) may be gone on the next attempt.
func retryableTransport(err error) bool {
	var (
		verify  *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
	)
	return !errors.As(err, &verify) && !errors.As(err, &unknown) && !errors.As(err, &host)
}

// problemJSON is the wire form of an RFC 9457 problem of the API.
type problemJSON struct {
	Type   string       `json:"type"`
	Title  string       `json:"title"`
	Status int          `json:"status"`
	Detail string       `json:"detail"`
	Code   string       `json:"code"`
	Errors []FieldError `json:"errors"`
}

// maxDetail bounds the part of a foreign error body kept as Detail.
const maxDetail = 200

// decodeError turns a non-2xx answer into an *Error. A body that is not a
// problem of this API (a proxy's HTML page) still yields an *Error with the
// status, so retry decisions rest on the status alone.
func decodeError(status int, h http.Header, body []byte, meta Meta) *Error {
	e := &Error{
		Status:         status,
		RetryAfter:     parseRetryAfter(h.Get("Retry-After"), time.Now()),
		Replayed:       meta.Replayed,
		IdempotencyKey: meta.IdempotencyKey,
		RequestID:      meta.RequestID,
	}
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	var p problemJSON
	if (mt == "application/problem+json" || mt == "application/json") && json.Unmarshal(body, &p) == nil && p.Code != "" {
		e.Code, e.Type, e.Title, e.Detail, e.Fields = p.Code, p.Type, p.Title, p.Detail, p.Errors
		return e
	}
	e.Title = http.StatusText(status)
	e.Detail = strings.TrimSpace(string(body))
	if len(e.Detail) > maxDetail {
		e.Detail = strings.ToValidUTF8(e.Detail[:maxDetail], "") + "..."
	}
	if e.Detail == "" {
		e.Detail = e.Title
	}
	return e
}
