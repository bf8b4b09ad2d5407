package payments

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

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

// refundAttempt is the state of one run of refunds.create.
type refundAttempt struct {
	// The request's input; a run resumed by the Recoverer has none.
	paymentID uuid.UUID
	amount    int64

	// ref is the attempt: recorded by this run's first step (recorded), or
	// loaded from the claim's resource when the run resumes.
	ref      Refund
	loaded   bool
	recorded bool
	// pay is the refunded payment, when this run's first step locked it
	// (its id and charge never change); nil when the run resumes.
	pay *Payment
	// The provider's answer, for the step that records it: the refund it
	// made (succeeded), or the code of its refusal or failure. Both nil when
	// the refund was finished meanwhile (by its webhook).
	answer   *ProviderRefund
	failCode *string
}

// refundSteps is refunds.create as a step table.
func (s *Service) refundSteps() operation.Steps[refundAttempt] {
	return operation.Steps[refundAttempt]{
		idempotency.PointStarted: {Tx: s.reserveRefund},
		PointRefundCreated:       {Call: s.refundAtProvider, Tx: s.recordRefund},
	}
}

// Refund executes refunds.create: a compensation, idempotent like the charge
// it compensates. Phase 1 reserves the amount on the payment in the same
// statement that checks it (refund_reserved + amount <= amount), so
// concurrent refunds can never exceed the payment together.
func (s *Service) Refund(ctx context.Context, req idempotency.Request, paymentID uuid.UUID, amount int64) (idempotency.Response, error) {
	return s.refund.Run(ctx, req, refundAttempt{paymentID: paymentID, amount: amount})
}

// reserveRefund is phase 1, in the claim's transaction: it reserves the
// amount on the payment and records a pending refund, or a final refusal
// (the payment is not refundable, or the amount exceeds what remains).
func (s *Service) reserveRefund(ctx context.Context, tx pgx.Tx, a *operation.Attempt[refundAttempt]) (operation.Outcome, error) {
	req := a.Claim.Request()
	st := storeOf(tx)
	// A refund under this key while no record exists: a late retry after
	// the record expired.
	prev, found, err := st.refundByKey(ctx, req.TenantID, string(req.Key))
	if err != nil {
		return operation.Outcome{}, err
	}
	if found {
		if err := a.LateRetry("refund", prev.ID.String(), prev.RequestHash); err != nil {
			return operation.Outcome{}, err
		}
		a.Data.ref, a.Data.loaded = prev, true
		return a.Next(ctx, tx, PointRefundCreated, &idempotency.Resource{Type: "refund", ID: prev.ID})
	}
	pay, err := st.lockPayment(ctx, req.TenantID, a.Data.paymentID)
	if errors.Is(err, ErrNotFound) {
		return operation.Outcome{}, problem.New(problem.NotFound, "No such payment.")
	}
	if err != nil {
		return operation.Outcome{}, err
	}
	if pay.Status != StatusSucceeded {
		return a.Refuse(ctx, tx, problem.New(problem.PaymentNotRefundable,
			"Payment %s is %s; only succeeded payments can be refunded.", pay.ID, pay.Status), nil)
	}
	ref, refused, err := s.newRefund(ctx, st, req, pay, a.Data.amount)
	if err != nil {
		return operation.Outcome{}, err
	}
	if refused != nil {
		return a.Refuse(ctx, tx, refused, nil)
	}
	a.Data.ref, a.Data.loaded, a.Data.recorded = ref, true, true
	a.Data.pay = &pay
	return a.Next(ctx, tx, PointRefundCreated, &idempotency.Resource{Type: "refund", ID: ref.ID})
}

// newRefund is refunds.create's phase 1 on pay, a succeeded payment locked
// in st's transaction, for req: it reserves amount on the payment and
// records a pending refund, or returns the refusal when the amount exceeds
// what remains. Shared by a client's refund (reserveRefund) and a cancel's
// compensation (compensate).
func (s *Service) newRefund(ctx context.Context, st store, req idempotency.Request, pay Payment, amount int64) (Refund, *problem.Error, error) {
	reserved, err := st.reserveRefund(ctx, pay.TenantID, pay.ID, amount, s.nowUTC())
	if err != nil {
		return Refund{}, nil, err
	}
	if !reserved {
		return Refund{}, problem.New(problem.RefundExceedsPayment,
			"A refund of %d would exceed what remains of payment %s (%d of %d already refunded or in progress).",
			amount, pay.ID, pay.RefundReserved, pay.Amount), nil
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Refund{}, nil, err
	}
	ref, err := st.insertRefund(ctx, dbsqlc.RefundInsertParams{
		ID:             id,
		TenantID:       req.TenantID,
		PaymentID:      pay.ID,
		IdempotencyKey: string(req.Key),
		RequestHash:    req.Fingerprint[:],
		ProviderKey:    ProviderKey(req.TenantID, req.Operation, req.Key),
		Amount:         amount,
		CreatedAt:      s.nowUTC(),
	})
	return ref, nil, err
}

// refundAtProvider is the call between the phases: it asks the provider for
// the refund, unless the refund was finished meanwhile. An attempt this run
// did not record looks its refund up by our reference first.
func (s *Service) refundAtProvider(ctx context.Context, a *operation.Attempt[refundAttempt]) error {
	if err := s.loadRefundAttempt(ctx, a); err != nil {
		return err
	}
	ref := a.Data.ref
	if ref.Status != StatusPending {
		return nil
	}
	if a.Data.pay == nil {
		pay, err := storeOf(s.pool).payment(ctx, ref.TenantID, ref.PaymentID)
		if err != nil {
			return err
		}
		a.Data.pay = &pay
	}
	pay := *a.Data.pay
	var (
		pr  *ProviderRefund
		err error
	)
	if !a.Data.recorded {
		if pr, err = s.provider.FindRefund(ctx, pay.ID.String(), ref.ID.String()); err != nil {
			return s.unknownOutcome(ctx, a.Claim.Request(), err)
		}
	}
	if pr == nil {
		created, err := s.provider.CreateRefund(ctx, ref.ProviderKey, deref(pay.ProviderChargeID), ref.Amount, refundMetadata(ref))
		var rejected *RejectedError
		switch {
		case errors.As(err, &rejected):
			a.Data.failCode = &rejected.Code
			return nil
		case err != nil:
			return s.unknownOutcome(ctx, a.Claim.Request(), err)
		}
		pr = &created
	}
	switch {
	case pr.Status == refundSucceeded:
		a.Data.answer = pr
	case refundFailed(*pr) != "":
		code := refundFailed(*pr)
		a.Data.failCode = &code
	default:
		// Not settled yet (a provider may answer "pending" and finish
		// later): the outcome is still unknown, and the refund stays
		// pending for the retry, the Recoverer or the webhook.
		return s.unknownOutcome(ctx, a.Claim.Request(), fmt.Errorf("%w: provider refund %s is %q", ErrOutcomeUnknown, pr.ID, pr.Status))
	}
	return nil
}

// loadRefundAttempt loads the refund of a resumed run from the claim's
// resource.
func (s *Service) loadRefundAttempt(ctx context.Context, a *operation.Attempt[refundAttempt]) error {
	if a.Data.loaded {
		return nil
	}
	if a.Claim.Resource == nil {
		return fmt.Errorf("refunds.create %q at %s has no refund recorded", a.Claim.Request().Key, a.Claim.RecoveryPoint)
	}
	ref, err := storeOf(s.pool).refund(ctx, a.Claim.Request().TenantID, a.Claim.Resource.ID)
	if err != nil {
		return err
	}
	a.Data.ref, a.Data.loaded = ref, true
	return nil
}

// recordRefund is phase 2: it records the provider's answer (succeeded: the
// payment's refunded amount grows, the order moves, the event is appended;
// refused or failed: the reservation is given back) and stores the answer.
func (s *Service) recordRefund(ctx context.Context, tx pgx.Tx, a *operation.Attempt[refundAttempt]) (operation.Outcome, error) {
	if err := s.loadRefundAttempt(ctx, a); err != nil {
		return operation.Outcome{}, err
	}
	final, err := storeOf(tx).refund(ctx, a.Data.ref.TenantID, a.Data.ref.ID)
	if err != nil {
		return operation.Outcome{}, err
	}
	switch {
	case a.Data.answer != nil:
		if final, err = s.applyRefund(ctx, tx, final, *a.Data.answer); err != nil {
			return operation.Outcome{}, err
		}
	case a.Data.failCode != nil:
		if final, err = s.failRefund(ctx, tx, final, *a.Data.failCode); err != nil {
			return operation.Outcome{}, err
		}
	}
	return s.finishRefund(ctx, tx, a, final)
}

// applyRefund records a provider refund: pending becomes succeeded once, the
// payment's refunded amount grows, the order moves to (partially_)refunded,
// and refund.succeeded is emitted. Shared with the webhook worker.
func (s *Service) applyRefund(ctx context.Context, tx pgx.Tx, ref Refund, pr ProviderRefund) (Refund, error) {
	st := storeOf(tx)
	pay, err := st.payment(ctx, ref.TenantID, ref.PaymentID)
	if err != nil {
		return Refund{}, fmt.Errorf("payment of refund %s: %w", ref.ID, err)
	}
	if err := refundMismatch(pay, ref, pr); err != nil {
		return Refund{}, err
	}
	now := s.nowUTC()
	moved, wasPending, err := st.succeedRefund(ctx, ref.TenantID, ref.ID, pr.ID, now)
	if err != nil {
		return Refund{}, err
	}
	if !wasPending {
		return st.refund(ctx, ref.TenantID, ref.ID)
	}
	pay, err = st.addRefunded(ctx, moved.TenantID, moved.PaymentID, moved.Amount, now)
	if err != nil {
		return Refund{}, err
	}
	if pay.CancelRequestedAt != nil {
		// The compensation of a payment cancelled by its key: its order was
		// never paid, and is given up, with its order.cancelled event.
		if _, err := s.orders.CancelUnpaid(ctx, tx, pay.TenantID, pay.OrderID, moved.IdempotencyKey, cancelledOrderReason); err != nil {
			return Refund{}, err
		}
	} else if _, err := s.orders.Advance(ctx, tx, pay.TenantID, pay.OrderID, refundedStatus(pay)); err != nil {
		return Refund{}, err
	}
	if _, err := outbox.Append(ctx, tx, refundSucceededEvent(moved, pay, now)); err != nil {
		return Refund{}, err
	}
	return moved, nil
}

// refundedStatus is where a refund moves the order of pay, its payment
// with the refund's amount counted: refunded once nothing is left.
func refundedStatus(pay Payment) orders.Status {
	if pay.AmountRefunded == pay.Amount {
		return orders.StatusRefunded
	}
	return orders.StatusPartiallyRefunded
}

// refundSucceededEvent is the refund.succeeded event of ref, a refund of pay
// (with the refund's amount counted), that moved at now.
func refundSucceededEvent(ref Refund, pay Payment, now time.Time) outbox.Event {
	return outbox.Event{
		TenantID:       ref.TenantID,
		Type:           EventRefundSucceeded,
		AggregateType:  "refund",
		AggregateID:    ref.ID,
		IdempotencyKey: ref.IdempotencyKey,
		OccurredAt:     now,
		Payload: map[string]any{
			"refund": refundJSONFrom(ref), "payment_id": pay.ID, "order_id": pay.OrderID,
			"amount_refunded": pay.AmountRefunded, "payment_amount": pay.Amount,
		},
	}
}

// failRefund records a provider's refusal and gives the reserved amount back.
func (s *Service) failRefund(ctx context.Context, tx pgx.Tx, ref Refund, code string) (Refund, error) {
	st := storeOf(tx)
	now := s.nowUTC()
	moved, wasPending, err := st.failRefund(ctx, ref.TenantID, ref.ID, code, now)
	if err != nil {
		return Refund{}, err
	}
	if !wasPending {
		return st.refund(ctx, ref.TenantID, ref.ID)
	}
	if err := st.releaseRefund(ctx, moved.TenantID, moved.PaymentID, moved.Amount, now); err != nil {
		return Refund{}, err
	}
	return moved, nil
}

// finishRefund stores the answer for a refund after the provider's answer
// was recorded (refundAnswer).
func (s *Service) finishRefund(ctx context.Context, tx pgx.Tx, a *operation.Attempt[refundAttempt], ref Refund) (operation.Outcome, error) {
	resp, res, err := refundAnswer(ref)
	if err != nil {
		return operation.Outcome{}, err
	}
	return a.Finish(ctx, tx, resp, res)
}

// refundAnswer is the answer for a refund after the provider's answer was
// recorded: 201 with the refund, or the provider's refusal.
func refundAnswer(ref Refund) (idempotency.Response, *idempotency.Resource, error) {
	res := &idempotency.Resource{Type: "refund", ID: ref.ID}
	if ref.Status == StatusFailed {
		// The provider refused: for more than the charge still holds, that is
		// refund_exceeds_payment; anything else means the charge cannot be
		// refunded at all.
		code := problem.PaymentNotRefundable
		if deref(ref.FailureCode) == "amount_too_large" {
			code = problem.RefundExceedsPayment
		}
		return operation.Refusal(problem.New(code,
			"The provider refused refund %s (%s).", ref.ID, deref(ref.FailureCode))), res, nil
	}
	body, err := wire.Encode(refundJSONFrom(ref))
	if err != nil {
		return idempotency.Response{}, nil, err
	}
	return idempotency.Response{
		Status:      http.StatusCreated,
		ContentType: "application/json",
		Location:    "/v1/refunds/" + ref.ID.String(),
		Body:        body,
	}, res, nil
}
