package pspsim

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzChargeRequest posts arbitrary bodies and keys to the charge and refund
// endpoints and checks that, without faults, the simulator never answers
// 5xx, never panics and always answers JSON.
func FuzzChargeRequest(f *testing.F) {
	seeds := []string{
		`{"amount":1234,"currency":"EUR","payment_method":"pm_card_ok","metadata":{"reference":"r"}}`,
		`{"amount":1,"currency":"USD","payment_method":"pm_card_declined"}`,
		`{"amount":1,"currency":"USD","payment_method":"pm_card_insufficient_funds","metadata":{}}`,
		`{"amount":-1,"currency":"eur","payment_method":"x"}`,
		`{"amount":99999999999999999999}`,
		`{"charge":"ch_x","amount":5}`,
		`{"charge":"ch_x"}`,
		`null`, `[]`, `{}`, `{"amount":1e3}`, ``, `{"metadata":{"":""}}`, "\x00\xff",
	}
	for i, s := range seeds {
		f.Add(s, "key", i%2 == 0)
	}
	srv, err := New(Config{}, nil, nil)
	if err != nil {
		f.Fatalf("New: %v", err)
	}
	h := srv.Handler()
	// A known charge so refund bodies can reach the refund logic.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v1/charges", strings.NewReader(`{"amount":500,"currency":"EUR","payment_method":"pm_card_ok"}`))
	req.Header.Set("Idempotency-Key", "seed")
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		f.Fatalf("seed charge: got %d", rec.Code)
	}
	var seeded Charge
	if err := json.Unmarshal(rec.Body.Bytes(), &seeded); err != nil {
		f.Fatalf("seed charge: %v", err)
	}

	f.Fuzz(func(t *testing.T, body, key string, charge bool) {
		path := "/v1/refunds"
		if charge {
			path = "/v1/charges"
		}
		body = strings.ReplaceAll(body, "ch_x", seeded.ID)
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		if key != "" {
			req.Header["Idempotency-Key"] = []string{key}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("POST %s %q: got %d, want < 500: %s", path, body, rec.Code, rec.Body)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("POST %s %q: body is not JSON: %q", path, body, rec.Body)
		}
	})
}
