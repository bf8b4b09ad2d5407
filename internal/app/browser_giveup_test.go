package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/oncepay/oncepay/proving/pspsim"
)

// The web UI's Give up (POST /v1/payments/cancel-by-key, docs/CONTRACT.md
// "Giving up on a payment by its key"), driven in a real Chromium with the
// helpers of browser_test.go. A payment intent without a final answer is
// made by a gateway in front of the service that answers the first payment
// request 503 with a Retry-After of two minutes, which the page leaves to
// the user (TestBrowser/LongRetryAfterIsLeftToTheUser).

// payGateway is a proxy in front of a test's service that answers the first
// POST /v1/orders/{id}/payments as a gateway in maintenance would: 503, with
// a Retry-After of two minutes. With reach, that request reaches the service
// first and its answer is lost on the way back: the payment happened.
type payGateway struct {
	behind testBundle // the service as the page sees it, through the gateway

	mu      sync.Mutex
	key     string // the Idempotency-Key of the refused payment request
	reached int    // the service's status for it, with reach; 0 without
	body    []byte // and its body
}

func newPayGateway(t *testing.T, b *testBundle, reach bool) *payGateway {
	t.Helper()
	service, err := url.Parse(b.baseURL)
	if err != nil {
		t.Fatal(err)
	}
	forward := httputil.NewSingleHostReverseProxy(service)
	g := &payGateway{behind: *b}
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/v1/orders/") || !strings.HasSuffix(r.URL.Path, "/payments") || !g.claimFirst(r) {
			forward.ServeHTTP(w, r)
			return
		}
		if reach {
			lost := httptest.NewRecorder()
			forward.ServeHTTP(lost, r)
			g.mu.Lock()
			g.reached, g.body = lost.Code, lost.Body.Bytes()
			g.mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("Retry-After", "120")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"type":"about:blank","title":"Service Unavailable","status":503,"code":"service_unavailable","detail":"Down for maintenance."}`))
	}))
	t.Cleanup(proxy.Close)
	g.behind.baseURL = proxy.URL
	return g
}

// claimFirst records r's key when r is the first payment request.
func (g *payGateway) claimFirst(r *http.Request) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.key != "" {
		return false
	}
	g.key = r.Header.Get("Idempotency-Key")
	return true
}

// refused returns the key of the refused payment request and, with reach,
// the service's answer to it that the page never saw.
func (g *payGateway) refused(t *testing.T) (key string, status int, body []byte) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.key == "" {
		t.Fatal("no payment request reached the gateway")
	}
	return g.key, g.reached, g.body
}

// payLeftToTheUser pays in p through the gateway and checks that the page
// has no final answer and offers Give up, with the payment's key kept.
func (p *page) payLeftToTheUser(g *payGateway) string {
	p.t.Helper()
	if outcome := p.pay("pm_card_ok", ""); outcome != "later" {
		p.t.Fatalf("outcome = %q, want later\n%s", outcome, p.state())
	}
	p.waitJS("Give up is offered", `(b => !b.hidden && !b.disabled)(document.querySelector('#giveup-btn'))`)
	key, _, _ := g.refused(p.t)
	if kept := p.keptIntents(); kept != key {
		p.t.Fatalf("intents kept in sessionStorage: %q, want the payment's key %q", kept, key)
	}
	return key
}

// keptIntents lists the keys of the intents in sessionStorage.
func (p *page) keptIntents() string {
	p.t.Helper()
	return eval[string](p, `Object.entries(sessionStorage).filter(([k]) => k.startsWith('oncepay.intent.')).map(([, v]) => JSON.parse(v).key).join(' ')`)
}

// giveUp presses Give up and waits for the give-up's final outcome, which
// it returns with the words the page shows.
func (p *page) giveUp() (outcome, said string) {
	p.t.Helper()
	p.click(`#giveup-btn`)
	p.waitJS("the give-up has a final answer",
		`!['', 'pending', undefined].includes(document.querySelector('#pay-result').dataset.outcome) &&
			document.querySelector('#giveup-btn').getAttribute('aria-busy') === 'false'`)
	return eval[string](p, `document.querySelector('#pay-result').dataset.outcome`),
		eval[string](p, `document.querySelector('#pay-result').textContent`)
}

func TestBrowserGiveUp(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)

	// The payment request never reached the service: giving up leaves a
	// tombstone under its key, so that the request, should it still come
	// (a retry, another tab), is refused and never charges. The order stays
	// payable under a new key.
	t.Run("BeforeThePaymentArrived", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		g := newPayGateway(t, b, false)
		p := openPage(t, browser, &g.behind, shopReady)
		orderID := p.createOrder()
		payKey := p.payLeftToTheUser(g)
		p.screenshot("give-up-offered")

		outcome, said := p.giveUp()
		if outcome != "prevented" || !strings.Contains(said, "The payment will not happen.") {
			t.Fatalf("give-up = %q %q, want prevented and its words\n%s", outcome, said, p.state())
		}
		if n := b.count(t, `SELECT count(*) FROM api_idempotency WHERE operation = 'payments.create' AND idempotency_key = $1 AND recovery_point = 'cancelled'`, payKey); n != 1 {
			t.Fatalf("tombstones under the payment's key = %d, want 1: the give-up named another key", n)
		}
		if n := b.count(t, `SELECT count(*) FROM api_idempotency WHERE operation = 'payments.cancel' AND idempotency_key <> $1`, payKey); n != 1 {
			t.Fatalf("give-ups under a key of their own = %d, want 1", n)
		}
		if kept := p.keptIntents(); kept != "" {
			t.Fatalf("intents kept after the give-up's final answer: %q, want none", kept)
		}
		p.waitJS("Give up is no longer offered", `document.querySelector('#giveup-btn').hidden`)
		if n := b.count(t, `SELECT count(*) FROM payments`); n != 0 || b.allCharges() != 0 {
			t.Fatalf("payments = %d, provider charges = %d; want none", n, b.allCharges())
		}
		p.waitJS("the page offers a new payment", `(b => !b.disabled && b.textContent.startsWith('Pay '))(document.querySelector('#pay-btn'))`)
		p.screenshot("given-up")

		// The request, arriving late, whatever its body, is refused.
		wantProblem(t, b.pay(t, orderID, payKey, "pm_card_ok"), http.StatusConflict, "payment_cancelled")
		wantProblem(t, b.pay(t, orderID, payKey, "pm_card_declined"), http.StatusConflict, "payment_cancelled")
		if n := b.allCharges(); n != 0 {
			t.Fatalf("provider charges = %d, want 0: the given-up request ran", n)
		}

		// A new payment is a new intent: it pays the order, once.
		if outcome := p.pay("pm_card_ok", ""); outcome != "succeeded" {
			t.Fatalf("new payment = %q\n%s", outcome, p.state())
		}
		if key := eval[string](p, `document.querySelector('#pay-key').textContent`); key == payKey {
			t.Fatalf("the new payment was sent under the given-up key %q", key)
		}
		p.waitCharged(1)
		p.wantOneCharge(p.paymentID())
		p.noExceptions()
	})

	// The payment request reached the service and charged; its answer was
	// lost. Giving up refunds the charge in full, and the order ends
	// refunded.
	t.Run("AfterItCharged", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		g := newPayGateway(t, b, true)
		p := openPage(t, browser, &g.behind, shopReady)
		orderID := p.createOrder()
		p.payLeftToTheUser(g)
		_, status, body := g.refused(t)
		var paid struct {
			ID     string `json:"id"`
			Amount int64  `json:"amount"`
		}
		if err := json.Unmarshal(body, &paid); status != http.StatusCreated || err != nil || paid.ID == "" {
			t.Fatalf("the lost answer = %d %s, want the payment", status, body)
		}

		outcome, said := p.giveUp()
		if outcome != "refund_started" || !strings.Contains(said, "It had been charged; a full refund has started.") {
			t.Fatalf("give-up = %q %q, want refund_started and its words\n%s", outcome, said, p.state())
		}
		if id := p.paymentID(); id != paid.ID {
			t.Fatalf("the page names payment %q, want %s", id, paid.ID)
		}
		if kept := p.keptIntents(); kept != "" {
			t.Fatalf("intents kept after the give-up's final answer: %q, want none", kept)
		}

		// The refund runs its own steps: the recoverer takes it over.
		if n, err := b.app.Recoverer().RecoverOnce(context.Background(), 10); err != nil || n != 1 {
			t.Fatalf("RecoverOnce = %d, %v; want the refund finished", n, err)
		}
		p.waitJS("the order shows as refunded", `document.querySelector('#live-order-status').textContent === 'refunded'`)
		l := b.psp.Ledger(paid.ID)
		if len(l.Charges) != 1 || l.Charges[0].Status != pspsim.StatusSucceeded || len(l.Refunds) != 1 || l.Refunds[0].Amount != paid.Amount {
			t.Fatalf("provider ledger = %+v, want one charge refunded in full (%d)", l, paid.Amount)
		}
		if n := b.count(t, `SELECT count(*) FROM orders WHERE id = $1 AND status = 'refunded'`, orderID); n != 1 {
			t.Fatalf("order %s is not refunded in the database", orderID)
		}
		p.screenshot("given-up-refunded")
		p.noExceptions()
	})
}
