package payments

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/payments/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/problem"
)

// The phases of payments.create and refunds.create in two pipelined
// batches each (operation.Batched): the same statements as the steps' Tx,
// in the same order, so the same rows are locked in the same order. What
// the Tx decides between two statements is decided here between the
// batches, from rows the first batch locked; the rare cases go back to the
// Tx with operation.ErrSequential (a late retry, a payment or refund that
// somebody else finished meanwhile, a provider answer that does not match).

// row reads the one row of a queued ":batchone" query.
func row[T any](queryRow func(func(int, T, error))) (T, error) {
	var (
		r   T
		err error
	)
	queryRow(func(_ int, v T, e error) { r, err = v, e })
	return r, err
}

// recordPaymentBatched is recordPayment in batches: the payment under the
// key, the order (locked) and its live payment go with the claim; the
// payment and the recovery point with COMMIT.
func (s *Service) recordPaymentBatched(ctx context.Context, p *postgres.Pipeline, a *operation.Attempt[payAttempt]) (operation.Write[payAttempt], error) {
	req := a.Request()
	q := dbsqlc.New(p)
	byKey := q.PaymentGetByIdempotencyKeyQueued(ctx, []dbsqlc.PaymentGetByIdempotencyKeyQueuedParams{{TenantID: req.TenantID, IdempotencyKey: string(req.Key)}})
	lockOrder := s.orders.QueueLockForPayment(ctx, p, req.TenantID, a.Data.orderID)
	live := q.PaymentGetLiveForOrderQueued(ctx, []dbsqlc.PaymentGetLiveForOrderQueuedParams{{TenantID: req.TenantID, OrderID: a.Data.orderID}})
	return func(ctx context.Context, p *postgres.Pipeline, a *operation.Attempt[payAttempt]) (operation.Outcome, func() error, error) {
		_, err := row(byKey.QueryRow)
		if missing, err := noRow(err, "load payment by key"); err != nil || !missing {
			if err != nil {
				return operation.Outcome{}, nil, err
			}
			return operation.Outcome{}, nil, operation.ErrSequential // a late retry: recordPayment decides
		}
		order, err := lockOrder()
		if errors.Is(err, orders.ErrNotFound) {
			return operation.Outcome{}, nil, problem.New(problem.NotFound, "No such order.")
		}
		if err != nil {
			return operation.Outcome{}, nil, err
		}
		_, err = row(live.QueryRow)
		missing, err := noRow(err, "load live payment")
		if err != nil {
			return operation.Outcome{}, nil, err
		}
		if order.Status != orders.StatusAwaitingPayment || !missing {
			out, err := a.QueueRefuse(ctx, p, problem.New(problem.OrderAlreadyPaid,
				"Order %s is already paid or has a payment in progress.", order.ID), nil)
			return out, nil, err
		}
		id, err := uuid.NewV7()
		if err != nil {
			return operation.Outcome{}, nil, err
		}
		inserted := dbsqlc.New(p).PaymentInsertQueued(ctx, []dbsqlc.PaymentInsertQueuedParams{{
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
		}})
		out, err := a.QueueNext(ctx, p, PointPaymentCreated, &idempotency.Resource{Type: "payment", ID: id})
		return out, func() error {
			r, err := row(inserted.QueryRow)
			if err != nil {
				return err
			}
			a.Data.pay, a.Data.loaded, a.Data.recorded = paymentFromRow(r), true, true
			return nil
		}, err
	}, nil
}

// recordChargeBatched is recordCharge (applyCharge, finishPayment) in
// batches: the payment's move from pending goes with the record's lock;
// the order's, the event and the answer with COMMIT.
func (s *Service) recordChargeBatched(ctx context.Context, p *postgres.Pipeline, a *operation.Attempt[payAttempt]) (operation.Write[payAttempt], error) {
	if err := s.loadPayAttempt(ctx, a); err != nil {
		return nil, err
	}
	pay, c := a.Data.pay, a.Data.charge
	if c == nil {
		return nil, operation.ErrSequential // finished meanwhile: recordCharge reads it
	}
	var chargeID *string
	if c.ID != "" { // a refused request created no charge
		if chargeMismatch(pay, *c) != nil {
			return nil, operation.ErrSequential // recordCharge holds it for an operator
		}
		chargeID = &c.ID
	}
	now := s.nowUTC()
	q := dbsqlc.New(p)
	var moved func() (dbsqlc.Payment, error)
	event := EventPaymentSucceeded
	if c.Status == chargeSucceeded {
		r := q.PaymentSucceedQueued(ctx, []dbsqlc.PaymentSucceedQueuedParams{{ProviderChargeID: chargeID, Now: now, TenantID: pay.TenantID, ID: pay.ID}})
		moved = func() (dbsqlc.Payment, error) { return row(r.QueryRow) }
	} else {
		code := "card_declined"
		if c.FailureCode != nil {
			code = *c.FailureCode
		}
		r := q.PaymentFailQueued(ctx, []dbsqlc.PaymentFailQueuedParams{{ProviderChargeID: chargeID, FailureCode: &code, Now: now, TenantID: pay.TenantID, ID: pay.ID}})
		moved = func() (dbsqlc.Payment, error) { return row(r.QueryRow) }
		event = EventPaymentFailed
	}
	return func(ctx context.Context, p *postgres.Pipeline, a *operation.Attempt[payAttempt]) (operation.Outcome, func() error, error) {
		r, err := moved()
		if missing, err := noRow(err, "record charge"); missing || err != nil {
			if err != nil {
				return operation.Outcome{}, nil, err
			}
			return operation.Outcome{}, nil, operation.ErrSequential // finished by somebody else first
		}
		final := paymentFromRow(r)
		var advanced func() error
		if final.Status == StatusSucceeded {
			if advanced, err = s.orders.QueueAdvance(ctx, p, final.TenantID, final.OrderID, orders.StatusPaid); err != nil {
				return operation.Outcome{}, nil, err
			}
		}
		_, appended, err := outbox.Queue(ctx, p, outbox.Event{
			TenantID:       final.TenantID,
			Type:           event,
			AggregateType:  "payment",
			AggregateID:    final.ID,
			IdempotencyKey: final.IdempotencyKey,
			OccurredAt:     now,
			Payload:        paymentJSONFrom(final),
		})
		if err != nil {
			return operation.Outcome{}, nil, err
		}
		resp, res, err := paymentAnswer(final)
		if err != nil {
			return operation.Outcome{}, nil, err
		}
		out, err := a.QueueFinish(ctx, p, resp, res)
		return out, func() error {
			if advanced != nil {
				if err := advanced(); err != nil {
					return err
				}
			}
			return appended.Err()
		}, err
	}, nil
}

// reserveRefundBatched is reserveRefund in batches: the refund under the
// key and the payment (locked) go with the claim; the reservation, the
// refund and the recovery point with COMMIT. The locked payment decides
// whether the amount fits, as reserveRefund's guarded update does; the
// queued reservation has no guard of its own, and the payment's CHECK
// fails the batch should the two ever disagree.
func (s *Service) reserveRefundBatched(ctx context.Context, p *postgres.Pipeline, a *operation.Attempt[refundAttempt]) (operation.Write[refundAttempt], error) {
	req := a.Request()
	q := dbsqlc.New(p)
	byKey := q.RefundGetByIdempotencyKeyQueued(ctx, []dbsqlc.RefundGetByIdempotencyKeyQueuedParams{{TenantID: req.TenantID, IdempotencyKey: string(req.Key)}})
	locked := q.PaymentGetForUpdateQueued(ctx, []dbsqlc.PaymentGetForUpdateQueuedParams{{TenantID: req.TenantID, ID: a.Data.paymentID}})
	return func(ctx context.Context, p *postgres.Pipeline, a *operation.Attempt[refundAttempt]) (operation.Outcome, func() error, error) {
		_, err := row(byKey.QueryRow)
		if missing, err := noRow(err, "load refund by key"); err != nil || !missing {
			if err != nil {
				return operation.Outcome{}, nil, err
			}
			return operation.Outcome{}, nil, operation.ErrSequential // a late retry: reserveRefund decides
		}
		r, err := row(locked.QueryRow)
		if err := notFound(err, "lock payment"); errors.Is(err, ErrNotFound) {
			return operation.Outcome{}, nil, problem.New(problem.NotFound, "No such payment.")
		} else if err != nil {
			return operation.Outcome{}, nil, err
		}
		pay := paymentFromRow(r)
		if pay.Status != StatusSucceeded {
			out, err := a.QueueRefuse(ctx, p, problem.New(problem.PaymentNotRefundable,
				"Payment %s is %s; only succeeded payments can be refunded.", pay.ID, pay.Status), nil)
			return out, nil, err
		}
		if a.Data.amount > pay.Amount-pay.RefundReserved {
			out, err := a.QueueRefuse(ctx, p, problem.New(problem.RefundExceedsPayment,
				"A refund of %d would exceed what remains of payment %s (%d of %d already refunded or in progress).",
				a.Data.amount, pay.ID, pay.RefundReserved, pay.Amount), nil)
			return out, nil, err
		}
		id, err := uuid.NewV7()
		if err != nil {
			return operation.Outcome{}, nil, err
		}
		now := s.nowUTC()
		q := dbsqlc.New(p)
		reserved := q.PaymentReserveRefundQueued(ctx, []dbsqlc.PaymentReserveRefundQueuedParams{{Amount: a.Data.amount, Now: now, TenantID: pay.TenantID, ID: pay.ID}})
		inserted := q.RefundInsertQueued(ctx, []dbsqlc.RefundInsertQueuedParams{{
			ID:             id,
			TenantID:       req.TenantID,
			PaymentID:      pay.ID,
			IdempotencyKey: string(req.Key),
			RequestHash:    req.Fingerprint[:],
			ProviderKey:    ProviderKey(req.TenantID, req.Operation, req.Key),
			Amount:         a.Data.amount,
			CreatedAt:      now,
		}})
		out, err := a.QueueNext(ctx, p, PointRefundCreated, &idempotency.Resource{Type: "refund", ID: id})
		return out, func() error {
			var err error
			reserved.Exec(func(_ int, e error) { err = e })
			if err != nil {
				return err
			}
			r, err := row(inserted.QueryRow)
			if err != nil {
				return err
			}
			a.Data.ref, a.Data.loaded, a.Data.recorded = refundFromRow(r), true, true
			a.Data.pay = &pay
			return nil
		}, err
	}, nil
}

// recordRefundBatched is recordRefund (applyRefund or failRefund, then
// finishRefund) in batches: the refund's move from pending and the payment
// (locked) go with the record's lock; the payment's amounts, the order's
// move, the event and the answer with COMMIT. The refund is locked before
// its payment, as applyRefund and the webhook worker do.
func (s *Service) recordRefundBatched(ctx context.Context, p *postgres.Pipeline, a *operation.Attempt[refundAttempt]) (operation.Write[refundAttempt], error) {
	if err := s.loadRefundAttempt(ctx, a); err != nil {
		return nil, err
	}
	ref := a.Data.ref
	now := s.nowUTC()
	q := dbsqlc.New(p)
	switch {
	case a.Data.answer != nil:
		pr := *a.Data.answer
		moved := q.RefundSucceedQueued(ctx, []dbsqlc.RefundSucceedQueuedParams{{ProviderRefundID: &pr.ID, Now: now, TenantID: ref.TenantID, ID: ref.ID}})
		locked := q.PaymentGetForUpdateQueued(ctx, []dbsqlc.PaymentGetForUpdateQueuedParams{{TenantID: ref.TenantID, ID: ref.PaymentID}})
		return func(ctx context.Context, p *postgres.Pipeline, a *operation.Attempt[refundAttempt]) (operation.Outcome, func() error, error) {
			r, err := row(moved.QueryRow)
			if missing, err := noRow(err, "record refund"); missing || err != nil {
				if err != nil {
					return operation.Outcome{}, nil, err
				}
				return operation.Outcome{}, nil, operation.ErrSequential // finished by somebody else first
			}
			final := refundFromRow(r)
			pr, err := row(locked.QueryRow)
			if err != nil {
				return operation.Outcome{}, nil, notFound(err, "payment of refund "+ref.ID.String())
			}
			pay := paymentFromRow(pr)
			if refundMismatch(pay, ref, *a.Data.answer) != nil {
				return operation.Outcome{}, nil, operation.ErrSequential // recordRefund holds it for an operator
			}
			added := dbsqlc.New(p).PaymentAddRefundedQueued(ctx, []dbsqlc.PaymentAddRefundedQueuedParams{{Amount: final.Amount, Now: now, TenantID: pay.TenantID, ID: pay.ID}})
			pay.AmountRefunded += final.Amount // the payment is locked: what the update makes it
			advanced, err := s.orders.QueueAdvance(ctx, p, pay.TenantID, pay.OrderID, refundedStatus(pay))
			if err != nil {
				return operation.Outcome{}, nil, err
			}
			_, appended, err := outbox.Queue(ctx, p, refundSucceededEvent(final, pay, now))
			if err != nil {
				return operation.Outcome{}, nil, err
			}
			resp, res, err := refundAnswer(final)
			if err != nil {
				return operation.Outcome{}, nil, err
			}
			out, err := a.QueueFinish(ctx, p, resp, res)
			return out, func() error {
				if _, err := row(added.QueryRow); err != nil {
					return err
				}
				if err := advanced(); err != nil {
					return err
				}
				return appended.Err()
			}, err
		}, nil
	case a.Data.failCode != nil:
		moved := q.RefundFailQueued(ctx, []dbsqlc.RefundFailQueuedParams{{FailureCode: a.Data.failCode, Now: now, TenantID: ref.TenantID, ID: ref.ID}})
		return func(ctx context.Context, p *postgres.Pipeline, a *operation.Attempt[refundAttempt]) (operation.Outcome, func() error, error) {
			r, err := row(moved.QueryRow)
			if missing, err := noRow(err, "record refused refund"); missing || err != nil {
				if err != nil {
					return operation.Outcome{}, nil, err
				}
				return operation.Outcome{}, nil, operation.ErrSequential // finished by somebody else first
			}
			final := refundFromRow(r)
			released := dbsqlc.New(p).PaymentReleaseRefundQueued(ctx, []dbsqlc.PaymentReleaseRefundQueuedParams{{Amount: final.Amount, Now: now, TenantID: final.TenantID, ID: final.PaymentID}})
			resp, res, err := refundAnswer(final)
			if err != nil {
				return operation.Outcome{}, nil, err
			}
			out, err := a.QueueFinish(ctx, p, resp, res)
			return out, func() error {
				var err error
				released.Exec(func(_ int, e error) { err = e })
				return err
			}, err
		}, nil
	}
	return nil, operation.ErrSequential // finished meanwhile: recordRefund reads it
}
