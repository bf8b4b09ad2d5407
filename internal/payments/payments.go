// Package payments charges orders and refunds payments at an external
// provider: the side effect that must never happen twice.
//
// Both operations are operation.Phases: atomic phases with recovery points
// (the design Stripe describes for its own API), each a row of a step table
// (pay.go, refunds.go):
//
//	payments.create                     refunds.create
//	started:          lock the order,   started:        lock the payment,
//	                  record a pending                  reserve the amount,
//	                  payment                           record a pending refund
//	payment_created:  charge at the     refund_created: refund at the
//	                  provider, then                    provider, then record
//	                  record the                        its outcome
//	                  outcome
//
// The provider is called with no transaction open, with a key derived from
// the claim that is the same for every retry and every recovery (the
// operation's identity, passed downstream),
// and with our reference in its metadata. Recording the outcome writes the
// payment's or refund's final status, the order's new status, the outbox
// event and the stored response in one transaction. A crash between the
// phases leaves a pending claim at its recovery point with a lease; the
// client's retry after the lease, or the Recoverer, resumes it from there.
// Because the provider forgets keys after its own retention (24 hours) while
// ours lasts 45 days, an attempt this run did not record first asks the
// provider for what our reference already did.
//
// The database holds the invariants: one pending-or-succeeded payment per
// order, refunds that never exceed their payment (payments.refund_reserved).
// No other package touches the payments and refunds tables: their queries
// are in internal/payments/internal/dbsqlc.
package payments

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/retention"
)

// The operations of the package.
const (
	// OpPay is POST /v1/orders/{id}/payments.
	OpPay idempotency.Operation = "payments.create"
	// OpRefund is POST /v1/payments/{id}/refunds.
	OpRefund idempotency.Operation = "refunds.create"
)

// MoneyRetention is how long records of money operations are kept: past
// settlement and disputes, which refer back to a payment for 45 days.
const MoneyRetention = 45 * retention.Day

// Specs declares the package's operations for the service's registry. Both
// call the provider, so the Recoverer resumes their abandoned attempts.
func Specs() []operation.Spec {
	money := []retention.Horizon{retention.HorizonClientRetry, retention.HorizonSettlement}
	return []operation.Spec{
		{Name: OpPay, Retention: MoneyRetention, Covers: money, Resumable: true},
		{Name: OpRefund, Retention: MoneyRetention, Covers: money, Resumable: true},
		// A cancel is one local step (cancel.go): nothing to resume.
		{Name: OpCancel, Retention: MoneyRetention, Covers: money},
	}
}

// The recovery points between the phases.
const (
	// PointPaymentCreated: a pending payment is recorded; next, the charge.
	PointPaymentCreated idempotency.RecoveryPoint = "payment_created"
	// PointRefundCreated: a pending refund is recorded and its amount
	// reserved on the payment; next, the provider's refund.
	PointRefundCreated idempotency.RecoveryPoint = "refund_created"
)

// Status is the status of a payment or a refund. Pending becomes succeeded
// or failed once, and never changes again.
type Status string

// Statuses of payments and refunds.
const (
	StatusPending   Status = "pending"
	StatusSucceeded Status = "succeeded"
	StatusFailed    Status = "failed"
)

// Statuses returns every status (the CHECKs of payments.status and
// refunds.status, and the OpenAPI enums, list the same; tests keep them
// equal).
func Statuses() []Status { return []Status{StatusPending, StatusSucceeded, StatusFailed} }

// RefundCanceled is a provider refund's status when it was cancelled before
// it moved money. Ours never has it: such a refund is failed here.
const RefundCanceled = "canceled"

// Outbox event types.
const (
	EventPaymentSucceeded = "payment.succeeded"
	EventPaymentFailed    = "payment.failed"
	EventRefundSucceeded  = "refund.succeeded"
)

// ErrNotFound is returned for a payment or refund the tenant does not have.
var ErrNotFound = errors.New("no such payment or refund")

// ProviderKey derives the idempotency key sent to the provider from our own
// scope. It is stable across retries and recoveries of one intent and unique
// across tenants and operations, and it does not carry the client's key: it
// is a SHA-256 over the tenant, the operation and the key, which the
// provider cannot read back (it could only confirm a guess of a guessable
// key, as with any hash). Nothing else we send carries the client's key
// either (chargeMetadata, refundMetadata); a provider object leads back to
// the intent through metadata.reference, our payment or refund id, whose row
// holds the client's key.
func ProviderKey(tenantID uuid.UUID, op idempotency.Operation, key idempotency.Key) string {
	h := sha256.New()
	h.Write(tenantID[:])
	h.Write([]byte{0})
	h.Write([]byte(op))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return "oncepay_" + base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// chargeMetadata is the metadata of a charge: our references and nothing a
// client chose. The provider is another party, with its own logs, dashboards
// and retention: the client's Idempotency-Key (any visible text the client
// picked) stays with us, and the provider key already names the intent
// (docs/SECURITY.md, "What the provider learns").
func chargeMetadata(p Payment) map[string]string {
	return map[string]string{
		"reference": p.ID.String(),
		"order_id":  p.OrderID.String(),
		"tenant_id": p.TenantID.String(),
	}
}

// refundMetadata is the metadata of a refund: our references, as for a
// charge (chargeMetadata).
func refundMetadata(r Refund) map[string]string {
	return map[string]string{
		"reference":  r.ID.String(),
		"payment_id": r.PaymentID.String(),
		"tenant_id":  r.TenantID.String(),
	}
}

// Payment is one attempt to charge an order.
type Payment struct {
	ID               uuid.UUID
	TenantID         uuid.UUID
	OrderID          uuid.UUID
	IdempotencyKey   string
	RequestHash      []byte
	ProviderKey      string
	Status           Status
	Amount           int64
	Currency         string
	PaymentMethod    string
	ProviderChargeID *string
	FailureCode      *string
	// RefundReserved is what succeeded and pending refunds hold of Amount.
	RefundReserved int64
	// AmountRefunded is what succeeded refunds gave back.
	AmountRefunded int64
	// CancelRequestedAt is when a cancel by key asked, while the outcome
	// was unknown, that the payment not happen (cancel.go); nil for none.
	CancelRequestedAt *time.Time
	CreatedAt         time.Time
	UpdatedAt         time.Time
}

// Refund is one refund of a payment.
type Refund struct {
	ID               uuid.UUID
	TenantID         uuid.UUID
	PaymentID        uuid.UUID
	IdempotencyKey   string
	RequestHash      []byte
	ProviderKey      string
	Status           Status
	Amount           int64
	ProviderRefundID *string
	FailureCode      *string
	CreatedAt        time.Time
}

func paymentFromRow(r dbsqlc.Payment) Payment {
	return Payment{
		ID: r.ID, TenantID: r.TenantID, OrderID: r.OrderID, IdempotencyKey: r.IdempotencyKey, RequestHash: r.RequestHash,
		ProviderKey: r.ProviderKey, Status: Status(r.Status), Amount: r.Amount, Currency: r.Currency,
		PaymentMethod: r.PaymentMethod, ProviderChargeID: r.ProviderChargeID, FailureCode: r.FailureCode,
		RefundReserved: r.RefundReserved, AmountRefunded: r.AmountRefunded, CancelRequestedAt: r.CancelRequestedAt,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
}

func refundFromRow(r dbsqlc.Refund) Refund {
	return Refund{
		ID: r.ID, TenantID: r.TenantID, PaymentID: r.PaymentID, IdempotencyKey: r.IdempotencyKey, RequestHash: r.RequestHash,
		ProviderKey: r.ProviderKey, Status: Status(r.Status), Amount: r.Amount, ProviderRefundID: r.ProviderRefundID,
		FailureCode: r.FailureCode, CreatedAt: r.CreatedAt,
	}
}

type paymentJSON struct {
	ID               uuid.UUID `json:"id"`
	OrderID          uuid.UUID `json:"order_id"`
	Status           Status    `json:"status"`
	Amount           int64     `json:"amount"`
	Currency         string    `json:"currency"`
	PaymentMethod    string    `json:"payment_method"`
	ProviderChargeID *string   `json:"provider_charge_id"`
	FailureCode      *string   `json:"failure_code"`
	AmountRefunded   int64     `json:"amount_refunded"`
	CreatedAt        time.Time `json:"created_at"`
}

func paymentJSONFrom(p Payment) paymentJSON {
	return paymentJSON{
		ID: p.ID, OrderID: p.OrderID, Status: p.Status, Amount: p.Amount, Currency: p.Currency,
		PaymentMethod: p.PaymentMethod, ProviderChargeID: p.ProviderChargeID, FailureCode: p.FailureCode,
		AmountRefunded: p.AmountRefunded, CreatedAt: p.CreatedAt.UTC(),
	}
}

type refundJSON struct {
	ID               uuid.UUID `json:"id"`
	PaymentID        uuid.UUID `json:"payment_id"`
	Status           Status    `json:"status"`
	Amount           int64     `json:"amount"`
	ProviderRefundID *string   `json:"provider_refund_id"`
	CreatedAt        time.Time `json:"created_at"`
}

func refundJSONFrom(r Refund) refundJSON {
	return refundJSON{ID: r.ID, PaymentID: r.PaymentID, Status: r.Status, Amount: r.Amount,
		ProviderRefundID: r.ProviderRefundID, CreatedAt: r.CreatedAt.UTC()}
}
