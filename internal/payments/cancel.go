package payments

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/wire"
)

// payments.cancel (POST /v1/payments/cancel-by-key) is how a client gives
// up on a payment it asked for under a key, whatever became of that request:
// "make sure this payment does not happen". It is one step, in its claim's
// transaction, and its outcome depends on where the payment under the key
// stands:
//
//	no record yet           a tombstone under the key (idempotency.Tombstone):
//	                        the request, should it still arrive, is answered
//	                        409 payment_cancelled and never runs   -> prevented
//	claimed, not committed  the tombstone's insert waits for the claim's
//	                        transaction, then reads what it committed
//	pending at the provider the payment is marked (cancel_requested_at); the
//	or unknown              step that learns the outcome (a retry, the
//	                        Recoverer, the webhook: applyCharge) refunds a
//	                        charge that succeeded in full   -> cancel_requested
//	succeeded               a full refund under a key derived from the
//	                        payment (compensate)            -> refund_started
//	declined, refused, or   nothing to undo                 -> nothing_to_cancel
//	no payment made
//
// Each outcome is stored under the cancel's own key and replayed.

// OpCancel is POST /v1/payments/cancel-by-key.
const OpCancel idempotency.Operation = "payments.cancel"

// The outcomes of a cancel by key.
const (
	CancelPrevented        = "prevented"
	CancelRequested        = "cancel_requested"
	CancelRefundStarted    = "refund_started"
	CancelNothingToCancel  = "nothing_to_cancel"
	cancelledOrderReason   = "its payment was cancelled by its idempotency key and refunded"
	cancelledPaymentDetail = "This payment was cancelled by its key (POST /v1/payments/cancel-by-key) and will not be made. A new attempt needs a new Idempotency-Key."
)

// CompensationKeyPrefix and the payment's id are the idempotency key of the
// refund that undoes a cancelled payment (compensate): one key per payment,
// so it is undone once, whoever learns first that it must be.
const CompensationKeyPrefix = "oncepay-cancel:"

// CancelInput is a cancel by key's request: the order, and the key its
// payment was (or would be) asked for under.
type CancelInput struct {
	OrderID        uuid.UUID
	IdempotencyKey idempotency.Key
}

// cancellationJSON is a cancel's answer.
type cancellationJSON struct {
	OrderID        uuid.UUID  `json:"order_id"`
	IdempotencyKey string     `json:"idempotency_key"`
	Outcome        string     `json:"outcome"`
	PaymentID      *uuid.UUID `json:"payment_id,omitempty"`
	RefundID       *uuid.UUID `json:"refund_id,omitempty"`
}

// cancelSteps is payments.cancel as a step table.
func (s *Service) cancelSteps() operation.Steps[CancelInput] {
	return operation.Steps[CancelInput]{
		idempotency.PointStarted: {Tx: s.cancelByKey},
	}
}

// cancelByKey is the cancel's one step (the table at the top of the file).
func (s *Service) cancelByKey(ctx context.Context, tx pgx.Tx, a *operation.Attempt[CancelInput]) (operation.Outcome, error) {
	req, in := a.Claim.Request(), a.Data
	out := cancellationJSON{OrderID: in.OrderID, IdempotencyKey: string(in.IdempotencyKey)}
	if _, err := s.orders.GetTx(ctx, tx, req.TenantID, in.OrderID); errors.Is(err, orders.ErrNotFound) {
		return operation.Outcome{}, problem.New(problem.NotFound, "No such order.")
	} else if err != nil {
		return operation.Outcome{}, err
	}
	stopped := operation.Refusal(problem.New(problem.PaymentCancelled, "%s", cancelledPaymentDetail))
	wrote, err := s.store.Tombstone(ctx, tx, req.TenantID, OpPay, in.IdempotencyKey, stopped, req.RequestID)
	if err != nil {
		return operation.Outcome{}, err
	}
	if wrote {
		out.Outcome = CancelPrevented
		return s.finishCancel(ctx, tx, a, http.StatusOK, out)
	}
	st, res, err := s.store.LockKey(ctx, tx, req.TenantID, OpPay, in.IdempotencyKey)
	if err != nil {
		return operation.Outcome{}, err
	}
	switch {
	case st.State == idempotency.KeyUnknown: // swept between the two statements
		return operation.Outcome{}, problem.New(problem.RequestInProgress, "The payment's record changed meanwhile; retry the cancel with the same key.")
	case st.State == idempotency.KeyCancelled:
		out.Outcome = CancelPrevented
		return s.finishCancel(ctx, tx, a, http.StatusOK, out)
	case res == nil && st.State != idempotency.KeyCompleted:
		// Claimed, and not yet at the provider: the claim's own step is
		// about to record the payment. The cancel does not race it.
		return operation.Outcome{}, &problem.Error{Code: problem.RequestInProgress, RetryAfter: max(st.RetryAfter, time.Second), // a held record has none
			Detail: "The payment under this key is being started; retry the cancel with the same key."}
	case res == nil || res.Type != "payment":
		// A stored refusal that made no payment (the order was paid
		// already, or not found): nothing to undo.
		out.Outcome = CancelNothingToCancel
		return s.finishCancel(ctx, tx, a, http.StatusOK, out)
	}
	st2 := storeOf(tx)
	pay, err := st2.lockPayment(ctx, req.TenantID, res.ID)
	if err != nil {
		return operation.Outcome{}, err
	}
	if pay.OrderID != in.OrderID {
		return operation.Outcome{}, problem.New(problem.NotFound, "Order %s has no payment under this key.", in.OrderID)
	}
	out.PaymentID = &pay.ID
	switch pay.Status {
	case StatusPending:
		if _, err := st2.requestCancel(ctx, pay.TenantID, pay.ID, s.nowUTC()); err != nil {
			return operation.Outcome{}, err
		}
		out.Outcome = CancelRequested
		return s.finishCancel(ctx, tx, a, http.StatusAccepted, out)
	case StatusSucceeded:
		ref, started, err := s.compensate(ctx, tx, pay)
		if err != nil {
			return operation.Outcome{}, err
		}
		out.Outcome = CancelNothingToCancel
		if started {
			out.Outcome, out.RefundID = CancelRefundStarted, &ref.ID
			return s.finishCancel(ctx, tx, a, http.StatusAccepted, out)
		}
		return s.finishCancel(ctx, tx, a, http.StatusOK, out)
	}
	out.Outcome = CancelNothingToCancel
	return s.finishCancel(ctx, tx, a, http.StatusOK, out)
}

// finishCancel stores a cancel's answer.
func (s *Service) finishCancel(ctx context.Context, tx pgx.Tx, a *operation.Attempt[CancelInput], status int, out cancellationJSON) (operation.Outcome, error) {
	body, err := wire.Encode(out)
	if err != nil {
		return operation.Outcome{}, err
	}
	return a.Finish(ctx, tx, idempotency.Response{Status: status, ContentType: "application/json", Body: body}, nil)
}

// compensate starts the full refund of pay, a succeeded payment its client
// cancelled, in tx: the refund's phase 1 (the amount reserved, a pending
// refund) and its record, at refund_created with its lease run out, so that
// the Recoverer runs the refund's own steps (refunds.create) at once. The
// refund's key is derived from the payment, so however many steps learn
// that the payment must be undone, it is undone once. It reports the refund
// and whether one is under way (false: nothing was left to refund, or its
// compensation succeeded already).
func (s *Service) compensate(ctx context.Context, tx pgx.Tx, pay Payment) (Refund, bool, error) {
	key := idempotency.Key(CompensationKeyPrefix + pay.ID.String())
	st := storeOf(tx)
	if prev, found, err := st.refundByKey(ctx, pay.TenantID, string(key)); err != nil || found {
		// Done already: the payment is refunded, and nothing is left to
		// undo (CONTRACT.md). Pending: the same refund is still under way.
		return prev, found && prev.Status != StatusSucceeded, err
	}
	amount := pay.Amount - pay.RefundReserved // what no other refund holds
	if amount <= 0 {
		return Refund{}, false, nil
	}
	body, err := json.Marshal(map[string]int64{"amount": amount})
	if err != nil {
		return Refund{}, false, err
	}
	fp, err := idempotency.NewFingerprint(OpRefund, []string{pay.ID.String()}, body)
	if err != nil {
		return Refund{}, false, err
	}
	req := idempotency.Request{TenantID: pay.TenantID, Operation: OpRefund, Key: key, Fingerprint: fp, RequestID: "compensation of " + pay.ID.String()}
	ref, refused, err := s.newRefund(ctx, st, req, pay, amount)
	switch {
	case err != nil:
		return Refund{}, false, err
	case refused != nil:
		// Two returns, not errors.Join(err, refused): a nil *problem.Error
		// joined is a non-nil error that panics when printed.
		return Refund{}, false, refused
	}
	if _, err := s.store.Start(ctx, tx, req, PointRefundCreated, idempotency.Resource{Type: "refund", ID: ref.ID}); err != nil {
		return Refund{}, false, err
	}
	return ref, true, nil
}
