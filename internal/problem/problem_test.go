package problem_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/oncepay/oncepay/internal/problem"
)

func TestStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code problem.Code
		want int
	}{
		{problem.Unauthorized, 401},
		{problem.IdempotencyKeyMissing, 400},
		{problem.IdempotencyKeyInvalid, 400},
		{problem.IdempotencyKeyReused, 422},
		{problem.RequestInProgress, 409},
		{problem.InvalidJSON, 400},
		{problem.ValidationFailed, 422},
		{problem.RequestTooLarge, 413},
		{problem.NotFound, 404},
		{problem.MethodNotAllowed, 405},
		{problem.CardDeclined, 402},
		{problem.OrderAlreadyPaid, 409},
		{problem.RefundExceedsPayment, 422},
		{problem.PaymentProviderUnavailable, 503},
		{problem.Internal, 500},
		{"no_such_code", 500},
	} {
		if got := problem.Status(tc.code); got != tc.want {
			t.Errorf("Status(%s) = %d, want %d", tc.code, got, tc.want)
		}
	}
}

func TestJSON(t *testing.T) {
	t.Parallel()
	e := problem.Validation(problem.FieldError{Field: "items[0].quantity", Message: "must be <= 1000"})
	var got map[string]any
	if err := json.Unmarshal(e.JSON(), &got); err != nil {
		t.Fatal(err)
	}
	if got["code"] != "validation_failed" || got["status"] != float64(http.StatusUnprocessableEntity) || got["type"] != "urn:oncepay:problem:validation_failed" || got["title"] != http.StatusText(http.StatusUnprocessableEntity) {
		t.Fatalf("body = %v", got)
	}
	if again := problem.Validation(problem.FieldError{Field: "items[0].quantity", Message: "must be <= 1000"}); string(again.JSON()) != string(e.JSON()) {
		t.Fatal("rendering is not deterministic: a stored failure would not replay byte for byte")
	}
	if fields := got["errors"].([]any); fields[0].(map[string]any)["message"] != "must be <= 1000" {
		t.Fatalf("errors = %v", fields)
	}
}

func TestCodeOf(t *testing.T) {
	t.Parallel()
	wrapped := fmt.Errorf("ctx: %w", problem.New(problem.CardDeclined, "no"))
	if problem.CodeOf(wrapped) != problem.CardDeclined {
		t.Fatal("CodeOf does not see through wrapping")
	}
	if problem.CodeOf(errors.New("x")) != problem.Internal {
		t.Fatal("plain errors are not internal")
	}
	cause := errors.New("cause")
	if !errors.Is(&problem.Error{Code: problem.Internal, Err: cause}, cause) {
		t.Fatal("Unwrap does not expose the cause")
	}
}
