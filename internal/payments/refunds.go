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
	q := dbsqlc.New(tx)
	// A refund under this key while no record exists: a late retry (drill 8).
	if prev, err := q.RefundGetByIdempotencyKey(ctx, dbsqlc.RefundGetByIdempotencyKeyParams{TenantID: req.TenantID, IdempotencyKey: string(req.Key)}); err == nil {
		if err := a.LateRetry("refund", prev.ID.String(), prev.RequestHash); err != nil {
			return operation.Outcome{}, err
		}
		a.Data.ref, a.Data.loaded = refundFromRow(prev), true
		return a.Next(ctx, tx, PointRefundCreated, &idempotency.Resource{Type: "refund", ID: prev.ID})
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return operation.Outcome{}, fmt.Errorf("load refund by key: %w", err)
	}
	pay, err := q.PaymentGetForUpdate(ctx, dbsqlc.PaymentGetForUpdateParams{TenantID: req.TenantID, ID: a.Data.paymentID})
	if errors.Is(err, pgx.ErrNoRows) {
		return operation.Outcome{}, problem.New(problem.NotFound, "No such payment.")
	}
	if err != nil {
		return operation.Outcome{}, fmt.Errorf("lock payment: %w", err)
	}
	if Status(pay.Status) != StatusSucceeded {
		return a.Refuse(ctx, tx, problem.New(problem.PaymentNotRefundable,
			"Payment %s is %s; only succeeded payments can be refunded.", pay.ID, pay.Status), nil)
	}
	if _, err := q.PaymentReserveRefund(ctx, dbsqlc.PaymentReserveRefundParams{Amount: a.Data.amount, Now: s.nowUTC(), ID: pay.ID}); errors.Is(err, pgx.ErrNoRows) {
		return a.Refuse(ctx, tx, problem.New(problem.RefundExceedsPayment,
			"A refund of %d would exceed what remains of payment %s (%d of %d already refunded or in progress).",
			a.Data.amount, pay.ID, pay.RefundReserved, pay.Amount), nil)
	} else if err != nil {
		return operation.Outcome{}, fmt.Errorf("reserve refund: %w", err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return operation.Outcome{}, err
	}
	row, err := q.RefundInsert(ctx, dbsqlc.RefundInsertParams{
		ID:             id,
		TenantID:       req.TenantID,
		PaymentID:      pay.ID,
		IdempotencyKey: string(req.Key),
		RequestHash:    req.Fingerprint[:],
		ProviderKey:    ProviderKey(req.TenantID, req.Operation, req.Key),
		Amount:         a.Data.amount,
		CreatedAt:      s.nowUTC(),
	})
	if err != nil {
		return operation.Outcome{}, fmt.Errorf("insert refund: %w", err)
	}
	a.Data.ref, a.Data.loaded, a.Data.recorded = refundFromRow(row), true, true
	return a.Next(ctx, tx, PointRefundCreated, &idempotency.Resource{Type: "refund", ID: row.ID})
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
	pay, err := loadPayment(ctx, s.pool, ref.PaymentID)
	if err != nil {
		return err
	}
	var pr *ProviderRefund
	if !a.Data.recorded {
		if pr, err = s.provider.FindRefund(ctx, pay.ID.String(), ref.ID.String()); err != nil {
			return s.unknownOutcome(ctx, a.Claim.Request(), err)
		}
	}
	if pr == nil {
		created, err := s.provider.CreateRefund(ctx, ref.ProviderKey, deref(pay.ProviderChargeID), ref.Amount, map[string]string{
			"reference":       ref.ID.String(),
			"payment_id":      pay.ID.String(),
			"tenant_id":       ref.TenantID.String(),
			"idempotency_key": ref.IdempotencyKey,
		})
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
	ref, err := loadRefund(ctx, s.pool, a.Claim.Resource.ID)
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
	final, err := loadRefund(ctx, tx, a.Data.ref.ID)
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
	q := dbsqlc.New(tx)
	pay, err := loadPayment(ctx, tx, ref.PaymentID)
	if err != nil {
		return Refund{}, fmt.Errorf("payment of refund %s: %w", ref.ID, err)
	}
	if err := refundMismatch(pay, ref, pr); err != nil {
		return Refund{}, err
	}
	now := s.nowUTC()
	row, err := q.RefundSucceed(ctx, dbsqlc.RefundSucceedParams{ProviderRefundID: &pr.ID, Now: now, ID: ref.ID})
	if errors.Is(err, pgx.ErrNoRows) {
		return loadRefund(ctx, tx, ref.ID)
	}
	if err != nil {
		return Refund{}, fmt.Errorf("record refund: %w", err)
	}
	payRow, err := q.PaymentAddRefunded(ctx, dbsqlc.PaymentAddRefundedParams{Amount: row.Amount, Now: now, ID: row.PaymentID})
	if err != nil {
		return Refund{}, fmt.Errorf("add refunded amount: %w", err)
	}
	status := orders.StatusPartiallyRefunded
	if payRow.AmountRefunded == payRow.Amount {
		status = orders.StatusRefunded
	}
	if _, err := s.orders.Advance(ctx, tx, payRow.OrderID, status); err != nil {
		return Refund{}, err
	}
	moved := refundFromRow(row)
	if _, err := outbox.Append(ctx, tx, outbox.Event{
		TenantID:       moved.TenantID,
		Type:           EventRefundSucceeded,
		AggregateType:  "refund",
		AggregateID:    moved.ID,
		IdempotencyKey: moved.IdempotencyKey,
		OccurredAt:     now,
		Payload: map[string]any{
			"refund": refundJSONFrom(moved), "payment_id": payRow.ID, "order_id": payRow.OrderID,
			"amount_refunded": payRow.AmountRefunded, "payment_amount": payRow.Amount,
		},
	}); err != nil {
		return Refund{}, err
	}
	return moved, nil
}

// failRefund records a provider's refusal and gives the reserved amount back.
func (s *Service) failRefund(ctx context.Context, tx pgx.Tx, ref Refund, code string) (Refund, error) {
	q := dbsqlc.New(tx)
	now := s.nowUTC()
	row, err := q.RefundFail(ctx, dbsqlc.RefundFailParams{FailureCode: &code, Now: now, ID: ref.ID})
	if errors.Is(err, pgx.ErrNoRows) {
		return loadRefund(ctx, tx, ref.ID)
	}
	if err != nil {
		return Refund{}, fmt.Errorf("record refund failure: %w", err)
	}
	if err := q.PaymentReleaseRefund(ctx, dbsqlc.PaymentReleaseRefundParams{Amount: row.Amount, Now: now, ID: row.PaymentID}); err != nil {
		return Refund{}, fmt.Errorf("release refund reservation: %w", err)
	}
	return refundFromRow(row), nil
}

// finishRefund stores the answer for a refund after the provider's answer
// was recorded.
func (s *Service) finishRefund(ctx context.Context, tx pgx.Tx, a *operation.Attempt[refundAttempt], ref Refund) (operation.Outcome, error) {
	res := &idempotency.Resource{Type: "refund", ID: ref.ID}
	if ref.Status == StatusFailed {
		// The provider refused: for more than the charge still holds, that is
		// refund_exceeds_payment; anything else means the charge cannot be
		// refunded at all.
		code := problem.PaymentNotRefundable
		if deref(ref.FailureCode) == "amount_too_large" {
			code = problem.RefundExceedsPayment
		}
		return a.Refuse(ctx, tx, problem.New(code,
			"The provider refused refund %s (%s).", ref.ID, deref(ref.FailureCode)), res)
	}
	body, err := wire.Encode(refundJSONFrom(ref))
	if err != nil {
		return operation.Outcome{}, err
	}
	return a.Finish(ctx, tx, idempotency.Response{
		Status:      http.StatusCreated,
		ContentType: "application/json",
		Location:    "/v1/refunds/" + ref.ID.String(),
		Body:        body,
	}, res)
}
