package payments

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/attention"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/tracing"
)

// ErrUnknownReference is returned for a provider event that names no
// payment or refund of ours.
var ErrUnknownReference = errors.New("provider event names no payment or refund of ours")

// ErrMismatch is returned for a provider event that names a payment or
// refund of ours but disagrees with it about the money: another amount or
// currency, money moved (a succeeded charge or refund) where we recorded a
// failure, or a second succeeded charge for a paid payment. Such an event is
// never applied; it is for an operator to look at (the webhook worker sets
// the receipt aside). The same check guards phase 2 and the recoverer: a
// provider whose own record is about other money never gets the payment
// marked paid. ErrMismatch is an operation.NeedsOperatorError, so a step
// that meets it holds its attempt for an operator (409 awaiting_operator,
// an attention item of reason mismatch) instead of leaving it to retries
// that would find the same record again.
var ErrMismatch = operation.NeedsOperator(attention.ReasonMismatch, errors.New("provider's record disagrees with ours"))

// MismatchError is what ApplyChargeEvent and ApplyRefundEvent return for an
// event about other money (it wraps ErrMismatch): it names the payment or
// refund the event is about, so the webhook worker can set the event aside
// with an attention item about it.
type MismatchError struct {
	TenantID uuid.UUID
	// ResourceType is "payment" or "refund"; ResourceID its id.
	ResourceType string
	ResourceID   uuid.UUID
	Err          error
}

func (e *MismatchError) Error() string { return e.Err.Error() }
func (e *MismatchError) Unwrap() error { return e.Err }

// mismatchAbout wraps err, when it is a mismatch, as a MismatchError about
// the payment or refund id of tenantID.
func mismatchAbout(err error, tenantID uuid.UUID, kind string, id uuid.UUID) error {
	if err == nil || !errors.Is(err, ErrMismatch) {
		return err
	}
	return &MismatchError{TenantID: tenantID, ResourceType: kind, ResourceID: id, Err: err}
}

// chargeMismatch reports ErrMismatch when c, a charge the provider made, is
// about other money than pay. Every path that records a charge asks it
// (phase 2, the recoverer, the webhook worker): a charge for another amount
// or currency never finishes a payment, whoever reports it.
func chargeMismatch(pay Payment, c Charge) error {
	if c.Amount != pay.Amount || c.Currency != pay.Currency {
		return fmt.Errorf("charge %s is %d %s, payment %s is %d %s: %w",
			c.ID, c.Amount, c.Currency, pay.ID, pay.Amount, pay.Currency, ErrMismatch)
	}
	return nil
}

// refundMismatch is chargeMismatch for refunds: r must be for ref's amount
// and refund the charge of pay, ref's payment.
func refundMismatch(pay Payment, ref Refund, r ProviderRefund) error {
	if r.Amount != ref.Amount {
		return fmt.Errorf("provider refund %s is %d, refund %s is %d: %w", r.ID, r.Amount, ref.ID, ref.Amount, ErrMismatch)
	}
	if pay.ProviderChargeID == nil || r.Charge != *pay.ProviderChargeID {
		return fmt.Errorf("provider refund %s refunds charge %q, payment %s has charge %q: %w", r.ID, r.Charge, pay.ID, deref(pay.ProviderChargeID), ErrMismatch)
	}
	return nil
}

// ApplyChargeEvent applies a provider charge event (charge.succeeded or
// charge.failed, from a webhook) in the caller's transaction. It finds the
// payment by the reference we put in the charge's metadata. States only move
// forward: a pending payment is finished (a payment left pending by an
// unknown outcome is completed by its webhook); a finished one is left as it
// is, so a late or repeated event changes nothing. An event whose charge has
// another amount or currency than the payment, or a succeeded charge for a
// payment we recorded as failed, is refused with ErrMismatch.
// applied reports whether the event finished the payment (and appended its
// outbox event).
func (s *Service) ApplyChargeEvent(ctx context.Context, tx pgx.Tx, c Charge) (applied bool, err error) {
	pay, err := s.chargeEventPayment(ctx, tx, c)
	if err != nil {
		return false, err
	}
	if err := chargeEventMismatch(pay, c); err != nil {
		return false, mismatchAbout(err, pay.TenantID, "payment", pay.ID)
	}
	if pay.Status != StatusPending {
		return false, nil
	}
	if err := s.linkRequest(ctx, tx, pay.TenantID, OpPay, pay.IdempotencyKey); err != nil {
		return false, err
	}
	if _, err := s.applyCharge(ctx, tx, pay, c); err != nil {
		return false, err
	}
	return true, nil
}

// reference reads the tenant and the id of our payment or refund from the
// metadata we gave the provider (chargeMetadata, refundMetadata). Both are
// needed: every statement names the tenant (on Citus, its shard).
func reference(meta map[string]string) (tenant, id uuid.UUID, ok bool) {
	tenant, err := uuid.Parse(meta["tenant_id"])
	if err != nil {
		return uuid.Nil, uuid.Nil, false
	}
	id, err = uuid.Parse(meta["reference"])
	if err != nil {
		return uuid.Nil, uuid.Nil, false
	}
	return tenant, id, true
}

// chargeEventPayment finds the payment a charge event names.
func (s *Service) chargeEventPayment(ctx context.Context, tx pgx.Tx, c Charge) (Payment, error) {
	tenant, id, ok := reference(c.Metadata)
	if !ok {
		return Payment{}, fmt.Errorf("charge %s: %w", c.ID, ErrUnknownReference)
	}
	pay, err := storeOf(tx).payment(ctx, tenant, id)
	if errors.Is(err, ErrNotFound) {
		return Payment{}, fmt.Errorf("charge %s: %w", c.ID, ErrUnknownReference)
	}
	return pay, err
}

// chargeEventMismatch reports ErrMismatch for a charge event about other
// money than pay: another amount or currency, money moved where we recorded
// a failure, or a second charge of a paid payment.
func chargeEventMismatch(pay Payment, c Charge) error {
	if err := chargeMismatch(pay, c); err != nil {
		return err
	}
	if pay.Status == StatusFailed && c.Status == chargeSucceeded {
		return fmt.Errorf("charge %s succeeded, payment %s is failed: %w", c.ID, pay.ID, ErrMismatch)
	}
	if pay.Status == StatusSucceeded && c.Status == chargeSucceeded && pay.ProviderChargeID != nil && *pay.ProviderChargeID != c.ID {
		// Our reference charged twice at the provider: money to give back.
		return fmt.Errorf("charge %s succeeded, payment %s succeeded with charge %s: %w", c.ID, pay.ID, *pay.ProviderChargeID, ErrMismatch)
	}
	return nil
}

// linkRequest links the span of ctx (the webhook worker's, when it traces)
// to the trace of the request that started the payment or refund a provider
// event finishes: the request answered 503 long ago, and this is where its
// intent ends.
func (s *Service) linkRequest(ctx context.Context, tx pgx.Tx, tenant uuid.UUID, op idempotency.Operation, key string) error {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return nil
	}
	tc, err := s.store.TraceContext(ctx, tx, tenant, op, idempotency.Key(key))
	if err != nil {
		return err
	}
	if l, ok := tracing.Link(tc); ok {
		span.AddLink(l)
	}
	return nil
}

// ApplyRefundEvent applies a provider refund (charge.refunded) in the
// caller's transaction, found by the reference in the refund's metadata.
// Forward only, like ApplyChargeEvent. The provider refund's status decides:
// succeeded finishes a pending refund, failed or canceled fails it (its
// reserved amount goes back), and any other status (pending) waits for a
// later event or the recoverer. applied reports whether the event finished
// the refund (succeeded, with its outbox event, or failed).
func (s *Service) ApplyRefundEvent(ctx context.Context, tx pgx.Tx, r ProviderRefund) (applied bool, err error) {
	tenant, id, ok := reference(r.Metadata)
	if !ok {
		return false, fmt.Errorf("refund %s: %w", r.ID, ErrUnknownReference)
	}
	ref, err := storeOf(tx).refund(ctx, tenant, id)
	if errors.Is(err, ErrNotFound) {
		return false, fmt.Errorf("refund %s: %w", r.ID, ErrUnknownReference)
	}
	if err != nil {
		return false, err
	}
	pay, err := storeOf(tx).payment(ctx, ref.TenantID, ref.PaymentID)
	if err != nil {
		return false, fmt.Errorf("payment of refund %s: %w", ref.ID, err)
	}
	if err := refundMismatch(pay, ref, r); err != nil {
		return false, mismatchAbout(err, ref.TenantID, "refund", ref.ID)
	}
	if ref.Status == StatusFailed && r.Status == refundSucceeded {
		return false, mismatchAbout(fmt.Errorf("provider refund %s succeeded, refund %s is failed: %w", r.ID, ref.ID, ErrMismatch),
			ref.TenantID, "refund", ref.ID)
	}
	if ref.Status != StatusPending {
		return false, nil
	}
	if err := s.linkRequest(ctx, tx, ref.TenantID, OpRefund, ref.IdempotencyKey); err != nil {
		return false, err
	}
	if r.Status == refundSucceeded {
		if _, err := s.applyRefund(ctx, tx, ref, r); err != nil {
			return false, err
		}
		return true, nil
	}
	if code := refundFailed(r); code != "" {
		// Nothing was refunded: the reservation goes back (no event).
		if _, err := s.failRefund(ctx, tx, ref, code); err != nil {
			return false, err
		}
		return true, nil
	}
	return false, nil // not settled yet: a later event or the recoverer finishes it
}

// refundFailed returns the failure code to record for a provider refund
// that moved no money and never will (failed or canceled), or "" for one
// that succeeded or is not settled yet.
func refundFailed(r ProviderRefund) string {
	if r.Status == refundFailedStatus || r.Status == RefundCanceled {
		return "refund_" + r.Status
	}
	return ""
}
