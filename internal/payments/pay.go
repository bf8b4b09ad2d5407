package payments

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/payments/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/wire"
)

// payAttempt is the state of one run of payments.create.
type payAttempt struct {
	// The request's input; a run resumed by the Recoverer has none.
	orderID       uuid.UUID
	paymentMethod string

	// pay is the attempt: recorded by this run's first step (recorded), or
	// loaded from the claim's resource when the run resumes.
	pay      Payment
	loaded   bool
	recorded bool
	// charge is the provider's answer, for the step that records it; nil
	// when the payment was finished meanwhile (by its webhook).
	charge *Charge
}

// paySteps is payments.create as a step table.
func (s *Service) paySteps() operation.Steps[payAttempt] {
	return operation.Steps[payAttempt]{
		idempotency.PointStarted: {Tx: s.recordPayment},
		PointPaymentCreated:      {Call: s.chargeAtProvider, Tx: s.recordCharge},
	}
}

// Pay executes payments.create: charge the order once, whatever happens to
// the requests that ask for it.
func (s *Service) Pay(ctx context.Context, req idempotency.Request, orderID uuid.UUID, paymentMethod string) (idempotency.Response, error) {
	return s.pay.Run(ctx, req, payAttempt{orderID: orderID, paymentMethod: paymentMethod})
}

// recordPayment is phase 1, in the claim's transaction: it records a pending
// payment for the order, or a final refusal (order cancelled, already paid, or
// being paid).
func (s *Service) recordPayment(ctx context.Context, tx pgx.Tx, a *operation.Attempt[payAttempt]) (operation.Outcome, error) {
	req := a.Claim.Request()
	st := storeOf(tx)
	// A payment under this key while no record exists: the record expired
	// and a genuine late retry arrived. The payment decides.
	prev, found, err := st.paymentByKey(ctx, req.TenantID, string(req.Key))
	if err != nil {
		return operation.Outcome{}, err
	}
	if found {
		if err := a.LateRetry("payment", prev.ID.String(), prev.RequestHash); err != nil {
			return operation.Outcome{}, err
		}
		a.Data.pay, a.Data.loaded = prev, true
		return a.Next(ctx, tx, PointPaymentCreated, &idempotency.Resource{Type: "payment", ID: prev.ID})
	}

	order, err := s.orders.LockForPayment(ctx, tx, req.TenantID, a.Data.orderID)
	if errors.Is(err, orders.ErrNotFound) {
		return operation.Outcome{}, problem.New(problem.NotFound, "No such order.")
	}
	if err != nil {
		return operation.Outcome{}, err
	}
	// The order row is locked: concurrent payments of this order (under other
	// keys) queue here, so this check is not check-then-act. The partial
	// unique index payments_one_live_per_order backs it up.
	live, err := st.hasLivePayment(ctx, order.TenantID, order.ID)
	if err != nil {
		return operation.Outcome{}, err
	}
	if order.Status == orders.StatusCancelled {
		return a.Refuse(ctx, tx, problem.New(problem.OrderNotPayable,
			"Order %s is cancelled: it can no longer be paid.", order.ID), nil)
	}
	if order.Status != orders.StatusAwaitingPayment || live {
		return a.Refuse(ctx, tx, problem.New(problem.OrderAlreadyPaid,
			"Order %s is already paid or has a payment in progress.", order.ID), nil)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return operation.Outcome{}, err
	}
	pay, err := st.insertPayment(ctx, dbsqlc.PaymentInsertParams{
		ID:             id,
		TenantID:       req.TenantID,
		OrderID:        order.ID,
		IdempotencyKey: string(req.Key),
		RequestHash:    req.Fingerprint[:],
		ProviderKey:    ProviderKey(req.TenantID, req.Operation, req.Key),
		Amount:         order.AmountTotal,
		Currency:       order.Currency,
		PaymentMethod:  a.Data.paymentMethod,
		CreatedAt:      s.nowUTC(),
	})
	if err != nil {
		return operation.Outcome{}, err
	}
	a.Data.pay, a.Data.loaded, a.Data.recorded = pay, true, true
	return a.Next(ctx, tx, PointPaymentCreated, &idempotency.Resource{Type: "payment", ID: pay.ID})
}

// chargeAtProvider is the call between the phases: it asks the provider for
// the charge, unless the payment was finished meanwhile (by its webhook). An
// attempt this run did not record may have charged already, possibly longer
// ago than the provider keeps keys: it looks the charge up by our reference
// first.
func (s *Service) chargeAtProvider(ctx context.Context, a *operation.Attempt[payAttempt]) error {
	if err := s.loadPayAttempt(ctx, a); err != nil {
		return err
	}
	pay := a.Data.pay
	if pay.Status != StatusPending {
		return nil
	}
	if !a.Data.recorded {
		found, err := s.provider.FindCharge(ctx, pay.ID.String())
		if err != nil {
			return s.unknownOutcome(ctx, a.Claim.Request(), err)
		}
		if found != nil {
			s.logger.InfoContext(ctx, "resumed payment found its charge at the provider",
				"payment_id", pay.ID, "charge_id", found.ID, "idempotency_key", pay.IdempotencyKey)
			a.Data.charge = found
			return nil
		}
	}
	c, err := s.provider.CreateCharge(ctx, pay.ProviderKey, pay.Amount, pay.Currency, pay.PaymentMethod, chargeMetadata(pay))
	var rejected *RejectedError
	switch {
	case errors.As(err, &rejected) && rejected.Status == http.StatusBadRequest:
		// The provider refused the request without charging (e.g. an
		// unknown payment method): a definite, final failure.
		code := rejected.Code
		c = Charge{Status: chargeFailed, FailureCode: &code}
	case err != nil:
		return s.unknownOutcome(ctx, a.Claim.Request(), err)
	}
	a.Data.charge = &c
	return nil
}

// loadPayAttempt loads the payment of a resumed run from the claim's
// resource.
func (s *Service) loadPayAttempt(ctx context.Context, a *operation.Attempt[payAttempt]) error {
	if a.Data.loaded {
		return nil
	}
	if a.Claim.Resource == nil {
		return fmt.Errorf("payments.create %q at %s has no payment recorded", a.Claim.Request().Key, a.Claim.RecoveryPoint)
	}
	pay, err := storeOf(s.pool).payment(ctx, a.Claim.Request().TenantID, a.Claim.Resource.ID)
	if err != nil {
		return err
	}
	a.Data.pay, a.Data.loaded = pay, true
	return nil
}

// recordCharge is phase 2: it records the provider's answer on the payment
// (pending becomes succeeded or failed, the order paid, the event appended)
// and stores the answer to the client.
func (s *Service) recordCharge(ctx context.Context, tx pgx.Tx, a *operation.Attempt[payAttempt]) (operation.Outcome, error) {
	if err := s.loadPayAttempt(ctx, a); err != nil {
		return operation.Outcome{}, err
	}
	var (
		final Payment
		err   error
	)
	if c := a.Data.charge; c != nil {
		final, err = s.applyCharge(ctx, tx, a.Data.pay, *c)
	} else {
		final, err = storeOf(tx).payment(ctx, a.Data.pay.TenantID, a.Data.pay.ID) // finished meanwhile, e.g. by its webhook
	}
	if err != nil {
		return operation.Outcome{}, err
	}
	return s.finishPayment(ctx, tx, a, final)
}

// applyCharge records a provider charge on a payment: pending becomes
// succeeded or failed, once. It is shared by phase 2 and the webhook worker;
// whoever moves the payment emits its event, so there is exactly one. A
// payment that is no longer pending is returned as it is.
func (s *Service) applyCharge(ctx context.Context, tx pgx.Tx, pay Payment, c Charge) (Payment, error) {
	st := storeOf(tx)
	now := s.nowUTC()
	var chargeID *string
	if c.ID != "" { // a refused request created no charge
		chargeID = &c.ID
		if err := chargeMismatch(pay, c); err != nil {
			return Payment{}, err
		}
	}
	var (
		moved      Payment
		wasPending bool
		err        error
		event      string
	)
	if c.Status == chargeSucceeded {
		moved, wasPending, err = st.succeedPayment(ctx, pay.TenantID, pay.ID, chargeID, now)
		event = EventPaymentSucceeded
	} else {
		code := "card_declined"
		if c.FailureCode != nil {
			code = *c.FailureCode
		}
		moved, wasPending, err = st.failPayment(ctx, pay.TenantID, pay.ID, chargeID, code, now)
		event = EventPaymentFailed
	}
	if err != nil {
		return Payment{}, err
	}
	if !wasPending {
		return st.payment(ctx, pay.TenantID, pay.ID) // finished by somebody else first
	}
	switch {
	case moved.Status == StatusSucceeded && moved.CancelRequestedAt != nil:
		// Its client cancelled it while the outcome was unknown: the order
		// is not paid, and the charge is refunded in full (cancel.go); the
		// refund's success cancels the order.
		if _, _, err := s.compensate(ctx, tx, moved); err != nil {
			return Payment{}, err
		}
	case moved.Status == StatusSucceeded:
		if _, err := s.orders.Advance(ctx, tx, moved.TenantID, moved.OrderID, orders.StatusPaid); err != nil {
			return Payment{}, err
		}
	}
	if _, err := outbox.Append(ctx, tx, outbox.Event{
		TenantID:       moved.TenantID,
		Type:           event,
		AggregateType:  "payment",
		AggregateID:    moved.ID,
		IdempotencyKey: moved.IdempotencyKey,
		OccurredAt:     now,
		Payload:        paymentJSONFrom(moved),
	}); err != nil {
		return Payment{}, err
	}
	return moved, nil
}

// finishPayment stores the answer for a final payment (paymentAnswer).
func (s *Service) finishPayment(ctx context.Context, tx pgx.Tx, a *operation.Attempt[payAttempt], pay Payment) (operation.Outcome, error) {
	resp, res, err := paymentAnswer(pay)
	if err != nil {
		return operation.Outcome{}, err
	}
	return a.Finish(ctx, tx, resp, res)
}

// paymentAnswer is the answer for a final payment: 201 with the payment,
// 402 card_declined when the provider declined a charge, or 422
// payment_rejected when it refused the request without creating a charge.
func paymentAnswer(pay Payment) (idempotency.Response, *idempotency.Resource, error) {
	res := &idempotency.Resource{Type: "payment", ID: pay.ID}
	if pay.CancelRequestedAt != nil && pay.Status == StatusSucceeded {
		pe := problem.New(problem.PaymentCancelled, "%s It had charged, and is refunded in full.", cancelledPaymentDetail)
		pe.Instance = "/v1/payments/" + pay.ID.String()
		return operation.Refusal(pe), res, nil
	}
	switch pay.Status {
	case StatusFailed:
		pe := problem.New(problem.CardDeclined,
			"The card was declined (%s). Payment %s failed; a new attempt needs a new Idempotency-Key.", deref(pay.FailureCode), pay.ID)
		if pay.ProviderChargeID == nil {
			pe = problem.New(problem.PaymentRejected,
				"The payment provider refused payment %s (%s); check the payment method. A new attempt needs a new Idempotency-Key.", pay.ID, deref(pay.FailureCode))
		}
		pe.Instance = "/v1/payments/" + pay.ID.String()
		return operation.Refusal(pe), res, nil
	case StatusSucceeded:
	default: // cannot happen: the charge was recorded, or the payment was final already
		return idempotency.Response{}, nil, fmt.Errorf("payment %s is still %s after its charge", pay.ID, pay.Status)
	}
	body, err := wire.Encode(paymentJSONFrom(pay))
	if err != nil {
		return idempotency.Response{}, nil, err
	}
	return idempotency.Response{
		Status:      http.StatusCreated,
		ContentType: "application/json",
		Location:    "/v1/payments/" + pay.ID.String(),
		Body:        body,
	}, res, nil
}
