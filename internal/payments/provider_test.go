package payments_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/proving/pspsim"
)

// simulator starts the provider simulator behind a loopback HTTP server
// (httptest binds 127.0.0.1), requiring apiKey, and returns its URL.
func simulator(t *testing.T, apiKey string) (string, *pspsim.Server) {
	t.Helper()
	srv, err := pspsim.New(pspsim.Config{APIKey: apiKey}, nil, time.Now)
	if err != nil {
		t.Fatalf("pspsim.New: %v", err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts.URL, srv
}

// wantUnknown fails unless err is an unknown outcome: the attempt stays
// pending for a retry, never finished as failed.
func wantUnknown(t *testing.T, what string, err error) {
	t.Helper()
	var rejected *payments.RejectedError
	if errors.As(err, &rejected) || !errors.Is(err, payments.ErrOutcomeUnknown) {
		t.Fatalf("%s: error %v, want an unknown outcome (not a refusal)", what, err)
	}
}

// wantRejected fails unless err is a definite refusal with status.
func wantRejected(t *testing.T, what string, err error, status int) {
	t.Helper()
	var rejected *payments.RejectedError
	if !errors.As(err, &rejected) || rejected.Status != status {
		t.Fatalf("%s: error %v, want a refusal with status %d", what, err, status)
	}
}

// Only an answer that says the request itself is wrong is a refusal, which
// finishes an attempt as failed for good. Our own credentials being wrong,
// a failed lookup, or the provider's idempotency error leave the outcome
// unknown: finishing a refund as failed there would free its amount for
// another refund while the first may have moved money.
func TestProviderRefusesOnlyWrongRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, _ := simulator(t, "sk_right")
	right := payments.NewProvider(url, payments.WithAPIKey("sk_right"))
	wrong := payments.NewProvider(url, payments.WithAPIKey("sk_wrong"))
	meta := map[string]string{"reference": "0196f7a4-0000-7000-8000-000000000001"}

	charge, err := right.CreateCharge(ctx, "k-charge", 1000, "EUR", "pm_card_ok", meta)
	if err != nil || charge.Status != string(payments.StatusSucceeded) {
		t.Fatalf("CreateCharge = %+v, %v; want a succeeded charge", charge, err)
	}

	// 401: our credentials, not the customer's request.
	_, err = wrong.CreateCharge(ctx, "k-charge-2", 1000, "EUR", "pm_card_ok", meta)
	wantUnknown(t, "CreateCharge with a wrong API key", err)
	_, err = wrong.CreateRefund(ctx, "k-refund", charge.ID, 100, meta)
	wantUnknown(t, "CreateRefund with a wrong API key", err)
	_, err = wrong.FindCharge(ctx, meta["reference"])
	wantUnknown(t, "FindCharge with a wrong API key", err)
	_, err = wrong.FindRefund(ctx, meta["reference"], "0196f7a4-0000-7000-8000-000000000002")
	wantUnknown(t, "FindRefund with a wrong API key", err)

	// 422 idempotency_key_reused: the same provider key with another
	// request is a bug of ours, not a refusal.
	_, err = right.CreateRefund(ctx, "k-refund-reused", charge.ID, 100, meta)
	if err != nil {
		t.Fatalf("CreateRefund: %v", err)
	}
	_, err = right.CreateRefund(ctx, "k-refund-reused", charge.ID, 200, meta)
	wantUnknown(t, "CreateRefund reusing a provider key", err)

	// The request itself is wrong: definite refusals.
	_, err = right.CreateRefund(ctx, "k-refund-big", charge.ID, 5000, meta)
	wantRejected(t, "CreateRefund of more than the charge", err, 400)
	_, err = right.CreateRefund(ctx, "k-refund-none", "ch_no_such_charge", 100, meta)
	wantRejected(t, "CreateRefund of no such charge", err, 404)
	_, err = right.CreateCharge(ctx, "k-charge-bad", 1000, "EUR", "pm_no_such_method", meta)
	wantRejected(t, "CreateCharge with an unknown payment method", err, 400)
}

// A 404 or 400 that is not the provider's (a wrong PSP_URL, a proxy) says
// nothing about the request: neither a POST nor a lookup is refused by it.
func TestForeign4xxIsNoRefusal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, status := range []int{http.StatusNotFound, http.StatusBadRequest} {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, http.StatusText(status), status)
		}))
		t.Cleanup(ts.Close)
		p := payments.NewProvider(ts.URL, payments.WithAPIKey("sk_test"))
		ref := "0196f7a4-0000-7000-8000-000000000001"
		_, err := p.CreateCharge(ctx, "k-charge", 1000, "EUR", "pm_card_ok", map[string]string{"reference": ref})
		wantUnknown(t, fmt.Sprintf("CreateCharge answered a bare %d", status), err)
		_, err = p.CreateRefund(ctx, "k-refund", "ch_1", 100, map[string]string{"reference": ref})
		wantUnknown(t, fmt.Sprintf("CreateRefund answered a bare %d", status), err)
		_, err = p.FindCharge(ctx, ref)
		wantUnknown(t, fmt.Sprintf("FindCharge answered a bare %d", status), err)
		_, err = p.FindRefund(ctx, ref, ref)
		wantUnknown(t, fmt.Sprintf("FindRefund answered a bare %d", status), err)
	}
}

// A lookup the provider refuses as an invalid request still tells nothing
// about the outcome it looks for: never a refusal of the attempt.
func TestRefusedLookupIsNoRefusal(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error":{"type":"invalid_request_error","code":"resource_missing"}}`)
	}))
	t.Cleanup(ts.Close)
	p := payments.NewProvider(ts.URL, payments.WithAPIKey("sk_test"))
	ref := "0196f7a4-0000-7000-8000-000000000001"
	_, err := p.FindCharge(context.Background(), ref)
	wantUnknown(t, "FindCharge answered 404 resource_missing", err)
	_, err = p.FindRefund(context.Background(), ref, ref)
	wantUnknown(t, "FindRefund answered 404 resource_missing", err)
}

// Go's http.Transport silently sends a POST again when a kept-alive
// connection fails before the answer and the request carries an
// Idempotency-Key header. Harmless for money (the provider replays its
// stored answer), but a retry nobody sees: no log line, no metric, and
// whether a lost answer surfaces would depend on connection reuse. The
// provider client turns it off; a lost answer is always an unknown outcome,
// resumed by the client's retry or the recoverer.
func TestLostAnswerIsNotRetriedByTheTransport(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, srv := simulator(t, "sk_test")
	p := payments.NewProvider(url, payments.WithAPIKey("sk_test"))
	meta := map[string]string{"reference": "0196f7a4-0000-7000-8000-000000000001"}
	if _, err := p.CreateCharge(ctx, "k-warm", 1000, "EUR", "pm_card_ok", meta); err != nil {
		t.Fatalf("CreateCharge: %v", err) // the connection is kept alive now
	}
	if err := srv.SetFaults(pspsim.Faults{DropNext: 1}); err != nil {
		t.Fatal(err)
	}
	meta = map[string]string{"reference": "0196f7a4-0000-7000-8000-000000000002"}
	_, err := p.CreateCharge(ctx, "k-dropped", 1000, "EUR", "pm_card_ok", meta)
	wantUnknown(t, "CreateCharge whose answer was dropped on a kept-alive connection", err)
	if n := len(srv.Ledger(meta["reference"]).Charges); n != 1 {
		t.Fatalf("charges = %d, want 1 (charged, then the answer dropped)", n)
	}
}

// A redirect is not followed (a 303 would turn the POST into a GET whose 200
// reads like a charge), and a 200 that is no charge we know is no answer:
// both leave the outcome unknown.
func TestRedirectOrUnknownStatusIsNoAnswer(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/charges":
			if r.Header.Get("Idempotency-Key") == "k-odd" {
				fmt.Fprint(w, `{"id":"ch_1","amount":1000,"currency":"EUR","status":"requires_action"}`)
				return
			}
			http.Redirect(w, r, "/elsewhere", http.StatusSeeOther)
		default: // what a followed redirect would read
			fmt.Fprint(w, `{"id":"ch_1","amount":1000,"currency":"EUR","status":"succeeded"}`)
		}
	}))
	t.Cleanup(ts.Close)
	p := payments.NewProvider(ts.URL, payments.WithAPIKey("sk_test"))
	meta := map[string]string{"reference": "0196f7a4-0000-7000-8000-000000000001"}
	_, err := p.CreateCharge(context.Background(), "k-redirected", 1000, "EUR", "pm_card_ok", meta)
	wantUnknown(t, "CreateCharge answered 303", err)
	_, err = p.CreateCharge(context.Background(), "k-odd", 1000, "EUR", "pm_card_ok", meta)
	wantUnknown(t, "CreateCharge answered a charge with status requires_action", err)
}

// The API key travels as a bearer token when one is configured, and no
// Authorization header is sent without one.
func TestProviderSendsTheAPIKeyOnlyWhenGiven(t *testing.T) {
	t.Parallel()
	got := make(chan []string, 2)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Values("Authorization")
		http.Error(w, "no", http.StatusServiceUnavailable)
	}))
	t.Cleanup(ts.Close)
	for _, c := range []struct {
		p    *payments.Provider
		want string
	}{
		{payments.NewProvider(ts.URL), ""},
		{payments.NewProvider(ts.URL, payments.WithAPIKey("sk_test")), "Bearer sk_test"},
	} {
		_, _ = c.p.FindCharge(context.Background(), "0196f7a4-0000-7000-8000-000000000001")
		h := <-got
		if (c.want == "" && len(h) != 0) || (c.want != "" && (len(h) != 1 || h[0] != c.want)) {
			t.Fatalf("Authorization %q, want %q", h, c.want)
		}
	}
}

// A provider that does not answer within the timeout leaves the outcome
// unknown: the call returns, and nothing is assumed.
func TestProviderTimeoutIsAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release // no answer until the test is over; the client gives up first
	}))
	t.Cleanup(ts.Close)
	t.Cleanup(func() { close(release) }) // runs before ts.Close
	p := payments.NewProvider(ts.URL, payments.WithTimeout(50*time.Millisecond))
	_, err := p.CreateCharge(context.Background(), "k-charge", 1000, "EUR", "pm_card_ok", map[string]string{"reference": "0196f7a4-0000-7000-8000-000000000001"})
	wantUnknown(t, "CreateCharge past its timeout", err)
}
