// The HTTP plumbing of the simulator's API: the Idempotency-Key header,
// bodies read within their bound, and answers and errors written as JSON.

package pspsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// idempotencyKey extracts the required Idempotency-Key header.
func idempotencyKey(r *http.Request) (string, *apiError) {
	vals, ok := r.Header[http.CanonicalHeaderKey("Idempotency-Key")]
	if !ok {
		return "", &apiError{Type: ErrTypeIdempotency, Code: CodeIdempotencyKeyMissing, status: http.StatusBadRequest,
			Message: "POST requests require an Idempotency-Key header"}
	}
	key := ""
	if len(vals) > 0 {
		key = vals[0]
	}
	if strings.TrimSpace(key) == "" || len(key) > MaxIdempotencyKeyLen || len(vals) != 1 {
		return "", &apiError{Type: ErrTypeIdempotency, Code: CodeIdempotencyKeyInvalid, status: http.StatusBadRequest,
			Message: fmt.Sprintf("Idempotency-Key must be one non-blank value of at most %d bytes", MaxIdempotencyKeyLen)}
	}
	return key, nil
}

// decodeBody decodes exactly one JSON value into dst, refusing unknown
// fields, trailing data and oversized bodies with a 4xx error.
func decodeBody(w http.ResponseWriter, r *http.Request, dst any) *apiError {
	body := http.MaxBytesReader(w, r.Body, maxBodyBytes)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(dst)
	if err == nil {
		if extra := dec.Decode(&json.RawMessage{}); !errors.Is(extra, io.EOF) {
			err = errors.New("request body must contain a single JSON object")
			if mbe := (*http.MaxBytesError)(nil); errors.As(extra, &mbe) {
				err = extra
			}
		}
	}
	if err == nil {
		return nil
	}
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
		return &apiError{Type: ErrTypeInvalidRequest, Code: CodeRequestTooLarge, status: http.StatusRequestEntityTooLarge,
			Message: fmt.Sprintf("request body exceeds %d bytes", mbe.Limit)}
	}
	return invalidRequest(CodeInvalidJSON, "", fmt.Sprintf("invalid request body: %v", err))
}

// invalidRequest builds a 400 invalid_request_error.
func invalidRequest(code, param, msg string) *apiError {
	return &apiError{Type: ErrTypeInvalidRequest, Code: code, Param: param, Message: msg, status: http.StatusBadRequest}
}

// errorResponse turns e into a response with its status.
func errorResponse(e *apiError) response {
	return response{status: e.status, body: mustJSON(errorBody{Error: e})}
}

// writeResponse writes resp. key, when non-empty, is echoed back, and
// idempotent responses carry Idempotent-Replayed so the merchant can tell a
// replay from a first answer.
func writeResponse(w http.ResponseWriter, key string, resp response) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if key != "" {
		h.Set("Idempotency-Key", key)
	}
	if resp.idempotent {
		h.Set("Idempotent-Replayed", strconv.FormatBool(resp.replayed))
	}
	w.WriteHeader(resp.status)
	_, _ = w.Write(resp.body)
}

// writeJSON writes v as a JSON response.
func writeJSON(w http.ResponseWriter, status int, v any) {
	writeResponse(w, "", response{status: status, body: mustJSON(v)})
}
