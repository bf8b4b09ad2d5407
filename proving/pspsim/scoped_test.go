package pspsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
)

// scopedChargeBody is a charge of one scope (tenant).
func scopedChargeBody(scope, reference string) string {
	var b bytes.Buffer
	_ = json.NewEncoder(&b).Encode(map[string]any{
		"amount": 500, "currency": "EUR", "payment_method": PaymentMethodOK,
		"metadata": map[string]string{"reference": reference, ScopeMetadataKey: scope},
	})
	return b.String()
}

// Faults armed under a scope meet only that scope's charges and refunds:
// another tenant's, and a charge without a scope, pass untouched and leave
// the counters armed. GET with the scope shows them, and they are gone once
// used.
func TestScopedFaultsMeetOnlyTheirScope(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	if r := h.must(http.MethodPut, "/admin/faults?scope=tenant-a", "", `{"fail_next":2}`); r.status != http.StatusOK {
		t.Fatalf("PUT scoped faults: %d %s", r.status, r.body)
	}
	if got := decode[ScopedFaults](t, h.must(http.MethodGet, "/admin/faults?scope=tenant-a", "", "").body); got != (ScopedFaults{Scope: "tenant-a", FailNext: 2}) {
		t.Fatalf("GET scoped faults = %+v", got)
	}
	if got := h.srv.Faults(); got.FailNext != 0 {
		t.Fatalf("a scoped PUT armed the global counter: %+v", got)
	}

	wantCharge(t, h.charge("b-1", scopedChargeBody("tenant-b", "ord-b")))
	wantCharge(t, h.charge("none-1", chargeBody(500, PaymentMethodOK, "ord-none")))
	if got := h.srv.ScopedFaults("tenant-a"); got.FailNext != 2 {
		t.Fatalf("other scopes consumed tenant-a's faults: %+v", got)
	}
	c := wantCharge(t, h.charge("b-2", scopedChargeBody("tenant-b", "ord-b2")))

	wantError(t, h.charge("a-1", scopedChargeBody("tenant-a", "ord-a")), 503, ErrTypeAPI, CodeServiceUnavailable)
	// A refund is scoped by its own metadata: tenant-a's meets the second
	// fault, tenant-b's does not.
	refundOf := func(charge, scope string) string {
		return fmt.Sprintf(`{"charge":%q,"metadata":{%q:%q}}`, charge, ScopeMetadataKey, scope)
	}
	b3 := wantCharge(t, h.charge("b-3", scopedChargeBody("tenant-b", "ord-b3")))
	if r := h.refund("rb-1", refundOf(c.ID, "tenant-b")); r.status != http.StatusOK {
		t.Fatalf("tenant-b's refund: %d %s", r.status, r.body)
	}
	wantError(t, h.refund("ra-1", refundOf(b3.ID, "tenant-a")), 503, ErrTypeAPI, CodeServiceUnavailable)
	if got := h.srv.ScopedFaults("tenant-a"); got.FailNext != 0 || len(h.srv.scoped) != 0 {
		t.Fatalf("after use: %+v, %d scopes kept", got, len(h.srv.scoped))
	}
	wantCharge(t, h.charge("a-1", scopedChargeBody("tenant-a", "ord-a")))
}

// A scoped PUT refuses what it cannot mean, and the number of armed scopes
// is bounded; a reset clears the scoped counters too.
func TestScopedFaultsAreValidatedAndBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	for _, body := range []string{`{"fail_next":-1}`, `{"latency_ms":5}`, `{"scope":"other","fail_next":1}`} {
		if r := h.must(http.MethodPut, "/admin/faults?scope=s", "", body); r.status != http.StatusBadRequest {
			t.Errorf("PUT scoped %s: %d %s, want 400", body, r.status, r.body)
		}
	}
	if r := h.must(http.MethodPut, "/admin/faults?scope=", "", `{"fail_next":1}`); r.status != http.StatusBadRequest {
		t.Errorf("PUT with an empty scope: %d, want 400", r.status)
	}
	for i := range MaxScopes {
		if err := h.srv.SetScopedFaults(ScopedFaults{Scope: fmt.Sprint("s", i), DropNext: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.srv.SetScopedFaults(ScopedFaults{Scope: "one-more", DropNext: 1}); err == nil {
		t.Fatal("armed a scope beyond MaxScopes")
	}
	if err := h.srv.SetScopedFaults(ScopedFaults{Scope: "s0", FailNext: 1}); err != nil {
		t.Fatalf("changing an armed scope at the bound: %v", err)
	}
	h.must(http.MethodPost, "/admin/reset", "", "")
	if n := len(h.srv.scoped); n != 0 {
		t.Fatalf("after reset %d scopes are armed", n)
	}
}
