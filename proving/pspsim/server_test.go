package pspsim

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/testkit"
)

func TestChargeSucceeds(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})

	r := h.charge("key-ok", `{"amount":1234,"currency":"EUR","payment_method":"pm_card_ok","metadata":{"reference":"ord_1","tenant":"t1"}}`)
	ch := wantCharge(t, r)
	if !strings.HasPrefix(ch.ID, "ch_") || len(ch.ID) != len("ch_")+26 {
		t.Fatalf("id: got %q, want ch_ + 26 chars", ch.ID)
	}
	if ch.Object != "charge" || ch.Amount != 1234 || ch.Currency != "EUR" || ch.PaymentMethod != "pm_card_ok" {
		t.Fatalf("charge fields: got %+v", ch)
	}
	if ch.Status != "succeeded" || ch.FailureCode != nil || ch.AmountRefunded != 0 {
		t.Fatalf("charge outcome: got status %q failure %v refunded %d", ch.Status, ch.FailureCode, ch.AmountRefunded)
	}
	if ch.Metadata["reference"] != "ord_1" || ch.Metadata["tenant"] != "t1" {
		t.Fatalf("metadata: got %v", ch.Metadata)
	}
	if ch.IdempotencyKey != "key-ok" {
		t.Fatalf("idempotency_key: got %q, want key-ok", ch.IdempotencyKey)
	}
	if got, want := ch.Created, h.clock.Now().Unix(); got != want {
		t.Fatalf("created: got %d, want %d", got, want)
	}
	if got := r.header.Get("Idempotent-Replayed"); got != "false" {
		t.Fatalf("Idempotent-Replayed: got %q, want false", got)
	}
	if got := r.header.Get("Content-Type"); got != "application/json" {
		t.Fatalf("Content-Type: got %q", got)
	}
	if !strings.Contains(string(r.body), `"failure_code":null`) {
		t.Fatalf("body must carry failure_code null: %s", r.body)
	}

	got := wantCharge(t, h.must(http.MethodGet, "/v1/charges/"+ch.ID, "", ""))
	if got.ID != ch.ID || got.Amount != ch.Amount {
		t.Fatalf("GET charge: got %+v, want %+v", got, ch)
	}
	wantError(t, h.must(http.MethodGet, "/v1/charges/ch_nope", "", ""), 404, ErrTypeInvalidRequest, CodeResourceMissing)

	l := h.ledger("")
	if len(l.Charges) != 1 || l.Charges[0].ID != ch.ID || l.Charges[0].IdempotencyKey != "key-ok" {
		t.Fatalf("ledger: got %+v, want the one charge", l)
	}
	if l.Refunds == nil {
		t.Fatalf("ledger refunds: got nil, want empty list")
	}
}

func TestHealthz(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	if r := h.must(http.MethodGet, "/healthz", "", ""); r.status != http.StatusOK {
		t.Fatalf("healthz: got %d, want 200", r.status)
	}
}

func TestDeclineIsRecordedWith402(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ pm, code string }{
		{PaymentMethodDeclined, CodeCardDeclined},
		{PaymentMethodInsufficientFunds, CodeInsufficientFunds},
	} {
		t.Run(tc.pm, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Config{})
			r := h.charge("k1", chargeBody(500, tc.pm, "ord_d"))
			e := wantError(t, r, http.StatusPaymentRequired, ErrTypeCard, tc.code)
			if !strings.HasPrefix(e.Error.Charge, "ch_") {
				t.Fatalf("error.charge: got %q, want a charge id", e.Error.Charge)
			}
			if e.Error.DeclineCode != tc.code {
				t.Fatalf("decline_code: got %q, want %q", e.Error.DeclineCode, tc.code)
			}
			l := h.ledger("ord_d")
			if len(l.Charges) != 1 {
				t.Fatalf("ledger charges: got %d, want 1", len(l.Charges))
			}
			c := l.Charges[0]
			if c.ID != e.Error.Charge || c.Status != StatusFailed || c.FailureCode == nil || *c.FailureCode != tc.code {
				t.Fatalf("recorded charge: got %+v", c)
			}
			// A replay gives the same 402 and the same failed charge.
			r2 := h.charge("k1", chargeBody(500, tc.pm, "ord_d"))
			e2 := wantError(t, r2, http.StatusPaymentRequired, ErrTypeCard, tc.code)
			if e2.Error.Charge != e.Error.Charge || r2.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("replayed decline: got charge %q replayed %q, want %q true",
					e2.Error.Charge, r2.header.Get("Idempotent-Replayed"), e.Error.Charge)
			}
			if n := len(h.ledger("").Charges); n != 1 {
				t.Fatalf("ledger after replay: got %d charges, want 1", n)
			}
		})
	}
}

func TestValidationErrorsRecordNothingAndKeepKeyFree(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, key, body string
		status          int
		typ, code       string
	}{
		{"missing key", "", chargeBody(100, PaymentMethodOK, "r"), 400, ErrTypeIdempotency, CodeIdempotencyKeyMissing},
		{"blank key", " ", chargeBody(100, PaymentMethodOK, "r"), 400, ErrTypeIdempotency, CodeIdempotencyKeyInvalid},
		{"long key", strings.Repeat("k", 256), chargeBody(100, PaymentMethodOK, "r"), 400, ErrTypeIdempotency, CodeIdempotencyKeyInvalid},
		{"bad json", "k", `{"amount":`, 400, ErrTypeInvalidRequest, CodeInvalidJSON},
		{"empty body", "k", ``, 400, ErrTypeInvalidRequest, CodeInvalidJSON},
		{"trailing data", "k", chargeBody(100, PaymentMethodOK, "r") + `{}`, 400, ErrTypeInvalidRequest, CodeInvalidJSON},
		{"unknown field", "k", `{"amount":1,"currency":"EUR","payment_method":"pm_card_ok","capture":true}`, 400, ErrTypeInvalidRequest, CodeInvalidJSON},
		{"fractional amount", "k", `{"amount":1.5,"currency":"EUR","payment_method":"pm_card_ok"}`, 400, ErrTypeInvalidRequest, CodeInvalidJSON},
		{"zero amount", "k", chargeBody(0, PaymentMethodOK, "r"), 400, ErrTypeInvalidRequest, CodeInvalidAmount},
		{"negative amount", "k", chargeBody(-5, PaymentMethodOK, "r"), 400, ErrTypeInvalidRequest, CodeInvalidAmount},
		{"huge amount", "k", chargeBody(MaxAmount+1, PaymentMethodOK, "r"), 400, ErrTypeInvalidRequest, CodeAmountTooLarge},
		{"lower-case currency", "k", `{"amount":1,"currency":"eur","payment_method":"pm_card_ok"}`, 400, ErrTypeInvalidRequest, CodeInvalidCurrency},
		{"long currency", "k", `{"amount":1,"currency":"EURO","payment_method":"pm_card_ok"}`, 400, ErrTypeInvalidRequest, CodeInvalidCurrency},
		{"missing pm", "k", `{"amount":1,"currency":"EUR"}`, 400, ErrTypeInvalidRequest, CodeParameterMissing},
		{"unknown pm", "k", chargeBody(100, "pm_card_visa", "r"), 400, ErrTypeInvalidRequest, CodeInvalidPaymentMethod},
		{"non-string metadata", "k", `{"amount":1,"currency":"EUR","payment_method":"pm_card_ok","metadata":{"n":1}}`, 400, ErrTypeInvalidRequest, CodeInvalidJSON},
		{"too large", "k", `{"amount":1,"currency":"EUR","payment_method":"pm_card_ok","metadata":{"a":"` + strings.Repeat("x", maxBodyBytes) + `"}}`, 413, ErrTypeInvalidRequest, CodeRequestTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Config{})
			wantError(t, h.charge(tc.key, tc.body), tc.status, tc.typ, tc.code)
			if n := len(h.ledger("").Charges); n != 0 {
				t.Fatalf("ledger: got %d charges, want 0", n)
			}
			if strings.TrimSpace(tc.key) == "" || len(tc.key) > MaxIdempotencyKeyLen {
				return
			}
			// The key was not stored: a valid request with it charges.
			wantCharge(t, h.charge(tc.key, chargeBody(100, PaymentMethodOK, "r")))
		})
	}
}

func TestSameKeyReplays(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	first := h.charge("order-42", `{"amount":990,"currency":"USD","payment_method":"pm_card_ok","metadata":{"reference":"ord_42","a":"1"}}`)
	c1 := wantCharge(t, first)
	// Same request, different formatting and key order: still a replay.
	second := h.charge("order-42", "{ \"metadata\": {\"a\":\"1\", \"reference\":\"ord_42\"},\n \"payment_method\":\"pm_card_ok\", \"currency\":\"USD\", \"amount\": 990 }")
	c2 := wantCharge(t, second)
	if c2.ID != c1.ID {
		t.Fatalf("replay id: got %s, want %s", c2.ID, c1.ID)
	}
	if got := second.header.Get("Idempotent-Replayed"); got != "true" {
		t.Fatalf("Idempotent-Replayed: got %q, want true", got)
	}
	if string(second.body) != string(first.body) {
		t.Fatalf("replay body differs:\n got %s\nwant %s", second.body, first.body)
	}
	if n := len(h.ledger("ord_42").Charges); n != 1 {
		t.Fatalf("ledger: got %d charges, want 1", n)
	}
}

func TestSameKeyDifferentRequestIs422(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	wantCharge(t, h.charge("k", chargeBody(100, PaymentMethodOK, "ord_x")))
	wantError(t, h.charge("k", chargeBody(101, PaymentMethodOK, "ord_x")), 422, ErrTypeIdempotency, CodeIdempotencyKeyReused)
	// The same key on another endpoint is a different request too.
	wantError(t, h.refund("k", `{"charge":"ch_x"}`), 422, ErrTypeIdempotency, CodeIdempotencyKeyReused)
	if n := len(h.ledger("").Charges); n != 1 {
		t.Fatalf("ledger: got %d charges, want 1", n)
	}
}

func TestConcurrentSameKeyChargesOnce(t *testing.T) {
	t.Parallel()
	// Latency keeps the first request in flight so others likely overlap.
	h := newHarness(t, Config{Faults: Faults{LatencyMS: 50}})
	const n = 16
	body := chargeBody(700, PaymentMethodOK, "ord_c")
	start := make(chan struct{})
	var wg sync.WaitGroup
	replies := make([]reply, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			replies[i], errs[i] = h.do(nil, http.MethodPost, "/v1/charges", "same-key", body)
		})
	}
	close(start)
	wg.Wait()
	ids := map[string]bool{}
	for i, r := range replies {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		switch r.status {
		case http.StatusOK:
			ids[decode[Charge](t, r.body).ID] = true
		case http.StatusConflict:
			wantError(t, r, 409, ErrTypeIdempotency, CodeIdempotencyKeyInUse)
		default:
			t.Fatalf("request %d: status %d, want 200 or 409: %s", i, r.status, r.body)
		}
	}
	if len(ids) != 1 {
		t.Fatalf("got charge ids %v, want exactly one", ids)
	}
	l := h.ledger("ord_c")
	if len(l.Charges) != 1 {
		t.Fatalf("ledger: got %d charges, want 1", len(l.Charges))
	}
	// After the dust settles the key replays.
	r := h.charge("same-key", body)
	if c := wantCharge(t, r); c.ID != l.Charges[0].ID || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay after race: got %s, want %s replayed", c.ID, l.Charges[0].ID)
	}
}

func TestKeyInFlightIs409(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Faults: Faults{LatencyMS: 500}})
	body := chargeBody(300, PaymentMethodOK, "ord_409")
	first := make(chan reply, 1)
	go func() { first <- h.must(http.MethodPost, "/v1/charges", "busy", body) }()
	testkit.WaitFor(t, 15*time.Second, "the first request to hold its key", func() bool {
		h.srv.mu.Lock()
		defer h.srv.mu.Unlock()
		e, ok := h.srv.keys["busy"]
		return ok && e.inFlight
	})
	wantError(t, h.charge("busy", body), 409, ErrTypeIdempotency, CodeIdempotencyKeyInUse)
	// A different request under the busy key is a reuse, not a wait.
	wantError(t, h.charge("busy", chargeBody(301, PaymentMethodOK, "ord_409")), 422, ErrTypeIdempotency, CodeIdempotencyKeyReused)
	c := wantCharge(t, <-first)
	if l := h.ledger("ord_409"); len(l.Charges) != 1 || l.Charges[0].ID != c.ID {
		t.Fatalf("ledger: got %+v, want only %s", l.Charges, c.ID)
	}
}

func TestKeyRetentionExpiryCreatesSecondCharge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		retention time.Duration
		want      time.Duration
	}{
		{"default 24h", 0, 24 * time.Hour},
		{"configured 1h", time.Hour, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Config{KeyRetention: tc.retention})
			body := chargeBody(2500, PaymentMethodOK, "ord_exp")
			c1 := wantCharge(t, h.charge("k-exp", body))

			h.clock.Advance(tc.want - time.Second)
			r := h.charge("k-exp", body)
			if c := wantCharge(t, r); c.ID != c1.ID || r.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("before expiry: got %s replayed %q, want %s true", c.ID, r.header.Get("Idempotent-Replayed"), c1.ID)
			}

			// Once the provider forgets the key, the same request charges
			// again: the merchant must look up by reference first.
			h.clock.Advance(time.Second)
			r = h.charge("k-exp", body)
			c2 := wantCharge(t, r)
			if c2.ID == c1.ID || r.header.Get("Idempotent-Replayed") != "false" {
				t.Fatalf("after expiry: got %s replayed %q, want a new charge", c2.ID, r.header.Get("Idempotent-Replayed"))
			}
			l := h.ledger("ord_exp")
			if len(l.Charges) != 2 || l.Charges[0].ID != c1.ID || l.Charges[1].ID != c2.ID {
				t.Fatalf("ledger: got %+v, want both charges oldest first", l.Charges)
			}
			if l.Charges[0].IdempotencyKey != "k-exp" || l.Charges[1].IdempotencyKey != "k-exp" {
				t.Fatalf("ledger keys: got %q and %q", l.Charges[0].IdempotencyKey, l.Charges[1].IdempotencyKey)
			}
		})
	}
}

func TestLookupByReference(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	a1 := wantCharge(t, h.charge("1", chargeBody(100, PaymentMethodOK, "ref_a")))
	wantCharge(t, h.charge("2", chargeBody(200, PaymentMethodOK, "ref_b")))
	h.clock.Advance(time.Minute)
	e := wantError(t, h.charge("3", chargeBody(300, PaymentMethodDeclined, "ref_a")), 402, ErrTypeCard, CodeCardDeclined)

	type list struct {
		Data []Charge `json:"data"`
	}
	r := h.must(http.MethodGet, "/v1/charges?reference=ref_a", "", "")
	got := decode[list](t, r.body).Data
	if len(got) != 2 || got[0].ID != a1.ID || got[1].ID != e.Error.Charge {
		t.Fatalf("reference lookup: got %+v, want [%s %s]", got, a1.ID, e.Error.Charge)
	}
	r = h.must(http.MethodGet, "/v1/charges?reference=nope", "", "")
	if string(r.body) != `{"data":[]}` {
		t.Fatalf("unknown reference: got %s, want empty data", r.body)
	}
	r = h.must(http.MethodGet, "/v1/charges", "", "")
	if n := len(decode[list](t, r.body).Data); n != 3 {
		t.Fatalf("unfiltered list: got %d, want 3", n)
	}
}

func TestFailNextAnswers503BeforeCharging(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	if r := h.must(http.MethodPut, "/admin/faults", "", `{"fail_next":2}`); r.status != http.StatusOK {
		t.Fatalf("PUT faults: got %d: %s", r.status, r.body)
	}
	body := chargeBody(800, PaymentMethodOK, "ord_f")
	for range 2 {
		wantError(t, h.charge("k-fail", body), 503, ErrTypeAPI, CodeServiceUnavailable)
		if n := len(h.ledger("").Charges); n != 0 {
			t.Fatalf("ledger after 503: got %d charges, want 0", n)
		}
	}
	// The retry with the same key charges once and then replays.
	c := wantCharge(t, h.charge("k-fail", body))
	r := h.charge("k-fail", body)
	if got := wantCharge(t, r); got.ID != c.ID || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: got %s, want %s replayed", got.ID, c.ID)
	}
	if n := len(h.ledger("ord_f").Charges); n != 1 {
		t.Fatalf("ledger: got %d charges, want 1", n)
	}
	if f := h.srv.Faults(); f.FailNext != 0 {
		t.Fatalf("fail_next after use: got %d, want 0", f.FailNext)
	}
}

func TestValidationDoesNotConsumeFaultCounters(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Faults: Faults{FailNext: 1}})
	wantError(t, h.charge("k", `{"amount":-1,"currency":"EUR","payment_method":"pm_card_ok"}`), 400, ErrTypeInvalidRequest, CodeInvalidAmount)
	wantError(t, h.charge("k", chargeBody(1, PaymentMethodOK, "r")), 503, ErrTypeAPI, CodeServiceUnavailable)
}

func TestDropNextChargesThenDropsConnection(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Faults: Faults{DropNext: 1}})
	body := chargeBody(1500, PaymentMethodOK, "ord_drop")
	_, err := h.do(freshClient(t, 10*time.Second), http.MethodPost, "/v1/charges", "k-drop", body)
	if !isNetError(err) {
		t.Fatalf("dropped request: got err %v, want a transport error", err)
	}
	l := h.ledger("ord_drop")
	if len(l.Charges) != 1 || l.Charges[0].IdempotencyKey != "k-drop" {
		t.Fatalf("ledger after drop: got %+v, want the charge", l.Charges)
	}
	r := h.charge("k-drop", body)
	c := wantCharge(t, r)
	if c.ID != l.Charges[0].ID || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: got %s replayed %q, want %s true", c.ID, r.header.Get("Idempotent-Replayed"), l.Charges[0].ID)
	}
	if n := len(h.ledger("ord_drop").Charges); n != 1 {
		t.Fatalf("ledger after retry: got %d charges, want 1", n)
	}
}

// TestDropOnReusedConnectionIsRetriedTransparently documents a net/http
// behaviour the merchant client inherits: Transport retries a request with an
// Idempotency-Key header once when a reused connection fails, so a drop can
// surface as a replayed 200 instead of an error. The provider's idempotency
// is what makes that retry harmless.
func TestDropOnReusedConnectionIsRetriedTransparently(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	wantCharge(t, h.charge("warm-up", chargeBody(1, PaymentMethodOK, "warm")))
	if err := h.srv.SetFaults(Faults{DropNext: 1}); err != nil {
		t.Fatalf("SetFaults: %v", err)
	}
	r := h.charge("k-reuse", chargeBody(5, PaymentMethodOK, "ord_reuse"))
	c := wantCharge(t, r)
	if got := r.header.Get("Idempotent-Replayed"); got != "true" {
		t.Fatalf("Idempotent-Replayed: got %q, want true (net/http retried the dropped request)", got)
	}
	if l := h.ledger("ord_reuse"); len(l.Charges) != 1 || l.Charges[0].ID != c.ID {
		t.Fatalf("ledger: got %+v, want one charge %s", l.Charges, c.ID)
	}
}

func TestTimeoutNextChargesThenHangs(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Faults: Faults{TimeoutNext: 1}})
	body := chargeBody(1600, PaymentMethodOK, "ord_to")
	_, err := h.do(freshClient(t, 300*time.Millisecond), http.MethodPost, "/v1/charges", "k-to", body)
	if !isNetError(err) {
		t.Fatalf("hung request: got err %v, want a timeout", err)
	}
	l := h.ledger("ord_to")
	if len(l.Charges) != 1 {
		t.Fatalf("ledger after timeout: got %d charges, want 1", len(l.Charges))
	}
	r := h.charge("k-to", body)
	if c := wantCharge(t, r); c.ID != l.Charges[0].ID || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: got %s, want replay of %s", c.ID, l.Charges[0].ID)
	}
}

func TestRandomFaultsReplayWithSeed(t *testing.T) {
	t.Parallel()
	run := func(seed uint64) string {
		h := newHarness(t, Config{Seed: seed, Faults: Faults{FailRate: 0.5, DeclineRate: 0.3}})
		var out strings.Builder
		for i := range 40 {
			r := h.charge(fmt.Sprintf("k%d", i), chargeBody(100, PaymentMethodOK, "r"))
			fmt.Fprintf(&out, "%d ", r.status)
		}
		return out.String()
	}
	a, b := run(7), run(7)
	if a != b {
		t.Fatalf("same seed, different faults:\n%s\n%s", a, b)
	}
	for _, s := range []string{"200", "402", "503"} {
		if !strings.Contains(a, s) {
			t.Fatalf("statuses %q: want some %s", a, s)
		}
	}
}

func TestDropRateRecordsEveryCharge(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Seed: 3, Faults: Faults{DropRate: 0.5}})
	client := freshClient(t, 10*time.Second)
	dropped := 0
	for i := range 20 {
		key := fmt.Sprintf("k%d", i)
		_, err := h.do(client, http.MethodPost, "/v1/charges", key, chargeBody(100, PaymentMethodOK, key))
		if err != nil {
			dropped++
		}
	}
	if dropped == 0 || dropped == 20 {
		t.Fatalf("dropped %d of 20, want some but not all", dropped)
	}
	if n := len(h.ledger("").Charges); n != 20 {
		t.Fatalf("ledger: got %d charges, want 20 (drops charge first)", n)
	}
}

func TestRefunds(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	ch := wantCharge(t, h.charge("c1", chargeBody(1000, PaymentMethodOK, "ord_r")))

	r := h.refund("r1", fmt.Sprintf(`{"charge":%q,"amount":400,"metadata":{"reason":"damaged"}}`, ch.ID))
	if r.status != http.StatusOK {
		t.Fatalf("refund: got %d: %s", r.status, r.body)
	}
	rf := decode[Refund](t, r.body)
	if !strings.HasPrefix(rf.ID, "re_") || rf.Object != "refund" || rf.Charge != ch.ID || rf.Amount != 400 ||
		rf.Currency != "EUR" || rf.Status != "succeeded" || rf.Metadata["reason"] != "damaged" || rf.IdempotencyKey != "r1" {
		t.Fatalf("refund fields: got %+v", rf)
	}
	if got := wantCharge(t, h.must(http.MethodGet, "/v1/charges/"+ch.ID, "", "")).AmountRefunded; got != 400 {
		t.Fatalf("amount_refunded: got %d, want 400", got)
	}
	if got := decode[Refund](t, h.must(http.MethodGet, "/v1/refunds/"+rf.ID, "", "").body); got.ID != rf.ID {
		t.Fatalf("GET refund: got %s, want %s", got.ID, rf.ID)
	}

	// Refund idempotency: replay, then conflicting reuse.
	r2 := h.refund("r1", fmt.Sprintf(`{"charge":%q,"amount":400,"metadata":{"reason":"damaged"}}`, ch.ID))
	if got := decode[Refund](t, r2.body); got.ID != rf.ID || r2.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("refund replay: got %s replayed %q, want %s true", got.ID, r2.header.Get("Idempotent-Replayed"), rf.ID)
	}
	wantError(t, h.refund("r1", fmt.Sprintf(`{"charge":%q,"amount":300}`, ch.ID)), 422, ErrTypeIdempotency, CodeIdempotencyKeyReused)

	wantError(t, h.refund("r2", fmt.Sprintf(`{"charge":%q,"amount":601}`, ch.ID)), 400, ErrTypeInvalidRequest, CodeAmountTooLarge)
	// Refusals do not store the key: the same key can then refund the rest.
	full := h.refund("r2", fmt.Sprintf(`{"charge":%q}`, ch.ID))
	if got := decode[Refund](t, full.body); full.status != http.StatusOK || got.Amount != 600 {
		t.Fatalf("refund remaining: got %d %s, want 600", full.status, full.body)
	}
	wantError(t, h.refund("r3", fmt.Sprintf(`{"charge":%q,"amount":1}`, ch.ID)), 400, ErrTypeInvalidRequest, CodeChargeAlreadyRefunded)
	wantError(t, h.refund("r4", `{"charge":"ch_unknown","amount":1}`), 404, ErrTypeInvalidRequest, CodeResourceMissing)
	wantError(t, h.refund("r5", `{"charge":"","amount":1}`), 400, ErrTypeInvalidRequest, CodeParameterMissing)
	wantError(t, h.refund("r6", fmt.Sprintf(`{"charge":%q,"amount":0}`, ch.ID)), 400, ErrTypeInvalidRequest, CodeInvalidAmount)
	wantError(t, h.refund("", fmt.Sprintf(`{"charge":%q,"amount":1}`, ch.ID)), 400, ErrTypeIdempotency, CodeIdempotencyKeyMissing)

	e := wantError(t, h.charge("c2", chargeBody(50, PaymentMethodDeclined, "ord_r")), 402, ErrTypeCard, CodeCardDeclined)
	wantError(t, h.refund("r7", fmt.Sprintf(`{"charge":%q}`, e.Error.Charge)), 400, ErrTypeInvalidRequest, CodeChargeFailed)

	other := wantCharge(t, h.charge("c3", chargeBody(70, PaymentMethodOK, "ord_other")))
	if r := h.refund("r8", fmt.Sprintf(`{"charge":%q}`, other.ID)); r.status != http.StatusOK {
		t.Fatalf("refund other: got %d", r.status)
	}

	l := h.ledger("ord_r")
	if len(l.Charges) != 2 || len(l.Refunds) != 2 {
		t.Fatalf("filtered ledger: got %d charges %d refunds, want 2 and 2", len(l.Charges), len(l.Refunds))
	}
	if l.Charges[0].AmountRefunded != 1000 {
		t.Fatalf("ledger amount_refunded: got %d, want 1000", l.Charges[0].AmountRefunded)
	}
	if l.Refunds[0].IdempotencyKey != "r1" || l.Refunds[1].IdempotencyKey != "r2" {
		t.Fatalf("ledger refund keys: got %q %q", l.Refunds[0].IdempotencyKey, l.Refunds[1].IdempotencyKey)
	}
	if all := h.ledger(""); len(all.Refunds) != 3 || len(all.Charges) != 3 {
		t.Fatalf("full ledger: got %d charges %d refunds, want 3 and 3", len(all.Charges), len(all.Refunds))
	}
}

func TestRefundFaultCounters(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	ch := wantCharge(t, h.charge("c", chargeBody(900, PaymentMethodOK, "ord_rf")))
	if err := h.srv.SetFaults(Faults{FailNext: 1, DropNext: 1}); err != nil {
		t.Fatalf("SetFaults: %v", err)
	}
	body := fmt.Sprintf(`{"charge":%q,"amount":100}`, ch.ID)
	wantError(t, h.refund("rk", body), 503, ErrTypeAPI, CodeServiceUnavailable)
	if _, err := h.do(freshClient(t, 10*time.Second), http.MethodPost, "/v1/refunds", "rk", body); !isNetError(err) {
		t.Fatalf("dropped refund: got %v, want transport error", err)
	}
	r := h.refund("rk", body)
	if r.status != http.StatusOK || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("refund retry: got %d replayed %q, want 200 true", r.status, r.header.Get("Idempotent-Replayed"))
	}
	l := h.ledger("ord_rf")
	if len(l.Refunds) != 1 || l.Charges[0].AmountRefunded != 100 {
		t.Fatalf("ledger: got %d refunds, refunded %d, want 1 and 100", len(l.Refunds), l.Charges[0].AmountRefunded)
	}
}

func TestAPIKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{APIKey: "sk_test_123"})
	if r := h.charge("k", chargeBody(1, PaymentMethodOK, "r")); r.status != http.StatusOK {
		t.Fatalf("with key: got %d, want 200", r.status)
	}
	h.apiKey = ""
	wantError(t, h.charge("k2", chargeBody(1, PaymentMethodOK, "r")), 401, ErrTypeAuthentication, CodeInvalidAPIKey)
	wantError(t, h.must(http.MethodGet, "/v1/ledger", "", ""), 401, ErrTypeAuthentication, CodeInvalidAPIKey)
	h.apiKey = "sk_test_wrong"
	wantError(t, h.must(http.MethodGet, "/v1/charges", "", ""), 401, ErrTypeAuthentication, CodeInvalidAPIKey)
	h.apiKey = ""
	if r := h.must(http.MethodGet, "/healthz", "", ""); r.status != http.StatusOK {
		t.Fatalf("/healthz without key: got %d, want 200", r.status)
	}
}

// The admin API can make every payment fail, so it is as closed as /v1/*:
// without the key nothing about the faults is read or changed.
func TestAdminNeedsAPIKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{APIKey: "sk_test_123", Faults: Faults{LatencyMS: 1}})
	admin := []struct{ method, path, body string }{
		{http.MethodGet, "/admin/faults", ""},
		{http.MethodPut, "/admin/faults", `{"fail_next":5}`},
		{http.MethodPost, "/admin/reset", ""},
		{http.MethodGet, "/admin/deliveries", ""},
	}
	for _, key := range []string{"", "sk_test_wrong"} {
		h.apiKey = key
		for _, a := range admin {
			wantError(t, h.must(a.method, a.path, "", a.body), 401, ErrTypeAuthentication, CodeInvalidAPIKey)
		}
	}
	if got := h.srv.Faults(); got != (Faults{LatencyMS: 1}) {
		t.Fatalf("faults after refused admin calls: got %+v, want them unchanged", got)
	}
	h.apiKey = "sk_test_123"
	for _, a := range admin {
		if r := h.must(a.method, a.path, "", a.body); r.status != http.StatusOK {
			t.Fatalf("%s %s with key: got %d %s, want 200", a.method, a.path, r.status, r.body)
		}
	}
}

func TestAdminFaults(t *testing.T) {
	t.Parallel()
	initial := Faults{LatencyMS: 1, FailRate: 0.1, WebhookReorder: true}
	h := newHarness(t, Config{Faults: initial})
	if got := decode[Faults](t, h.must(http.MethodGet, "/admin/faults", "", "").body); got != initial {
		t.Fatalf("GET faults: got %+v, want %+v", got, initial)
	}
	put := `{"latency_ms":0,"fail_rate":0.2,"drop_rate":0.3,"decline_rate":0.4,"fail_next":1,"drop_next":2,"timeout_next":3,"webhook_duplicates":4,"webhook_reorder":false}`
	want := Faults{FailRate: 0.2, DropRate: 0.3, DeclineRate: 0.4, FailNext: 1, DropNext: 2, TimeoutNext: 3, WebhookDuplicates: 4}
	r := h.must(http.MethodPut, "/admin/faults", "", put)
	if got := decode[Faults](t, r.body); r.status != http.StatusOK || got != want {
		t.Fatalf("PUT faults: got %d %+v, want 200 %+v", r.status, got, want)
	}
	if got := decode[Faults](t, h.must(http.MethodGet, "/admin/faults", "", "").body); got != want {
		t.Fatalf("GET after PUT: got %+v, want %+v", got, want)
	}
	for _, bad := range []string{`{"fail_rate":1.5}`, `{"drop_next":-1}`, `{"webhook_duplicates":1000}`, `{"fail_rat":0.1}`, `nope`} {
		if r := h.must(http.MethodPut, "/admin/faults", "", bad); r.status != http.StatusBadRequest {
			t.Fatalf("PUT %s: got %d, want 400", bad, r.status)
		}
	}
	if got := h.srv.Faults(); got != want {
		t.Fatalf("faults after bad PUTs: got %+v, want unchanged %+v", got, want)
	}
	r = h.must(http.MethodPost, "/admin/reset", "", "")
	if got := decode[Faults](t, r.body); r.status != http.StatusOK || got != (Faults{}) {
		t.Fatalf("reset: got %d %+v, want 200 zero", r.status, got)
	}
	if err := h.srv.SetFaults(Faults{DeclineRate: -1}); !errors.Is(err, ErrInvalidFaults) {
		t.Fatalf("SetFaults invalid: got %v, want ErrInvalidFaults", err)
	}
}

func TestResetKeepsData(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Faults: Faults{FailRate: 1}})
	wantError(t, h.charge("k", chargeBody(1, PaymentMethodOK, "r")), 503, ErrTypeAPI, CodeServiceUnavailable)
	h.must(http.MethodPost, "/admin/reset", "", "")
	wantCharge(t, h.charge("k", chargeBody(1, PaymentMethodOK, "r")))
	h.must(http.MethodPost, "/admin/reset", "", "")
	if n := len(h.ledger("").Charges); n != 1 {
		t.Fatalf("ledger after reset: got %d, want 1", n)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
		also error
	}{
		{"no secret", Config{WebhookURL: "http://127.0.0.1:1/hook"}, nil},
		{"bad prefix", Config{WebhookURL: "http://127.0.0.1:1/hook", WebhookSecrets: []string{"abc"}}, ErrInvalidWebhookSecret},
		{"bad base64", Config{WebhookURL: "http://127.0.0.1:1/hook", WebhookSecrets: []string{"whsec_!!"}}, ErrInvalidWebhookSecret},
		{"bad secret without url", Config{WebhookSecrets: []string{"abc"}}, ErrInvalidWebhookSecret},
		{"relative url", Config{WebhookURL: "/hook", WebhookSecrets: []string{testSecret("a")}}, nil},
		{"bad faults", Config{Faults: Faults{FailRate: 2}}, ErrInvalidFaults},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(tc.cfg, nil, nil)
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("New: got %v, want ErrInvalidConfig", err)
			}
			if tc.also != nil && !errors.Is(err, tc.also) {
				t.Fatalf("New: got %v, want also %v", err, tc.also)
			}
		})
	}
}

func TestLatencyDelaysAnswer(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Faults: Faults{LatencyMS: 30}})
	start := time.Now()
	wantCharge(t, h.charge("k", chargeBody(1, PaymentMethodOK, "r")))
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("latency: answered after %v, want >= 30ms", d)
	}
}
