package app_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/client"
	"github.com/oncepay/oncepay/proving/pspsim"
)

// lookupKey sends GET /v1/idempotency-keys/{op}/{key} as apiKey, the key
// URL-encoded.
func (b *testBundle) lookupKey(t *testing.T, apiKey, op, key string) response {
	t.Helper()
	return b.do(t, "GET", "/v1/idempotency-keys/"+op+"/"+url.PathEscape(key), apiKey, "", "")
}

// wantKey checks a lookup's answer: 200, never stored or cached, in state
// state, and returns its body.
func wantKey(t *testing.T, r response, state string) map[string]any {
	t.Helper()
	if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
		t.Fatalf("lookup = %d %s %s, want 200 JSON", r.status, r.header.Get("Content-Type"), r.body)
	}
	if r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("lookup's Cache-Control = %q, want no-store: the state changes", r.header.Get("Cache-Control"))
	}
	m := r.json(t)
	if m["state"] != state {
		t.Fatalf("state = %v, want %s: %s", m["state"], state, r.body)
	}
	return m
}

// A client that lost an answer asks what became of its key instead of
// sending the request again: a key never used, and another tenant's, are
// unknown alike; a finished one is completed with the stored answer's
// status, link and expiry (not the body); a refusal is completed too.
func TestLookUpAKey(t *testing.T) {
	t.Parallel()
	b := setup(t)

	never := wantKey(t, b.lookupKey(t, acme, "orders.create", "never-used"), "unknown")
	if _, ok := never["expires_at"]; ok || never["response"] != nil {
		t.Fatalf("an unknown key has an expiry or a response: %v", never)
	}

	created := b.do(t, "POST", "/v1/orders", acme, "o/1%x?y#z", orderBody)
	if created.status != http.StatusCreated {
		t.Fatalf("create = %d %s", created.status, created.body)
	}
	got := wantKey(t, b.lookupKey(t, acme, "orders.create", "o/1%x?y#z"), "completed")
	resp, _ := got["response"].(map[string]any)
	if resp["status"] != float64(http.StatusCreated) || resp["location"] != created.header.Get("Location") || resp["body"] != nil {
		t.Fatalf("completed key's response = %v, want 201 at %s and no body", got["response"], created.header.Get("Location"))
	}
	expires, err := http.ParseTime(created.header.Get("Idempotency-Expires"))
	if err != nil {
		t.Fatal(err)
	}
	if at, err := time.Parse(time.RFC3339Nano, got["expires_at"].(string)); err != nil || !at.Truncate(time.Second).Equal(expires) {
		t.Fatalf("expires_at = %v, want the answer's Idempotency-Expires %v", got["expires_at"], expires)
	}
	if got["operation"] != "orders.create" || got["key"] != "o/1%x?y#z" {
		t.Fatalf("lookup names %v %v", got["operation"], got["key"])
	}
	// The key is one path segment: an unencoded "/" makes another path.
	wantProblem(t, b.do(t, "GET", "/v1/idempotency-keys/orders.create/o/1%25x%3Fy%23z", acme, "", ""), http.StatusNotFound, "not_found")

	other := b.lookupKey(t, globex, "orders.create", "o/1%x?y#z")
	wantKey(t, other, "unknown")
	if strings.ReplaceAll(string(other.body), `o/1%x?y#z`, "never-used") != string(b.lookupKey(t, acme, "orders.create", "never-used").body) {
		t.Fatalf("another tenant's key reads otherwise than a key never used: %s", other.body)
	}
	wantKey(t, b.lookupKey(t, acme, "payments.create", "o/1%x?y#z"), "unknown") // keys are scoped by operation

	orderID, _ := b.order(t, "o2")
	declined := b.pay(t, orderID, "pay-declined", "pm_card_declined")
	wantProblem(t, declined, http.StatusPaymentRequired, "card_declined")
	refused := wantKey(t, b.lookupKey(t, acme, "payments.create", "pay-declined"), "completed")
	if resp, _ := refused["response"].(map[string]any); resp["status"] != float64(http.StatusPaymentRequired) {
		t.Fatalf("refused key's response = %v, want status 402", refused["response"])
	}

	c := b.apiClient(t, acme)
	st, err := c.LookupKey(context.Background(), "orders.create", "o/1%x?y#z")
	if err != nil || st.State != client.KeyCompleted || st.Response == nil || st.Response.Status != http.StatusCreated ||
		st.Response.Location != created.header.Get("Location") || !st.ExpiresAt.Truncate(time.Second).Equal(expires) {
		t.Fatalf("client LookupKey = %+v, %v", st, err)
	}
	if st, err := c.LookupKey(context.Background(), "orders.create", "never-used"); err != nil || st.State != client.KeyUnknown {
		t.Fatalf("client LookupKey of an unused key = %+v, %v", st, err)
	}
}

// While its attempt runs, a key is in progress with the Retry-After a retry
// would get; after the attempt ended without an outcome (the provider's
// answer was lost), it is in progress still, and the retry it asks for
// finishes the payment.
func TestLookUpAKeyInProgress(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orderID, _ := b.order(t, "o1")
	b.faults(t, pspsim.Faults{TimeoutNext: 1})
	done := make(chan response, 1)
	go func() { done <- b.pay(t, orderID, "pay-1", "pm_card_ok") }()

	deadline := time.Now().Add(10 * time.Second)
	var r response
	for {
		r = b.lookupKey(t, acme, "payments.create", "pay-1")
		if r.json(t)["state"] != "unknown" || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond) // polling a condition with a deadline
	}
	live := wantKey(t, r, "in_progress")
	if r.header.Get("Retry-After") != "2" || live["retry_after"] != float64(2) {
		t.Fatalf("in-flight key: Retry-After %q, retry_after %v; want 2, what a retry is told", r.header.Get("Retry-After"), live["retry_after"])
	}
	if _, ok := live["expires_at"]; !ok || live["response"] != nil {
		t.Fatalf("in-flight key = %s, want an expiry and no response", r.body)
	}

	first := <-done
	wantProblem(t, first, http.StatusServiceUnavailable, "payment_provider_unavailable")
	r = b.lookupKey(t, acme, "payments.create", "pay-1")
	wantKey(t, r, "in_progress")
	if r.header.Get("Retry-After") != "1" {
		t.Fatalf("abandoned key's Retry-After = %q, want 1: its retry resumes it now", r.header.Get("Retry-After"))
	}
	if retry := b.pay(t, orderID, "pay-1", "pm_card_ok"); retry.status != http.StatusCreated {
		t.Fatalf("retry = %d %s", retry.status, retry.body)
	}
	wantKey(t, b.lookupKey(t, acme, "payments.create", "pay-1"), "completed")
	if n := b.allCharges(); n != 1 {
		t.Fatalf("provider charges = %d, want 1", n)
	}
}

// What a lookup refuses, each with its problem: an operation the service
// does not have, a key that is not one, no
// tenant.
func TestLookUpAKeyRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wantProblem(t, b.lookupKey(t, acme, "orders.nope", "k"), http.StatusNotFound, "not_found")
	wantProblem(t, b.do(t, "GET", "/v1/idempotency-keys/orders.create/", acme, "", ""), http.StatusNotFound, "not_found") // no key, no such path
	wantProblem(t, b.lookupKey(t, acme, "orders.create", strings.Repeat("k", 256)), http.StatusBadRequest, "idempotency_key_invalid")
	wantProblem(t, b.lookupKey(t, acme, "orders.create", "caf\u00e9"), http.StatusBadRequest, "idempotency_key_invalid")
	wantProblem(t, b.lookupKey(t, "", "orders.create", "k"), http.StatusUnauthorized, "unauthorized")
	wantKey(t, b.lookupKey(t, acme, "orders.create", strings.Repeat("k", 255)), "unknown")
}
