package webhooks

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/problem"
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

// envelope is the wire form of a provider event. Unknown fields are allowed:
// the provider may add some, and a refused delivery is retried until the
// provider gives up on it.
type envelope struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Created int64  `json:"created"`
	Data    struct {
		Object json.RawMessage `json:"object"`
		Refund json.RawMessage `json:"refund"`
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
// invalid_json for what is not JSON, 422 validation_failed for an envelope
// of the wrong shape, an unknown type, or a missing object.
func parseEvent(body []byte) (event, error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || !json.Valid(trimmed) {
		return event{}, problem.New(problem.InvalidJSON, "The webhook body is not valid JSON.")
	}
	if trimmed[0] != '{' {
		return event{}, problem.Validation(problem.FieldError{Field: "", Message: "must be a JSON object"})
	}
	var env envelope
	if err := json.Unmarshal(trimmed, &env); err != nil {
		return event{}, shapeError("", err)
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
	if !isObject(env.Data.Object) {
		fields = append(fields, problem.FieldError{Field: "data.object", Message: "is required and must be an object"})
	} else if err := json.Unmarshal(env.Data.Object, &ev.charge); err != nil {
		return event{}, shapeError("data.object", err)
	} else {
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
		if !isObject(env.Data.Refund) {
			fields = append(fields, problem.FieldError{Field: "data.refund", Message: "is required for charge.refunded and must be an object"})
		} else if err := json.Unmarshal(env.Data.Refund, &ev.refund); err != nil {
			return event{}, shapeError("data.refund", err)
		} else if ev.refund.ID == "" {
			fields = append(fields, problem.FieldError{Field: "data.refund.id", Message: "is required"})
		}
	}
	if len(fields) > 0 {
		return event{}, problem.Validation(fields...)
	}
	return ev, nil
}

// isObject reports whether raw is a JSON object (not absent, not null).
func isObject(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && t[0] == '{'
}

// shapeError turns a decoding error of valid JSON into validation_failed
// naming the field, under prefix.
func shapeError(prefix string, err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		field := typeErr.Field
		switch {
		case prefix != "" && field != "":
			field = prefix + "." + field
		case prefix != "":
			field = prefix
		}
		return &problem.Error{
			Code:   problem.ValidationFailed,
			Detail: "The webhook body has invalid fields.",
			Fields: []problem.FieldError{{Field: field, Message: "must not be a JSON " + typeErr.Value}},
			Err:    err,
		}
	}
	return &problem.Error{Code: problem.InvalidJSON, Detail: "The webhook body could not be decoded.", Err: err}
}
