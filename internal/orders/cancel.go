package orders

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/orders/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/wire"
)

// EventOrderCancelled is the outbox event type of a cancelled order.
const EventOrderCancelled = "order.cancelled"

// MaxReasonLen bounds the reason a client may give for a cancel.
const MaxReasonLen = 200

// CancelInput is a validated cancel request: the order, and why (optional).
type CancelInput struct {
	OrderID uuid.UUID
	Reason  string
}

// LivePayment reports whether an order has a payment that is pending at
// the provider or succeeded, in tx, with the order's row locked. The
// payments feature answers it (payments.HasLivePayment); orders does not
// import payments, so internal/app hands it in (WithLivePayment).
type LivePayment func(ctx context.Context, tx pgx.Tx, tenantID, orderID uuid.UUID) (bool, error)

// WithLivePayment is the Service option that tells a cancel whether the
// order is being paid. Without it a cancel is never executed: it fails
// rather than cancel an order whose payment it cannot see.
func WithLivePayment(f LivePayment) Option { return func(s *Service) { s.livePayment = f } }

// cancelSteps is orders.cancel as a step table: one step, the claim's
// transaction.
func (s *Service) cancelSteps() operation.Steps[CancelInput] {
	return operation.Steps[CancelInput]{
		idempotency.PointStarted: {Tx: s.cancelOrder},
	}
}

// Cancel executes orders.cancel for req at most once: the cancelled order
// (200), a refusal (409 order_not_cancellable), or a stored answer.
func (s *Service) Cancel(ctx context.Context, req idempotency.Request, in CancelInput) (idempotency.Response, error) {
	return s.cancel.Run(ctx, req, in)
}

// cancelOrder is the transaction of orders.cancel. It locks the order, the
// lock a payment's first step takes too, so a cancel and a payment of one
// order are decided one after the other: an order awaiting its payment with
// no payment at the provider becomes cancelled, with its order.cancelled
// event; an order already cancelled is answered as it is (a cancel under a
// new key asks for what is already true); any other order, or one whose
// payment's outcome is not known yet, is refused, and the refusal is
// stored like an answer.
func (s *Service) cancelOrder(ctx context.Context, tx pgx.Tx, a *operation.Attempt[CancelInput]) (operation.Outcome, error) {
	req := a.Request()
	if s.livePayment == nil {
		return operation.Outcome{}, errors.New("orders.cancel: no LivePayment wired (orders.WithLivePayment)")
	}
	order, err := s.LockForPayment(ctx, tx, req.TenantID, a.Data.OrderID)
	if errors.Is(err, ErrNotFound) {
		return operation.Outcome{}, problem.New(problem.NotFound, "No such order.")
	}
	if err != nil {
		return operation.Outcome{}, err
	}
	live, err := s.livePayment(ctx, tx, req.TenantID, order.ID)
	if err != nil {
		return operation.Outcome{}, err
	}
	if order.Status != StatusCancelled && (order.Status != StatusAwaitingPayment || live) {
		return a.Refuse(ctx, tx, problem.New(problem.OrderNotCancellable,
			"Order %s is %s or has a payment in progress: it cannot be cancelled.", order.ID, order.Status), nil)
	}
	if order.Status == StatusAwaitingPayment {
		if _, err := s.CancelUnpaid(ctx, tx, req.TenantID, order.ID, string(req.Key), a.Data.Reason); err != nil {
			return operation.Outcome{}, err
		}
	}
	if order, err = getOrder(ctx, dbsqlc.New(tx), req.TenantID, order.ID); err != nil {
		return operation.Outcome{}, err
	}
	body, err := encodeJSON(orderJSONFrom(order))
	if err != nil {
		return operation.Outcome{}, err
	}
	return a.Finish(ctx, tx, idempotency.Response{
		Status:      http.StatusOK,
		ContentType: "application/json",
		Location:    "/v1/orders/" + order.ID.String(),
		Body:        body,
	}, &idempotency.Resource{Type: "order", ID: order.ID})
}

// CancelUnpaid moves an order awaiting its payment to cancelled, in tx,
// with its order.cancelled event (key is the idempotency key of the request
// that gave the order up), and reports whether it moved: false when the
// order is no longer awaiting payment. It is the one way an order becomes
// cancelled: a client's cancel (orders.cancel) and the refund that undoes a
// payment cancelled by its key (payments) both call it.
func (s *Service) CancelUnpaid(ctx context.Context, tx pgx.Tx, tenantID, id uuid.UUID, key, reason string) (bool, error) {
	moved, err := s.Advance(ctx, tx, tenantID, id, StatusCancelled)
	if err != nil || !moved {
		return false, err
	}
	order, err := getOrder(ctx, dbsqlc.New(tx), tenantID, id)
	if err != nil {
		return false, err
	}
	payload, err := encodeJSON(cancelledJSON{Order: orderJSONFrom(order), Reason: reason})
	if err != nil {
		return false, err
	}
	_, err = outbox.Append(ctx, tx, outbox.Event{
		TenantID:       tenantID,
		Type:           EventOrderCancelled,
		AggregateType:  "order",
		AggregateID:    order.ID,
		IdempotencyKey: key,
		OccurredAt:     s.nowUTC(),
		Payload:        json.RawMessage(payload),
	})
	return err == nil, err
}

// cancelledJSON is the payload of order.cancelled: the order as it is now,
// and the reason its client gave.
type cancelledJSON struct {
	Order  orderJSON `json:"order"`
	Reason string    `json:"reason,omitempty"`
}

type cancelRequestJSON struct {
	Reason *string `json:"reason"`
}

// parseCancel decodes and validates a cancel request; its body is
// optional (operation.OptionalBody reads none as {}).
func parseCancel(body []byte, id uuid.UUID) (CancelInput, error) {
	var req cancelRequestJSON
	if err := wire.Decode(body, &req); err != nil {
		return CancelInput{}, err
	}
	in := CancelInput{OrderID: id}
	if req.Reason != nil {
		if msg := wire.CheckText(*req.Reason, MaxReasonLen); msg != "" {
			return CancelInput{}, problem.Validation(problem.FieldError{Field: "reason", Message: msg})
		}
		in.Reason = *req.Reason
	}
	return in, nil
}

// Cancel handles POST /v1/orders/{id}/cancel.
func (h *Handler) Cancel(c echo.Context) error {
	req, input, err := operation.ParseRequest(c, OpCancel, operation.Target{Param: "id", NotFound: "No such order."}, parseCancel, operation.OptionalBody)
	if err != nil {
		return err
	}
	resp, err := h.svc.cancel.RunWith(c.Request().Context(), req, input)
	if err != nil {
		return err
	}
	return resp.Write(c.Response())
}
