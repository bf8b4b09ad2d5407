package webhooks

import (
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/wire"
)

// The provider event types the receiver accepts.
const (
	// EventChargeSucceeded finishes a pending payment as succeeded.
	EventChargeSucceeded = "charge.succeeded"
	// EventChargeFailed finishes a pending payment as failed.
	EventChargeFailed = "charge.failed"
	// EventChargeRefunded finishes a pending refund; data.refund is the refund.
	EventChargeRefunded = "charge.refunded"
)

// envelope is the wire form of a provider event. It is an open object
// (wire.DecodeOpen): the provider may add members, and a refused delivery is
// retried until the provider gives up on it. Names match exactly, as
// everywhere: "TYPE" is not "type", and a name twice is refused.
type envelope struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Created int64  `json:"created"`
	Data    struct {
		Object *payments.Charge         `json:"object"`
		Refund *payments.ProviderRefund `json:"refund"`
	} `json:"data"`
}

// event is a validated provider event.
type event struct {
	id      string
	typ     string
	created int64
	charge  payments.Charge
	refund  payments.ProviderRefund // charge.refunded only
}

// parseEvent validates a webhook body. Errors are *problem.Error: 400
// invalid_json for what is not JSON (a name twice in one object included),
// 422 validation_failed for an envelope of the wrong shape, an unknown type,
// or a missing object.
func parseEvent(body []byte) (event, error) {
	var env envelope
	if err := wire.DecodeOpen(body, &env); err != nil {
		return event{}, err
	}
	var fields []problem.FieldError
	if env.ID == "" {
		fields = append(fields, problem.FieldError{Field: "id", Message: "is required"})
	}
	switch env.Type {
	case EventChargeSucceeded, EventChargeFailed, EventChargeRefunded:
	default:
		fields = append(fields, problem.FieldError{Field: "type", Message: "must be charge.succeeded, charge.failed or charge.refunded"})
	}
	ev := event{id: env.ID, typ: env.Type, created: env.Created}
	if env.Data.Object == nil {
		fields = append(fields, problem.FieldError{Field: "data.object", Message: "is required and must be an object"})
	} else {
		ev.charge = *env.Data.Object
		if ev.charge.ID == "" {
			fields = append(fields, problem.FieldError{Field: "data.object.id", Message: "is required"})
		}
		// The payment's outcome is read from the charge's status; it must
		// say what the event type says.
		if (env.Type == EventChargeSucceeded && ev.charge.Status != string(payments.StatusSucceeded)) ||
			(env.Type == EventChargeFailed && ev.charge.Status != string(payments.StatusFailed)) {
			fields = append(fields, problem.FieldError{Field: "data.object.status", Message: "does not match the event type"})
		}
	}
	if env.Type == EventChargeRefunded {
		if env.Data.Refund == nil {
			fields = append(fields, problem.FieldError{Field: "data.refund", Message: "is required for charge.refunded and must be an object"})
		} else if ev.refund = *env.Data.Refund; ev.refund.ID == "" {
			fields = append(fields, problem.FieldError{Field: "data.refund.id", Message: "is required"})
		}
	}
	if len(fields) > 0 {
		return event{}, problem.Validation(fields...)
	}
	return ev, nil
}
