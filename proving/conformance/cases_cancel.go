package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// cancellation is the answer of POST /v1/payments/cancel-by-key.
type cancellation struct {
	Outcome   string `json:"outcome"`
	PaymentID string `json:"payment_id"`
	RefundID  string `json:"refund_id"`
}

// cancelByKey gives up, under cancelKey, on the payment of orderID asked
// for (or to be asked for) under payKey, and checks the answer's status and
// outcome.
func (k *kit) cancelByKey(ctx context.Context, cancelKey, orderID, payKey string, status int, outcome string) (exchange, cancellation, error) {
	body := fmt.Sprintf(`{"order_id":%q,"idempotency_key":%q}`, orderID, payKey)
	x, err := k.post(ctx, k.keys[0], "/v1/payments/cancel-by-key", cancelKey, body)
	if err != nil {
		return x, cancellation{}, err
	}
	if err := want(x, status); err != nil {
		return x, cancellation{}, err
	}
	var c cancellation
	if err := json.Unmarshal(x.body, &c); err != nil || c.Outcome != outcome {
		return x, c, fmt.Errorf("%v: want the outcome %s", x, outcome)
	}
	return x, c, nil
}

// cancelByKeyIsStored: a cancel before its payment arrived is prevented,
// its retry replays that answer, and the payment, when it comes under its
// key, is refused with payment_cancelled and the key reads cancelled; a
// cancel of a payment that succeeded starts its refund.
func cancelByKeyIsStored(ctx context.Context, k *kit) error {
	orderID, _, err := k.createOrder(ctx, k.keys[0])
	if err != nil {
		return err
	}
	payKey, cancelKey := k.key("give-up-pay"), k.key("give-up")
	first, _, err := k.cancelByKey(ctx, cancelKey, orderID, payKey, http.StatusOK, "prevented")
	if err != nil {
		return err
	}
	again, _, err := k.cancelByKey(ctx, cancelKey, orderID, payKey, http.StatusOK, "prevented")
	if err != nil {
		return err
	}
	if !again.replayed() || !bytes.Equal(again.body, first.body) {
		return fmt.Errorf("the cancel's retry: %v, want the first answer replayed (Idempotent-Replayed: true)", again)
	}
	x, err := k.post(ctx, k.keys[0], "/v1/orders/"+orderID+"/payments", payKey, payOK)
	if err != nil {
		return err
	}
	if err := wantProblem(x, http.StatusConflict, "payment_cancelled"); err != nil {
		return fmt.Errorf("the payment after its cancel: %w", err)
	}
	st, err := k.lookUp(ctx, k.keys[0], "payments.create", payKey)
	if err != nil {
		return err
	}
	if st.State != "cancelled" {
		return fmt.Errorf("the cancelled payment key reads %q, want cancelled", st.State)
	}

	paidID, _, err := k.createOrder(ctx, k.keys[0])
	if err != nil {
		return err
	}
	paidKey := k.key("give-up-paid")
	if x, err = k.post(ctx, k.keys[0], "/v1/orders/"+paidID+"/payments", paidKey, payOK); err != nil {
		return err
	}
	if err := want(x, http.StatusCreated); err != nil {
		return err
	}
	_, c, err := k.cancelByKey(ctx, k.key("give-up"), paidID, paidKey, http.StatusAccepted, "refund_started")
	if err != nil {
		return err
	}
	if c.RefundID == "" || c.PaymentID == "" {
		return fmt.Errorf("refund_started names payment %q and refund %q, want both", c.PaymentID, c.RefundID)
	}
	return nil
}
