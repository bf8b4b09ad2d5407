package payments

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/tenants"
	"github.com/oncepay/oncepay/internal/wire"
)

// Handler serves the payment and refund endpoints.
type Handler struct {
	svc *Service
}

// NewHandler returns the handler for svc.
func NewHandler(svc *Service) *Handler { return &Handler{svc: svc} }

// MaxRefundAmount bounds a refund request; the payment bounds it further.
const MaxRefundAmount = 1_000_000_000_00

type payRequestJSON struct {
	PaymentMethod *string `json:"payment_method"`
}

type refundRequestJSON struct {
	// Amount is a JSON number in minor units, read exactly (wire.Integer):
	// 500 and 500.0 are the same number (and the same canonical JSON);
	// 500.5 is not an amount, and neither is 500.00000000000001, which a
	// float64 would round to 500.
	Amount *wire.Integer `json:"amount"`
}

// MaxPaymentMethodLen bounds payment_method, in characters.
const MaxPaymentMethodLen = 64

// Pay handles POST /v1/orders/{id}/payments.
func (h *Handler) Pay(c echo.Context) error {
	req, input, err := operation.ParseRequest(c, OpPay, operation.Target{Param: "id", NotFound: "No such order."}, func(raw []byte, orderID uuid.UUID) (payAttempt, error) {
		var in payRequestJSON
		if err := wire.Decode(raw, &in); err != nil {
			return payAttempt{}, err
		}
		if in.PaymentMethod == nil {
			return payAttempt{}, problem.Validation(problem.FieldError{Field: "payment_method", Message: "is required, e.g. pm_card_ok"})
		}
		if msg := wire.CheckText(*in.PaymentMethod, MaxPaymentMethodLen); msg != "" {
			return payAttempt{}, problem.Validation(problem.FieldError{Field: "payment_method", Message: msg})
		}
		return payAttempt{orderID: orderID, paymentMethod: *in.PaymentMethod}, nil
	})
	if err != nil {
		return err
	}
	resp, err := h.svc.pay.RunWith(c.Request().Context(), req, input)
	if err != nil {
		return err
	}
	return resp.Write(c.Response())
}

// Refund handles POST /v1/payments/{id}/refunds.
func (h *Handler) Refund(c echo.Context) error {
	req, input, err := operation.ParseRequest(c, OpRefund, operation.Target{Param: "id", NotFound: "No such payment."}, func(raw []byte, paymentID uuid.UUID) (refundAttempt, error) {
		var in refundRequestJSON
		if err := wire.Decode(raw, &in); err != nil {
			return refundAttempt{}, err
		}
		invalid := problem.Validation(problem.FieldError{Field: "amount", Message: fmt.Sprintf("must be a positive whole number in minor units (at most %d)", int64(MaxRefundAmount))})
		if in.Amount == nil {
			return refundAttempt{}, invalid
		}
		amount, err := in.Amount.Int(1, MaxRefundAmount)
		if err != nil {
			return refundAttempt{}, invalid
		}
		return refundAttempt{paymentID: paymentID, amount: amount}, nil
	})
	if err != nil {
		return err
	}
	resp, err := h.svc.refund.RunWith(c.Request().Context(), req, input)
	if err != nil {
		return err
	}
	return resp.Write(c.Response())
}

type cancelRequestJSON struct {
	OrderID        *string `json:"order_id"`
	IdempotencyKey *string `json:"idempotency_key"`
}

// CancelByKey handles POST /v1/payments/cancel-by-key (cancel.go). Its own
// Idempotency-Key names the cancel, as for every POST; the body names the
// payment's.
func (h *Handler) CancelByKey(c echo.Context) error {
	req, input, err := operation.ParseRequest(c, OpCancel, operation.Target{}, func(raw []byte, _ uuid.UUID) (CancelInput, error) {
		var in cancelRequestJSON
		if err := wire.Decode(raw, &in); err != nil {
			return CancelInput{}, err
		}
		var (
			errs []problem.FieldError
			out  CancelInput
			err  error
		)
		if in.OrderID == nil {
			errs = append(errs, problem.FieldError{Field: "order_id", Message: "is required: the order the payment is for"})
		} else if out.OrderID, err = uuid.Parse(*in.OrderID); err != nil {
			errs = append(errs, problem.FieldError{Field: "order_id", Message: "must be an order's id (a UUID)"})
		}
		if in.IdempotencyKey == nil {
			errs = append(errs, problem.FieldError{Field: "idempotency_key", Message: "is required: the Idempotency-Key of the payment to cancel"})
		} else if out.IdempotencyKey, err = idempotency.KeyOf(*in.IdempotencyKey); err != nil {
			errs = append(errs, problem.FieldError{Field: "idempotency_key", Message: fmt.Sprintf("must be 1 to %d visible ASCII characters", idempotency.MaxKeyLength)})
		}
		if len(errs) > 0 {
			return CancelInput{}, problem.Validation(errs...)
		}
		return out, nil
	})
	if err != nil {
		return err
	}
	resp, err := h.svc.cancel.RunWith(c.Request().Context(), req, input)
	if err != nil {
		return err
	}
	return resp.Write(c.Response())
}

// Get handles GET /v1/payments/{id}.
func (h *Handler) Get(c echo.Context) error {
	id, err := uuid.Parse(c.Param("id"))
	if err != nil {
		return problem.New(problem.NotFound, "No such payment.")
	}
	p, err := h.svc.Get(c.Request().Context(), tenants.FromContext(c).ID, id)
	if errors.Is(err, ErrNotFound) {
		return problem.New(problem.NotFound, "No such payment.")
	}
	if err != nil {
		return err
	}
	return wire.JSON(c, http.StatusOK, paymentJSONFrom(p))
}

// GetRefund handles GET /v1/refunds/{id}.
func (h *Handler) GetRefund(c echo.Context) error {
	id, err := uuid.Parse(c.Param("id"))
	if err != nil {
		return problem.New(problem.NotFound, "No such refund.")
	}
	r, err := h.svc.GetRefund(c.Request().Context(), tenants.FromContext(c).ID, id)
	if errors.Is(err, ErrNotFound) {
		return problem.New(problem.NotFound, "No such refund.")
	}
	if err != nil {
		return err
	}
	return wire.JSON(c, http.StatusOK, refundJSONFrom(r))
}
