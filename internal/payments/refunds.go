package payments

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/wire"
)

// Refund executes refunds.create: a compensation, idempotent like the charge
// it compensates. Phase 1 reserves the amount on the payment in the same
// statement that checks it (refund_reserved + amount <= amount), so
// concurrent refunds can never exceed the payment together.
func (s *Service) Refund(ctx context.Context, req idempotency.Request, paymentID uuid.UUID, amount int64) (idempotency.Response, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.writeTimeout)
	defer cancel()
	claim, ref, final, err := phase1(ctx, s, req,
		func(q *dbsqlc.Queries, id uuid.UUID) (dbsqlc.Refund, error) { return q.RefundGetByID(ctx, id) },
		func(tx pgx.Tx, claim *idempotency.Claim) (dbsqlc.Refund, *idempotency.Response, error) {
			return s.createRefund(ctx, tx, claim, paymentID, amount)
		})
	if err != nil || final != nil {
		return deref(final), err
	}
	return s.afterPhase1(ctx, claim, func() (idempotency.Response, error) { return s.completeRefund(ctx, claim, ref) })
}

func (s *Service) createRefund(ctx context.Context, tx pgx.Tx, claim *idempotency.Claim, paymentID uuid.UUID, amount int64) (dbsqlc.Refund, *idempotency.Response, error) {
	req := claim.Request()
	q := dbsqlc.New(tx)
	// A refund under this key while no record exists: a late retry (drill 8).
	if prev, err := q.RefundGetByIdempotencyKey(ctx, dbsqlc.RefundGetByIdempotencyKeyParams{TenantID: req.TenantID, IdempotencyKey: string(req.Key)}); err == nil {
		return prev, nil, s.lateRetry(ctx, tx, claim, "refund", prev.ID, prev.RequestHash, pointRefundCreated)
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return dbsqlc.Refund{}, nil, fmt.Errorf("load refund by key: %w", err)
	}
	pay, err := q.PaymentGetForUpdate(ctx, dbsqlc.PaymentGetForUpdateParams{TenantID: req.TenantID, ID: paymentID})
	if errors.Is(err, pgx.ErrNoRows) {
		return dbsqlc.Refund{}, nil, problem.New(problem.NotFound, "No such payment.")
	}
	if err != nil {
		return dbsqlc.Refund{}, nil, fmt.Errorf("lock payment: %w", err)
	}
	if pay.Status != StatusSucceeded {
		resp, err := s.finishProblem(ctx, tx, claim, problem.New(problem.PaymentNotRefundable,
			"Payment %s is %s; only succeeded payments can be refunded.", pay.ID, pay.Status), nil)
		return dbsqlc.Refund{}, resp, err
	}
	if _, err := q.PaymentReserveRefund(ctx, dbsqlc.PaymentReserveRefundParams{Amount: amount, Now: s.nowUTC(), ID: pay.ID}); errors.Is(err, pgx.ErrNoRows) {
		resp, err := s.finishProblem(ctx, tx, claim, problem.New(problem.RefundExceedsPayment,
			"A refund of %d would exceed what remains of payment %s (%d of %d already refunded or in progress).",
			amount, pay.ID, pay.RefundReserved, pay.Amount), nil)
		return dbsqlc.Refund{}, resp, err
	} else if err != nil {
		return dbsqlc.Refund{}, nil, fmt.Errorf("reserve refund: %w", err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return dbsqlc.Refund{}, nil, err
	}
	ref, err := q.RefundInsert(ctx, dbsqlc.RefundInsertParams{
		ID:             id,
		TenantID:       req.TenantID,
		PaymentID:      pay.ID,
		IdempotencyKey: string(req.Key),
		RequestHash:    req.Fingerprint[:],
		ProviderKey:    ProviderKey(req.TenantID, req.Operation, req.Key),
		Amount:         amount,
		CreatedAt:      s.nowUTC(),
	})
	if err != nil {
		return dbsqlc.Refund{}, nil, fmt.Errorf("insert refund: %w", err)
	}
	return ref, nil, claim.Checkpoint(ctx, tx, pointRefundCreated, &idempotency.Resource{Type: "refund", ID: ref.ID})
}

func (s *Service) completeRefund(ctx context.Context, claim *idempotency.Claim, ref dbsqlc.Refund) (idempotency.Response, error) {
	var (
		provRefund *ProviderRefund
		failCode   *string // the provider refused or failed the refund
	)
	if ref.Status == StatusPending {
		pr, err := s.refundAtProvider(ctx, claim, ref)
		var rejected *RejectedError
		switch {
		case errors.As(err, &rejected):
			failCode = &rejected.Code
		case err != nil:
			return s.unknownOutcome(ctx, claim, err)
		case pr.Status == StatusSucceeded:
			provRefund = &pr
		case refundFailed(pr) != "":
			code := refundFailed(pr)
			failCode = &code
		default:
			// Not settled yet (a provider may answer "pending" and finish
			// later): the outcome is still unknown, and the refund stays
			// pending for the retry, the recoverer or the webhook.
			return s.unknownOutcome(ctx, claim, fmt.Errorf("%w: provider refund %s is %q", ErrOutcomeUnknown, pr.ID, pr.Status))
		}
		if h := s.hooks.AfterProviderCall; h != nil {
			if err := h(idempotency.OpRefundsCreate); err != nil {
				return idempotency.Response{}, &crashedError{err}
			}
		}
	}
	var resp idempotency.Response
	err := postgres.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		if done, err := claim.Reacquire(ctx, tx); err != nil || done != nil {
			resp = deref(done)
			return err
		}
		q := dbsqlc.New(tx)
		final, err := q.RefundGetByID(ctx, ref.ID)
		if err != nil {
			return fmt.Errorf("reload refund: %w", err)
		}
		switch {
		case provRefund != nil:
			if final, err = s.applyRefund(ctx, tx, final, *provRefund); err != nil {
				return err
			}
		case failCode != nil:
			if final, err = s.failRefund(ctx, tx, final, *failCode); err != nil {
				return err
			}
		}
		if resp, err = s.finishRefund(ctx, tx, claim, final); err != nil {
			return err
		}
		if h := s.hooks.InPhase2; h != nil {
			return h(idempotency.OpRefundsCreate)
		}
		return nil
	})
	if err == nil {
		s.events.Committed()
	}
	return resp, err // on an error the caller (afterPhase1) releases the claim
}

func (s *Service) refundAtProvider(ctx context.Context, claim *idempotency.Claim, ref dbsqlc.Refund) (ProviderRefund, error) {
	pay, err := dbsqlc.New(s.pool).PaymentGetByID(ctx, ref.PaymentID)
	if err != nil {
		return ProviderRefund{}, fmt.Errorf("load payment: %w", err)
	}
	if claim.Resumed {
		found, err := s.provider.FindRefund(ctx, pay.ID.String(), ref.ID.String())
		if err != nil {
			return ProviderRefund{}, err
		}
		if found != nil {
			return *found, nil
		}
	}
	return s.provider.CreateRefund(ctx, ref.ProviderKey, deref(pay.ProviderChargeID), ref.Amount, map[string]string{
		"reference":       ref.ID.String(),
		"payment_id":      pay.ID.String(),
		"tenant_id":       ref.TenantID.String(),
		"idempotency_key": ref.IdempotencyKey,
	})
}

// applyRefund records a provider refund: pending becomes succeeded once, the
// payment's refunded amount grows, the order moves to (partially_)refunded,
// and refund.succeeded is emitted. Shared with the webhook worker.
func (s *Service) applyRefund(ctx context.Context, tx pgx.Tx, ref dbsqlc.Refund, pr ProviderRefund) (dbsqlc.Refund, error) {
	q := dbsqlc.New(tx)
	pay, err := q.PaymentGetByID(ctx, ref.PaymentID)
	if err != nil {
		return dbsqlc.Refund{}, fmt.Errorf("load payment of refund %s: %w", ref.ID, err)
	}
	if err := refundMismatch(pay, ref, pr); err != nil {
		return dbsqlc.Refund{}, err
	}
	now := s.nowUTC()
	row, err := q.RefundSucceed(ctx, dbsqlc.RefundSucceedParams{ProviderRefundID: &pr.ID, Now: now, ID: ref.ID})
	if errors.Is(err, pgx.ErrNoRows) {
		return q.RefundGetByID(ctx, ref.ID)
	}
	if err != nil {
		return dbsqlc.Refund{}, fmt.Errorf("record refund: %w", err)
	}
	pay, err = q.PaymentAddRefunded(ctx, dbsqlc.PaymentAddRefundedParams{Amount: row.Amount, Now: now, ID: row.PaymentID})
	if err != nil {
		return dbsqlc.Refund{}, fmt.Errorf("add refunded amount: %w", err)
	}
	status := "partially_refunded"
	if pay.AmountRefunded == pay.Amount {
		status = "refunded"
	}
	if _, err := q.OrderAdvanceStatus(ctx, dbsqlc.OrderAdvanceStatusParams{Status: status, Now: now, ID: pay.OrderID}); err != nil {
		return dbsqlc.Refund{}, fmt.Errorf("advance order: %w", err)
	}
	if _, err := outbox.Append(ctx, tx, outbox.Event{
		TenantID:       row.TenantID,
		Type:           EventRefundSucceeded,
		AggregateType:  "refund",
		AggregateID:    row.ID,
		IdempotencyKey: row.IdempotencyKey,
		OccurredAt:     now,
		Payload: map[string]any{
			"refund": refundJSONFrom(row), "payment_id": pay.ID, "order_id": pay.OrderID,
			"amount_refunded": pay.AmountRefunded, "payment_amount": pay.Amount,
		},
	}); err != nil {
		return dbsqlc.Refund{}, err
	}
	return row, nil
}

// failRefund records a provider's refusal and gives the reserved amount back.
func (s *Service) failRefund(ctx context.Context, tx pgx.Tx, ref dbsqlc.Refund, code string) (dbsqlc.Refund, error) {
	q := dbsqlc.New(tx)
	now := s.nowUTC()
	row, err := q.RefundFail(ctx, dbsqlc.RefundFailParams{FailureCode: &code, Now: now, ID: ref.ID})
	if errors.Is(err, pgx.ErrNoRows) {
		return q.RefundGetByID(ctx, ref.ID)
	}
	if err != nil {
		return dbsqlc.Refund{}, fmt.Errorf("record refund failure: %w", err)
	}
	if err := q.PaymentReleaseRefund(ctx, dbsqlc.PaymentReleaseRefundParams{Amount: row.Amount, Now: now, ID: row.PaymentID}); err != nil {
		return dbsqlc.Refund{}, fmt.Errorf("release refund reservation: %w", err)
	}
	return row, nil
}

func (s *Service) finishRefund(ctx context.Context, tx pgx.Tx, claim *idempotency.Claim, ref dbsqlc.Refund) (idempotency.Response, error) {
	res := &idempotency.Resource{Type: "refund", ID: ref.ID}
	if ref.Status == StatusFailed {
		// The provider refused: for more than the charge still holds, that is
		// refund_exceeds_payment; anything else means the charge cannot be
		// refunded at all.
		code := problem.PaymentNotRefundable
		if deref(ref.FailureCode) == "amount_too_large" {
			code = problem.RefundExceedsPayment
		}
		resp, err := s.finishProblem(ctx, tx, claim, problem.New(code,
			"The provider refused refund %s (%s).", ref.ID, deref(ref.FailureCode)), res)
		return deref(resp), err
	}
	body, err := wire.Encode(refundJSONFrom(ref))
	if err != nil {
		return idempotency.Response{}, err
	}
	return claim.Finish(ctx, tx, idempotency.Response{
		Status:      http.StatusCreated,
		ContentType: "application/json",
		Location:    "/v1/refunds/" + ref.ID.String(),
		Body:        body,
	}, res)
}

// GetRefund returns the tenant's refund id.
func (s *Service) GetRefund(ctx context.Context, tenantID, id uuid.UUID) (dbsqlc.Refund, error) {
	r, err := dbsqlc.New(s.pool).RefundGet(ctx, dbsqlc.RefundGetParams{TenantID: tenantID, ID: id})
	return r, postgres.NotFound(err)
}
