// Package payments charges orders and refunds payments at an external
// provider: the side effect that must never happen twice.
//
// Both operations run in atomic phases with recovery points (the design
// Stripe describes for its own API). Phase 1 claims the idempotency key and
// records the attempt (a pending payment or refund) in one transaction. Then,
// with no transaction open, the provider is called with a key derived from the
// claim, the same for every retry and every recovery (rule 7), and with our
// reference in its metadata. Phase 2 records the outcome, the outbox event and
// the stored response in one transaction. A crash between the phases leaves a
// pending claim with a lease; the client's retry after the lease, or the
// recoverer, resumes it. Because the provider forgets keys after its own
// retention (24 hours) while ours lasts 45 days, a resumed attempt first asks
// the provider for the charge our reference made.
//
// The database holds the invariants: one pending-or-succeeded payment per
// order, refunds that never exceed their payment (payments.refund_reserved).
package payments

import (
	"crypto/sha256"
	"encoding/base64"
	"time"

	"github.com/google/uuid"

	"github.com/oncepay/oncepay/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/idempotency"
)

// Statuses of payments and refunds.
const (
	StatusPending   = "pending"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
)

// RefundCanceled is a provider refund's status when it was cancelled before
// it moved money. Ours never has it: such a refund is failed here.
const RefundCanceled = "canceled"

// Outbox event types.
const (
	EventPaymentSucceeded = "payment.succeeded"
	EventPaymentFailed    = "payment.failed"
	EventRefundSucceeded  = "refund.succeeded"
)

// Recovery points of the phases.
const (
	pointPaymentCreated = "payment_created"
	pointRefundCreated  = "refund_created"
)

// ProviderKey derives the idempotency key sent to the provider from our own
// scope. It is stable across retries and recoveries of one intent and unique
// across tenants and operations, and it reveals nothing of the client's key.
func ProviderKey(tenantID uuid.UUID, op idempotency.Operation, key idempotency.Key) string {
	h := sha256.New()
	h.Write(tenantID[:])
	h.Write([]byte{0})
	h.Write([]byte(op))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return "oncepay_" + base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

type paymentJSON struct {
	ID               uuid.UUID `json:"id"`
	OrderID          uuid.UUID `json:"order_id"`
	Status           string    `json:"status"`
	Amount           int64     `json:"amount"`
	Currency         string    `json:"currency"`
	PaymentMethod    string    `json:"payment_method"`
	ProviderChargeID *string   `json:"provider_charge_id"`
	FailureCode      *string   `json:"failure_code"`
	AmountRefunded   int64     `json:"amount_refunded"`
	CreatedAt        time.Time `json:"created_at"`
}

func paymentJSONFrom(p dbsqlc.Payment) paymentJSON {
	return paymentJSON{
		ID: p.ID, OrderID: p.OrderID, Status: p.Status, Amount: p.Amount, Currency: p.Currency,
		PaymentMethod: p.PaymentMethod, ProviderChargeID: p.ProviderChargeID, FailureCode: p.FailureCode,
		AmountRefunded: p.AmountRefunded, CreatedAt: p.CreatedAt.UTC(),
	}
}

type refundJSON struct {
	ID               uuid.UUID `json:"id"`
	PaymentID        uuid.UUID `json:"payment_id"`
	Status           string    `json:"status"`
	Amount           int64     `json:"amount"`
	ProviderRefundID *string   `json:"provider_refund_id"`
	CreatedAt        time.Time `json:"created_at"`
}

func refundJSONFrom(r dbsqlc.Refund) refundJSON {
	return refundJSON{ID: r.ID, PaymentID: r.PaymentID, Status: r.Status, Amount: r.Amount,
		ProviderRefundID: r.ProviderRefundID, CreatedAt: r.CreatedAt.UTC()}
}
