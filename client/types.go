package client

import (
	"encoding/json"
	"time"
)

// The types below mirror the API's JSON member for member. Nullable strings
// are plain strings (empty for null) because a caller never has to tell an
// empty identifier from a missing one; a nullable time stays a pointer,
// because "not yet" is its meaning.

// Product is one entry of the tenant's catalog (GET /v1/products).
type Product struct {
	SKU  string `json:"sku"`
	Name string `json:"name"`
	// UnitAmount is the price of one unit in minor units of Currency.
	UnitAmount int64  `json:"unit_amount"`
	Currency   string `json:"currency"`
	// Stock is what is left to sell; fulfilled orders decrement it.
	Stock int64 `json:"stock"`
}

// Order statuses. An order only moves forward through them; a cancelled
// order is final.
const (
	OrderAwaitingPayment   = "awaiting_payment"
	OrderPaid              = "paid"
	OrderFulfilled         = "fulfilled"
	OrderPartiallyRefunded = "partially_refunded"
	OrderRefunded          = "refunded"
	OrderCancelled         = "cancelled"
)

// Order is an order as the API returns it.
type Order struct {
	ID string `json:"id"`
	// Status is one of the Order* constants.
	Status   string `json:"status"`
	Currency string `json:"currency"`
	// AmountTotal is the sum of the items' amounts, in minor units.
	AmountTotal int64       `json:"amount_total"`
	Items       []OrderItem `json:"items"`
	CreatedAt   time.Time   `json:"created_at"`
}

// OrderItem is one line of an order, priced when the order was created.
type OrderItem struct {
	SKU        string `json:"sku"`
	Name       string `json:"name"`
	Quantity   int    `json:"quantity"`
	UnitAmount int64  `json:"unit_amount"`
	// Amount is Quantity times UnitAmount.
	Amount int64 `json:"amount"`
}

// CreateOrderRequest is the body of POST /v1/orders. The server refuses
// unknown members, so it has exactly the members the API defines.
type CreateOrderRequest struct {
	// Currency is an ISO 4217 code the service supports, such as "EUR".
	Currency string     `json:"currency"`
	Items    []LineItem `json:"items"`
}

// LineItem asks for Quantity units of the product SKU; a SKU appears at most
// once per order.
type LineItem struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

// ListOptions selects one page of a list, newest first.
type ListOptions struct {
	// Limit is the page size, 1 to 100; zero leaves the server's default (20).
	Limit int
	// Cursor is a NextCursor of an earlier page; empty starts at the newest.
	Cursor string
}

// OrderList is one page of orders, newest first.
type OrderList struct {
	Data []Order `json:"data"`
	// NextCursor continues the list with ListOptions.Cursor; empty on the
	// last page.
	NextCursor string `json:"next_cursor"`
}

// KeyStatus is what the service knows of one idempotency key (LookupKey).
type KeyStatus struct {
	Operation string `json:"operation"`
	Key       string `json:"key"`
	// State is KeyUnknown, KeyInProgress, KeyCompleted,
	// KeyAwaitingOperator or KeyCancelled.
	State string `json:"state"`
	// RetryAfter is, for KeyInProgress, how many seconds to wait before
	// retrying the request (the Retry-After header's).
	RetryAfter int `json:"retry_after"`
	// Response is, for KeyCompleted and KeyCancelled, the stored answer's
	// status and link; a retry of the request replays the whole answer.
	Response *StoredResponse `json:"response"`
	// ExpiresAt is until when the key's record is kept; zero for an
	// unknown key.
	ExpiresAt time.Time `json:"expires_at"`
}

// StoredResponse is the status and the resource link of a key's stored
// answer.
type StoredResponse struct {
	Status   int    `json:"status"`
	Location string `json:"location"`
}

// The states of a key (KeyStatus.State).
const (
	KeyUnknown          = "unknown"
	KeyInProgress       = "in_progress"
	KeyCompleted        = "completed"
	KeyAwaitingOperator = "awaiting_operator"
	// KeyCancelled: a cancel by key stopped the request before it ran;
	// every request under the key is answered 409 payment_cancelled.
	KeyCancelled = "cancelled"
)

// Cancellation is what a cancel by key did (CancelPaymentByKey).
type Cancellation struct {
	OrderID        string `json:"order_id"`
	IdempotencyKey string `json:"idempotency_key"`
	// Outcome is CancelPrevented, CancelRequested, CancelRefundStarted or
	// CancelNothingToCancel.
	Outcome string `json:"outcome"`
	// PaymentID is the payment under the key, when one was made.
	PaymentID string `json:"payment_id,omitempty"`
	// RefundID is, for CancelRefundStarted, the refund that undoes it.
	RefundID string `json:"refund_id,omitempty"`
}

// The outcomes of a cancel by key (Cancellation.Outcome).
const (
	CancelPrevented       = "prevented"
	CancelRequested       = "cancel_requested"
	CancelRefundStarted   = "refund_started"
	CancelNothingToCancel = "nothing_to_cancel"
)

// Payment and refund statuses.
const (
	StatusPending   = "pending"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
)

// Payment methods the demo's payment provider simulator understands.
const (
	PaymentMethodOK                = "pm_card_ok"
	PaymentMethodDeclined          = "pm_card_declined"
	PaymentMethodInsufficientFunds = "pm_card_insufficient_funds"
)

// Payment is one charge attempt of an order.
type Payment struct {
	ID      string `json:"id"`
	OrderID string `json:"order_id"`
	// Status is StatusPending while the provider's answer is unknown, then
	// StatusSucceeded or StatusFailed.
	Status string `json:"status"`
	// Amount is the order's total, in minor units of Currency.
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	PaymentMethod string `json:"payment_method"`
	// ProviderChargeID is the provider's charge; empty until it is known.
	ProviderChargeID string `json:"provider_charge_id"`
	// FailureCode says why a failed payment failed, e.g. "card_declined".
	FailureCode string `json:"failure_code"`
	// AmountRefunded is the sum of the payment's succeeded refunds.
	AmountRefunded int64     `json:"amount_refunded"`
	CreatedAt      time.Time `json:"created_at"`
}

// Refund gives back part or all of a payment.
type Refund struct {
	ID        string `json:"id"`
	PaymentID string `json:"payment_id"`
	Status    string `json:"status"`
	// Amount is in minor units of the payment's currency.
	Amount int64 `json:"amount"`
	// ProviderRefundID is the provider's refund; empty until it is known.
	ProviderRefundID string    `json:"provider_refund_id"`
	CreatedAt        time.Time `json:"created_at"`
}

// Event is one entry of the tenant's transactional outbox (GET /v1/events):
// what the service announced, and whether it was published to the broker.
type Event struct {
	// ID is also the broker's message id, so consumers can deduplicate.
	ID string `json:"id"`
	// Type is e.g. "order.created", "payment.succeeded", "refund.succeeded".
	Type          string `json:"type"`
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
	// IdempotencyKey is the key of the request that caused the event: the
	// operation's identity travels with its effects.
	IdempotencyKey string    `json:"idempotency_key"`
	OccurredAt     time.Time `json:"occurred_at"`
	// PublishedAt is nil until the dispatcher has published the event.
	PublishedAt *time.Time `json:"published_at"`
	// Attempts counts the dispatcher's publish attempts.
	Attempts int `json:"attempts"`
	// LastError is the last publish failure; empty if there was none.
	LastError string `json:"last_error"`
	// Payload is the event's body, e.g. the order or payment as it was then.
	Payload json.RawMessage `json:"payload"`
}

// EventList is one page of events, newest first.
type EventList struct {
	Data []Event `json:"data"`
	// NextCursor continues the list with ListOptions.Cursor; empty on the
	// last page.
	NextCursor string `json:"next_cursor"`
}

// Meta describes how the service answered one idempotent call (a POST). It
// is returned with the result, and also with an error, so a caller whose call
// ended without a definite answer still holds the key to resume it with.
type Meta struct {
	// IdempotencyKey is the key sent on every attempt of the call.
	IdempotencyKey string
	// Replayed is true when the answer was stored by an earlier request with
	// this key and sent again (Idempotent-Replayed: true). The effect happened
	// once, earlier.
	Replayed bool
	// Expires is when the server may forget the key's record
	// (Idempotency-Expires); zero when the answer carried none. Until then a
	// retry is answered from the record.
	Expires time.Time
	// Status is the HTTP status of the last answer. A POST answers 201 for a
	// new resource and 200 when a key's record had expired and the request
	// found the resource that key created long ago.
	Status int
	// Location is the created resource's path, when the API sends one.
	Location string
	// RequestID names the last HTTP attempt (X-Request-Id) for tracing; unlike
	// the key it differs on every attempt.
	RequestID string
	// Attempts is how many HTTP attempts the call made.
	Attempts int
}
