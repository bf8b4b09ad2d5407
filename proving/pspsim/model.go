package pspsim

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
)

// Object names, charge statuses and the simulated payment methods. They are
// exported so callers can compare against them instead of repeating literals.
const (
	// ObjectCharge is the "object" field of a Charge.
	ObjectCharge = "charge"
	// ObjectRefund is the "object" field of a Refund.
	ObjectRefund = "refund"

	// StatusSucceeded marks a charge or refund that moved money.
	StatusSucceeded = "succeeded"
	// StatusFailed marks a recorded charge whose card was declined.
	StatusFailed = "failed"

	// PaymentMethodOK always succeeds (unless Faults.DeclineRate says otherwise).
	PaymentMethodOK = "pm_card_ok"
	// PaymentMethodDeclined is always declined with CodeCardDeclined.
	PaymentMethodDeclined = "pm_card_declined"
	// PaymentMethodInsufficientFunds is always declined with
	// CodeInsufficientFunds.
	PaymentMethodInsufficientFunds = "pm_card_insufficient_funds"
)

// Error types, the "error.type" field, grouped like Stripe's so the merchant
// can decide retryability from the type alone.
const (
	// ErrTypeInvalidRequest is a request the provider refused; retrying it
	// unchanged will fail again.
	ErrTypeInvalidRequest = "invalid_request_error"
	// ErrTypeCard is a decline; the charge was recorded as failed.
	ErrTypeCard = "card_error"
	// ErrTypeIdempotency is a misuse of the Idempotency-Key header.
	ErrTypeIdempotency = "idempotency_error"
	// ErrTypeAPI is a provider-side failure; retrying with the same key is
	// safe and expected.
	ErrTypeAPI = "api_error"
	// ErrTypeAuthentication is a missing or wrong API key.
	ErrTypeAuthentication = "authentication_error"
)

// Error codes, the "error.code" field (and Charge.FailureCode for declines).
const (
	// CodeCardDeclined is a generic decline.
	CodeCardDeclined = "card_declined"
	// CodeInsufficientFunds is a decline for lack of funds.
	CodeInsufficientFunds = "insufficient_funds"
	// CodeInvalidPaymentMethod is an unknown payment_method; nothing is recorded.
	CodeInvalidPaymentMethod = "invalid_payment_method"
	// CodeInvalidAmount is a non-positive or malformed amount.
	CodeInvalidAmount = "invalid_amount"
	// CodeAmountTooLarge is a charge above MaxAmount or a refund above what
	// remains refundable on the charge.
	CodeAmountTooLarge = "amount_too_large"
	// CodeInvalidCurrency is a currency that is not three upper-case letters.
	CodeInvalidCurrency = "invalid_currency"
	// CodeInvalidMetadata is metadata beyond the size limits.
	CodeInvalidMetadata = "invalid_metadata"
	// CodeInvalidJSON is a body that does not decode into the request shape
	// (bad JSON, unknown fields, wrong types, trailing data).
	CodeInvalidJSON = "invalid_json"
	// CodeRequestTooLarge is a body above the size limit.
	CodeRequestTooLarge = "request_too_large"
	// CodeParameterMissing is a missing required body field.
	CodeParameterMissing = "parameter_missing"
	// CodeIdempotencyKeyMissing is a POST without an Idempotency-Key header.
	CodeIdempotencyKeyMissing = "idempotency_key_missing"
	// CodeIdempotencyKeyInvalid is an Idempotency-Key that is blank or too long.
	CodeIdempotencyKeyInvalid = "idempotency_key_invalid"
	// CodeIdempotencyKeyReused is a known key sent with a different request.
	CodeIdempotencyKeyReused = "idempotency_key_reused"
	// CodeIdempotencyKeyInUse is a key whose first request is still being
	// processed.
	CodeIdempotencyKeyInUse = "idempotency_key_in_use"
	// CodeResourceMissing is an unknown charge or refund id.
	CodeResourceMissing = "resource_missing"
	// CodeChargeFailed is a refund of a charge that was declined.
	CodeChargeFailed = "charge_failed"
	// CodeChargeAlreadyRefunded is a refund of a fully refunded charge.
	CodeChargeAlreadyRefunded = "charge_already_refunded"
	// CodeServiceUnavailable is an injected outage (HTTP 503).
	CodeServiceUnavailable = "service_unavailable"
	// CodeInvalidAPIKey is a missing or wrong bearer token (HTTP 401).
	CodeInvalidAPIKey = "invalid_api_key"
)

// Request limits, like Stripe's, so hostile or buggy bodies are refused with
// a 4xx instead of exhausting memory.
const (
	// MaxAmount is the largest chargeable amount in minor units.
	MaxAmount = 99_999_999
	// MaxIdempotencyKeyLen is the longest accepted Idempotency-Key.
	MaxIdempotencyKeyLen = 255
	// MaxMetadataKeys is the most metadata entries on one object.
	MaxMetadataKeys = 50
	// MaxMetadataKeyLen is the longest metadata key.
	MaxMetadataKeyLen = 40
	// MaxMetadataValueLen is the longest metadata value.
	MaxMetadataValueLen = 500
	// maxBodyBytes is the largest accepted request body.
	maxBodyBytes = 64 << 10
)

// Charge is the provider's record of one attempt to take money, succeeded or
// failed. It is both the API object and the ledger entry.
type Charge struct {
	// ID is "ch_" followed by a random base32 string.
	ID string `json:"id"`
	// Object is always ObjectCharge.
	Object string `json:"object"`
	// Amount is in minor units of Currency.
	Amount int64 `json:"amount"`
	// Currency is the upper-case ISO 4217 code.
	Currency string `json:"currency"`
	// PaymentMethod is the simulated card that was charged.
	PaymentMethod string `json:"payment_method"`
	// Status is StatusSucceeded or StatusFailed.
	Status string `json:"status"`
	// FailureCode is nil on success, else the decline code.
	FailureCode *string `json:"failure_code"`
	// FailureMessage is nil on success, else a human-readable reason.
	FailureMessage *string `json:"failure_message"`
	// AmountRefunded is the sum of the charge's refunds.
	AmountRefunded int64 `json:"amount_refunded"`
	// Metadata is the merchant's data; "reference" is used for lookups.
	Metadata map[string]string `json:"metadata"`
	// IdempotencyKey is the key of the request that created the charge.
	IdempotencyKey string `json:"idempotency_key"`
	// Created is the unix time of creation on the Server's clock.
	Created int64 `json:"created"`
}

// Refund is the provider's record of money returned on a charge.
type Refund struct {
	// ID is "re_" followed by a random base32 string.
	ID string `json:"id"`
	// Object is always ObjectRefund.
	Object string `json:"object"`
	// Charge is the refunded charge's id.
	Charge string `json:"charge"`
	// Amount is in minor units of Currency.
	Amount int64 `json:"amount"`
	// Currency is the charge's currency.
	Currency string `json:"currency"`
	// Status is always StatusSucceeded.
	Status string `json:"status"`
	// Metadata is the merchant's data.
	Metadata map[string]string `json:"metadata"`
	// IdempotencyKey is the key of the request that created the refund.
	IdempotencyKey string `json:"idempotency_key"`
	// Created is the unix time of creation on the Server's clock.
	Created int64 `json:"created"`
}

// Ledger is every charge and refund ever created, oldest first: the ground
// truth tests use to prove a payment was taken exactly once.
type Ledger struct {
	// Charges holds succeeded and failed charges.
	Charges []Charge `json:"charges"`
	// Refunds holds every refund.
	Refunds []Refund `json:"refunds"`
}

// apiError is the body of every error response, wrapped as {"error": ...}.
type apiError struct {
	Type    string `json:"type"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// Param names the offending request field, when there is one.
	Param string `json:"param,omitempty"`
	// DeclineCode repeats the decline reason on card errors.
	DeclineCode string `json:"decline_code,omitempty"`
	// Charge is the id of the failed charge on card errors.
	Charge string `json:"charge,omitempty"`

	status int
}

// errorBody is the JSON envelope of an error response.
type errorBody struct {
	Error *apiError `json:"error"`
}

// chargeRequest is the body of POST /v1/charges; decoding and re-encoding it
// canonicalises the request for the idempotency fingerprint.
type chargeRequest struct {
	Amount        int64             `json:"amount"`
	Currency      string            `json:"currency"`
	PaymentMethod string            `json:"payment_method"`
	Metadata      map[string]string `json:"metadata"`
}

// refundRequest is the body of POST /v1/refunds. Amount is optional: absent
// means "everything still refundable".
type refundRequest struct {
	Charge   string            `json:"charge"`
	Amount   *int64            `json:"amount"`
	Metadata map[string]string `json:"metadata"`
}

// event is the JSON body of a webhook.
type event struct {
	ID      string    `json:"id"`
	Type    string    `json:"type"`
	Created int64     `json:"created"`
	Data    eventData `json:"data"`
}

// eventData carries the charge, and for charge.refunded the refund too.
type eventData struct {
	Object Charge  `json:"object"`
	Refund *Refund `json:"refund,omitempty"`
}

// Webhook event types.
const (
	// EventChargeSucceeded is sent when a charge succeeds.
	EventChargeSucceeded = "charge.succeeded"
	// EventChargeFailed is sent when a charge is declined.
	EventChargeFailed = "charge.failed"
	// EventChargeRefunded is sent for every refund; data.object is the charge
	// with its updated amount_refunded and data.refund is the refund.
	EventChargeRefunded = "charge.refunded"
)

// newID returns prefix followed by 26 lower-case base32 characters (130 bits)
// from crypto/rand, so ids are unguessable and never collide in practice.
func newID(prefix string) string {
	return prefix + strings.ToLower(rand.Text())
}

// clone returns a copy of c that shares no mutable state with it.
func (c *Charge) clone() Charge {
	out := *c
	out.Metadata = cloneMetadata(c.Metadata)
	return out
}

// clone returns a copy of r that shares no mutable state with it.
func (r *Refund) clone() Refund {
	out := *r
	out.Metadata = cloneMetadata(r.Metadata)
	return out
}

// cloneMetadata copies m, turning nil into an empty map so JSON shows {}.
func cloneMetadata(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return maps.Clone(m)
}

// mustJSON encodes v. It is only used with this package's own types, which
// always encode, so an error is a programming mistake.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("pspsim: encode %T: %v", v, err))
	}
	return b
}

// validateMetadata enforces Stripe-like metadata limits.
func validateMetadata(m map[string]string) *apiError {
	if len(m) > MaxMetadataKeys {
		return invalidRequest(CodeInvalidMetadata, "metadata", fmt.Sprintf("metadata has more than %d keys", MaxMetadataKeys))
	}
	for k, v := range m {
		if k == "" || len(k) > MaxMetadataKeyLen {
			return invalidRequest(CodeInvalidMetadata, "metadata", fmt.Sprintf("metadata keys must be 1 to %d bytes", MaxMetadataKeyLen))
		}
		if len(v) > MaxMetadataValueLen {
			return invalidRequest(CodeInvalidMetadata, "metadata", fmt.Sprintf("metadata values must be at most %d bytes", MaxMetadataValueLen))
		}
	}
	return nil
}

// validate checks a charge request and normalises its metadata.
func (req *chargeRequest) validate() *apiError {
	switch {
	case req.Amount <= 0:
		return invalidRequest(CodeInvalidAmount, "amount", "amount must be a positive integer in minor units")
	case req.Amount > MaxAmount:
		return invalidRequest(CodeAmountTooLarge, "amount", fmt.Sprintf("amount must be at most %d", MaxAmount))
	case !isCurrency(req.Currency):
		return invalidRequest(CodeInvalidCurrency, "currency", "currency must be an upper-case ISO 4217 code such as EUR")
	case req.PaymentMethod == "":
		return invalidRequest(CodeParameterMissing, "payment_method", "payment_method is required")
	}
	switch req.PaymentMethod {
	case PaymentMethodOK, PaymentMethodDeclined, PaymentMethodInsufficientFunds:
	default:
		return invalidRequest(CodeInvalidPaymentMethod, "payment_method", fmt.Sprintf("no such payment method; use %s, %s or %s",
			PaymentMethodOK, PaymentMethodDeclined, PaymentMethodInsufficientFunds))
	}
	if err := validateMetadata(req.Metadata); err != nil {
		return err
	}
	req.Metadata = cloneMetadata(req.Metadata)
	return nil
}

// validate checks a refund request and normalises its metadata.
func (req *refundRequest) validate() *apiError {
	if req.Charge == "" {
		return invalidRequest(CodeParameterMissing, "charge", "charge is required")
	}
	if req.Amount != nil && *req.Amount <= 0 {
		return invalidRequest(CodeInvalidAmount, "amount", "amount must be a positive integer in minor units")
	}
	if err := validateMetadata(req.Metadata); err != nil {
		return err
	}
	req.Metadata = cloneMetadata(req.Metadata)
	return nil
}

// isCurrency reports whether s looks like an ISO 4217 code in upper case.
func isCurrency(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := range len(s) {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}
