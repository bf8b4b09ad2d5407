package app_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/oncepay/oncepay/internal/app"
)

// The browser tests drive the web UI (web/) in a real headless Chromium
// against the real service, and check the provider's ledger: whatever the
// UI and the network did, the order is charged once.
//
// ONCEPAY_CHROMIUM names the browser binary (default: chromium on PATH).
// ONCEPAY_SCREENSHOT_DIR keeps the screenshots each scenario takes; without
// it they go to a temporary directory that the test removes.

// browserTimeout bounds every wait for the page. Generous: the tests run
// with -race, in parallel with the rest of the suite, on two cores.
const browserTimeout = 45 * time.Second

// startBrowser starts one headless Chromium for the calling test and its
// subtests, each of which opens its own tab in its own browser context.
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	path := os.Getenv("ONCEPAY_CHROMIUM")
	if path == "" {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if p, err := exec.LookPath(name); err == nil {
				path = p
				break
			}
		}
	}
	if path == "" {
		// Never a skip: `make test` installs Chromium (scripts/deps.sh).
		t.Fatal("no Chromium found: run `make test` (it installs it), apt-get install -y chromium, or set ONCEPAY_CHROMIUM")
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.Flag("disable-backgrounding-occluded-windows", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
	})
	// The first Run starts the browser; its context must outlive every
	// tab, so it has no timeout of its own.
	if err := chromedp.Do(browser); err != nil {
		t.Fatalf("start Chromium (%s): %v", path, err)
	}
	return browser
}

// page is one tab on one test bundle's UI.
type page struct {
	t   *testing.T
	b   *testBundle
	ctx context.Context
	dir string // where screenshots go

	mu         sync.Mutex
	exceptions []string
}

// openPage opens the UI of b in a new tab of browser, in a browser context
// of its own (fresh sessionStorage), and waits until ready is visible.
func openPage(t *testing.T, browser context.Context, b *testBundle, ready string) *page {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser, chromedp.WithNewBrowserContext())
	p := &page{t: t, b: b, ctx: ctx, dir: os.Getenv("ONCEPAY_SCREENSHOT_DIR")}
	if p.dir == "" {
		p.dir = t.TempDir()
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		if t.Failed() {
			p.screenshot("failure")
		}
		cancel()
		<-done
	})
	console := chromedp.Console(ctx)
	go func() {
		defer close(done)
		for m, err := range console {
			if err != nil {
				return
			}
			if m.IsException() {
				p.mu.Lock()
				p.exceptions = append(p.exceptions, m.Text)
				p.mu.Unlock()
			}
		}
	}()
	// The tab's first Run creates it, so it gets no timeout either.
	if err := chromedp.Do(ctx, chromedp.Navigate(b.baseURL+"/")); err != nil {
		t.Fatalf("open %s: %v", b.baseURL, err)
	}
	p.waitVisible(ready)
	return p
}

// shopReady is visible once the demo shop has loaded its products.
const shopReady = `#products li.product`

// do runs actions, bounded by browserTimeout.
func (p *page) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, browserTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.t.Fatalf("%s: %v\n%s", what, err, p.state())
	}
}

func (p *page) waitVisible(sel string) {
	p.t.Helper()
	p.do("wait for "+sel, chromedp.WaitVisible(chromedp.CSS(sel)))
}

func (p *page) click(sel string) {
	p.t.Helper()
	p.do("click "+sel, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
}

// waitJS waits until the JavaScript expression is truthy: how the tests
// wait for asynchronous work, never with a sleep.
func (p *page) waitJS(what, expr string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, browserTimeout)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(browserTimeout)))
	if err != nil {
		p.t.Fatalf("wait until %s: %v\n%s", what, err, p.state())
	}
}

// eval returns the value of a JavaScript expression.
func eval[T any](p *page, expr string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, browserTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// state describes the page for a failure message.
func (p *page) state() string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`[
		'pay result: ' + (document.querySelector('#pay-result')?.innerText ?? ''),
		'pay log: ' + (document.querySelector('#pay-log')?.innerText ?? ''),
		'order result: ' + (document.querySelector('#order-result')?.innerText ?? ''),
		'banner: ' + (document.querySelector('#banner')?.innerText ?? ''),
		'charged: ' + (document.querySelector('#charged')?.innerText ?? ''),
	].join('\n')`))
	if err != nil {
		return "(page state unavailable: " + err.Error() + ")"
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return s + "\nexceptions: " + strings.Join(p.exceptions, "; ")
}

// screenshot saves the full page as name.png and returns the path.
func (p *page) screenshot(name string) string {
	p.t.Helper()
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		p.t.Errorf("screenshot dir: %v", err)
		return ""
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), browserTimeout)
	defer cancel()
	// From the top, so the sticky live view sits where a reader expects it.
	_ = chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG, not JPEG
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			p.t.Logf("screenshot %s: %v", name, err)
		}
		return ""
	}
	file := filepath.Join(p.dir, p.t.Name()[strings.LastIndex(p.t.Name(), "/")+1:]+"-"+name+".png")
	if err := os.WriteFile(file, png, 0o644); err != nil {
		p.t.Errorf("save screenshot: %v", err)
		return ""
	}
	p.t.Logf("screenshot: %s", file)
	return file
}

// noExceptions fails the test if the page threw anything uncaught.
func (p *page) noExceptions() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.exceptions) > 0 {
		p.t.Errorf("the page threw: %s", strings.Join(p.exceptions, "; "))
	}
}

// fillCart puts two travel mugs and a dripper into the cart.
func (p *page) fillCart() {
	p.t.Helper()
	p.click(`button[data-sku="travel-mug"][data-delta="1"]`)
	p.click(`button[data-sku="travel-mug"][data-delta="1"]`)
	p.click(`button[data-sku="ceramic-dripper"][data-delta="1"]`)
	p.waitJS("the cart total is shown", `document.querySelector('#cart-total').textContent.includes('58')`)
}

// createOrder fills the cart, creates the order and returns its id.
func (p *page) createOrder() string {
	p.t.Helper()
	p.fillCart()
	p.click(`#create-order`)
	p.waitVisible(`#pay-btn`)
	p.waitJS("the order is created", `document.querySelector('#order-result').dataset.outcome === 'created'`)
	id := eval[string](p, `document.querySelector('#pay-order-id').textContent`)
	if len(id) != 36 {
		p.t.Fatalf("order id on the page = %q", id)
	}
	return id
}

// pay picks the method and the chaos, presses Pay and waits for a final
// outcome of the intent, which it returns (succeeded, declined, ...).
func (p *page) pay(method, chaos string) string {
	p.t.Helper()
	p.do("choose "+method, chromedp.SetValue(chromedp.CSS(`#method`), method))
	if chaos != "" {
		p.click(fmt.Sprintf(`input[name="chaos"][value=%q]`, chaos))
	}
	p.waitJS("the Pay button is enabled", `!document.querySelector('#pay-btn').disabled`)
	p.click(`#pay-btn`)
	p.waitJS("the payment has a final answer",
		`!['', 'pending', undefined].includes(document.querySelector('#pay-result').dataset.outcome)`)
	return eval[string](p, `document.querySelector('#pay-result').dataset.outcome`)
}

// paymentID is the id of the payment the result box shows.
func (p *page) paymentID() string {
	p.t.Helper()
	return eval[string](p, `document.querySelector('#pay-result').dataset.paymentId || ''`)
}

// waitCharged waits until the live view shows the provider's charge count.
func (p *page) waitCharged(n int) {
	p.t.Helper()
	p.waitJS(fmt.Sprintf("the live view shows %d charge(s)", n),
		fmt.Sprintf(`document.querySelector('#charged').dataset.count === '%d'`, n))
}

// wantOneCharge checks the provider's ledger, the ground truth.
func (p *page) wantOneCharge(paymentID string) {
	p.t.Helper()
	if paymentID == "" {
		p.t.Fatalf("no payment id on the page\n%s", p.state())
	}
	if n := p.b.charges(p.t, paymentID); n != 1 {
		p.t.Fatalf("provider charged payment %s %d times, want exactly 1", paymentID, n)
	}
	if n := p.b.allCharges(); n != 1 {
		p.t.Fatalf("provider saw %d charges in all, want 1", n)
	}
}

func TestBrowser(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)

	t.Run("CreatePayPaid", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := openPage(t, browser, b, shopReady)
		orderID := p.createOrder()
		if got := eval[string](p, `document.querySelector('#live-order-id').textContent`); got != orderID {
			t.Fatalf("live view shows order %q, want %q", got, orderID)
		}
		if outcome := p.pay("pm_card_ok", ""); outcome != "succeeded" {
			t.Fatalf("outcome = %q\n%s", outcome, p.state())
		}
		if eval[bool](p, `document.querySelector('#pay-result').dataset.replayed === 'true'`) {
			t.Fatal("a first answer is shown as a replay")
		}
		p.waitCharged(1)
		p.waitJS("the order shows as paid", `['paid', 'fulfilled'].includes(document.querySelector('#live-order-status').textContent)`)
		p.waitJS("the Pay button is done", `document.querySelector('#pay-btn').disabled`)
		p.waitVisible(`#refund-btn`)
		p.wantOneCharge(p.paymentID())
		if n := eval[int](p, `Object.keys(sessionStorage).filter(k => k.startsWith('oncepay.intent.')).length`); n != 0 {
			t.Fatalf("%d intents left in sessionStorage after final answers, want 0", n)
		}
		p.waitJS("the payment event is listed", `!!document.querySelector('#events li[data-type="payment.succeeded"]')`)
		p.screenshot("paid")

		// A refund: its own intent and key, a final answer, and the
		// provider's ledger shows it.
		p.do("refund 5.00", chromedp.SetValue(chromedp.CSS(`#refund-amount`), "5.00"))
		p.click(`#refund-btn`)
		p.waitJS("the refund has a final answer", `document.querySelector('#refund-result').dataset.outcome === 'succeeded'`)
		if l := b.psp.Ledger(p.paymentID()); len(l.Refunds) != 1 || l.Refunds[0].Amount != 500 {
			t.Fatalf("provider refunds = %+v, want one of 500", l.Refunds)
		}

		// Readable on a phone: nothing wider than the screen.
		p.do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
		p.waitJS("the layout fits a phone", `document.documentElement.scrollWidth <= 390 &&
			[...document.querySelectorAll('.card')].every(c => c.scrollWidth <= c.clientWidth)`)
		p.screenshot("phone")
		p.noExceptions()
	})

	t.Run("CancelAnUnpaidOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := openPage(t, browser, b, shopReady)
		orderID := p.createOrder()
		p.waitVisible(`#cancel-btn`)
		p.click(`#cancel-btn`)
		p.waitJS("the cancel has a final answer", `document.querySelector('#pay-result').dataset.outcome === 'cancelled'`)
		p.waitJS("the order shows as cancelled", `document.querySelector('#pay-order-status').textContent === 'cancelled'`)
		p.waitJS("the Pay button is done", `document.querySelector('#pay-btn').disabled && document.querySelector('#cancel-btn').hidden`)
		if n := b.count(t, fmt.Sprintf(`SELECT count(*) FROM orders WHERE id = '%s' AND status = 'cancelled'`, orderID)); n != 1 {
			t.Fatalf("order %s is not cancelled in the database\n%s", orderID, p.state())
		}
		if n := eval[int](p, `Object.keys(sessionStorage).filter(k => k.startsWith('oncepay.intent.')).length`); n != 0 {
			t.Fatalf("%d intents left in sessionStorage after the cancel's final answer, want 0", n)
		}
		p.waitJS("the cancel event is listed", `!!document.querySelector('#events li[data-type="order.cancelled"]')`)
		p.screenshot("cancelled")
		p.noExceptions()
	})

	t.Run("DoubleClickChargesOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := openPage(t, browser, b, shopReady)
		p.createOrder()
		if outcome := p.pay("pm_card_ok", "double-submit"); outcome != "succeeded" {
			t.Fatalf("outcome = %q\n%s", outcome, p.state())
		}
		for _, s := range []string{"A", "B"} {
			if !eval[bool](p, fmt.Sprintf(`!!document.querySelector('#pay-log li[data-submit=%q]')`, s)) {
				t.Fatalf("submit %s is not in the request log\n%s", s, p.state())
			}
		}
		if n := b.count(t, `SELECT count(DISTINCT idempotency_key) FROM api_idempotency WHERE operation = 'payments.create'`); n != 1 {
			t.Fatalf("the two submits used %d keys, want 1", n)
		}
		p.waitCharged(1)
		p.wantOneCharge(p.paymentID())
		if n := b.count(t, `SELECT count(*) FROM payments`); n != 1 {
			t.Fatalf("payments = %d, want 1", n)
		}
		p.screenshot("double-click")
		p.noExceptions()
	})

	t.Run("LostResponseIsReplayed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := openPage(t, browser, b, shopReady)
		p.createOrder()
		if outcome := p.pay("pm_card_ok", "lose-response"); outcome != "succeeded" {
			t.Fatalf("outcome = %q\n%s", outcome, p.state())
		}
		if !eval[bool](p, `!!document.querySelector('#pay-log li[data-state="lost"]')`) {
			t.Fatalf("the lost response is not in the request log\n%s", p.state())
		}
		if !eval[bool](p, `document.querySelector('#pay-result').dataset.replayed === 'true'`) {
			t.Fatalf("the retry's answer is not shown as a replay\n%s", p.state())
		}
		if !eval[bool](p, `document.querySelector('#pay-result').textContent.includes('Idempotent-Replayed: true')`) {
			t.Fatalf("the result does not say it was replayed\n%s", p.state())
		}
		p.waitCharged(1)
		p.wantOneCharge(p.paymentID())
		p.waitJS("the payment event is listed", `!!document.querySelector('#events li[data-type="payment.succeeded"]')`)
		p.screenshot("lost-response")
		p.noExceptions()
	})

	t.Run("DeclinedThenNewAttempt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := openPage(t, browser, b, shopReady)
		p.createOrder()
		if outcome := p.pay("pm_card_declined", ""); outcome != "declined" {
			t.Fatalf("outcome = %q\n%s", outcome, p.state())
		}
		msg := eval[string](p, `document.querySelector('#pay-result').textContent`)
		if !strings.Contains(msg, "Declined") || !strings.Contains(msg, "Nothing was charged") {
			t.Fatalf("decline message = %q", msg)
		}
		declinedKey := eval[string](p, `document.querySelector('#pay-key').textContent`)
		// The next step is one keystroke away: focus is on the card.
		if id := eval[string](p, `document.activeElement && document.activeElement.id`); id != "method" {
			t.Fatalf("focus after a decline is on %q, want the payment method", id)
		}
		p.waitCharged(0)

		if outcome := p.pay("pm_card_ok", ""); outcome != "succeeded" {
			t.Fatalf("second attempt outcome = %q\n%s", outcome, p.state())
		}
		if key := eval[string](p, `document.querySelector('#pay-key').textContent`); key == declinedKey || key == "" {
			t.Fatalf("the new attempt used key %q, want a new one (declined under %q)", key, declinedKey)
		}
		p.waitJS("both attempts are listed", `document.querySelector('#attempt-count').textContent === '2'`)
		p.waitCharged(1)
		if n := b.charges(t, p.paymentID()); n != 1 {
			t.Fatalf("provider charges of the new attempt = %d, want 1", n)
		}
		p.screenshot("declined-then-paid")
		p.noExceptions()
	})

	t.Run("WithoutDemoModeAsksForAKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(c *app.Config) { c.DemoMode = false })
		key := b.tenantWithCatalog(t, "initech")
		p := openPage(t, browser, b, `#api-key`)
		p.do("enter the API key",
			chromedp.SendKeys(chromedp.CSS(`#api-key`), key),
			chromedp.Click(chromedp.CSS(`#api-key-use`), chromedp.NodeVisible))
		p.waitVisible(shopReady)
		if eval[bool](p, `!document.querySelector('#chaos').hidden || !document.querySelector('#mode-pill').hidden`) {
			t.Fatal("demo controls are shown outside demo mode")
		}
		p.createOrder()
		if outcome := p.pay("pm_card_ok", ""); outcome != "succeeded" {
			t.Fatalf("outcome = %q\n%s", outcome, p.state())
		}
		p.waitJS("the live view shows the order as paid", `['paid', 'fulfilled'].includes(document.querySelector('#live-order-status').textContent)`)
		if c := eval[string](p, `document.querySelector('#charged').dataset.count`); c != "" {
			t.Fatalf("the provider's ledger is shown outside demo mode: %q", c)
		}
		p.wantOneCharge(p.paymentID())
		p.noExceptions()
	})

	// The contract's Retry-After policy (docs/CONTRACT.md, "Retry-After"):
	// a wait over a minute is not the page's to sit out. A proxy in front of
	// the service answers the first create as a maintenance page would, 503
	// with a Retry-After of two minutes: the page neither waits nor retries
	// on its own, it tells the user, and the user's next press sends the
	// same key. The Go client's side is client
	// TestClientLeavesLongRetryAfterToTheCaller.
	t.Run("LongRetryAfterIsLeftToTheUser", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		service, err := url.Parse(b.baseURL)
		if err != nil {
			t.Fatal(err)
		}
		forward := httputil.NewSingleHostReverseProxy(service)
		var (
			mu      sync.Mutex
			refused string // the key of the create the proxy refused
		)
		proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && r.URL.Path == "/v1/orders" {
				mu.Lock()
				first := refused == ""
				if first {
					refused = r.Header.Get("Idempotency-Key")
				}
				mu.Unlock()
				if first {
					w.Header().Set("Content-Type", "application/problem+json")
					w.Header().Set("Retry-After", "120")
					w.WriteHeader(http.StatusServiceUnavailable)
					_, _ = w.Write([]byte(`{"type":"about:blank","title":"Service Unavailable","status":503,"code":"service_unavailable","detail":"Down for maintenance."}`))
					return
				}
			}
			forward.ServeHTTP(w, r)
		}))
		t.Cleanup(proxy.Close)
		behind := *b
		behind.baseURL = proxy.URL
		p := openPage(t, browser, &behind, shopReady)

		// Retry-After is the floor of a wait, however long.
		ctx, cancel := context.WithTimeout(p.ctx, browserTimeout)
		defer cancel()
		floors, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](
			`import('/assets/intent.js').then(m => ['1', '60', '90'].map(ra => m.retryDelay(1, ra, () => 0)))`,
			chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatal(err)
		}
		if want := []float64{1000, 60000, 90000}; !slices.Equal(floors, want) {
			t.Fatalf("retryDelay after Retry-After 1, 60, 90 = %v ms, want %v", floors, want)
		}

		p.fillCart()
		p.click(`#create-order`)
		p.waitJS("the page reports the wait", `document.querySelector('#order-result').dataset.outcome === 'later'`)
		if msg := eval[string](p, `document.querySelector('#order-result').textContent`); !strings.Contains(msg, "Down for maintenance.") || !strings.Contains(msg, "retry in 2 min") {
			t.Fatalf("the page says %q, want the server's detail and the wait", msg)
		}
		if n := eval[int](p, `document.querySelectorAll('#order-log li').length`); n != 1 {
			t.Fatalf("%d attempts in the request log, want 1: the page retried on its own\n%s", n, p.state())
		}
		mu.Lock()
		key := refused
		mu.Unlock()
		kept := eval[string](p, `Object.entries(sessionStorage).filter(([k]) => k.startsWith('oncepay.intent.')).map(([, v]) => JSON.parse(v).key).join(' ')`)
		if key == "" || kept != key {
			t.Fatalf("intents kept in sessionStorage: %q, want the refused create's key %q", kept, key)
		}
		p.screenshot("retry-later")

		// The user comes back: the same key creates the order, once.
		p.click(`#create-order`)
		p.waitJS("the order is created", `document.querySelector('#order-result').dataset.outcome === 'created'`)
		if n := b.count(t, `SELECT count(*) FROM api_idempotency WHERE operation = 'orders.create' AND idempotency_key = $1`, key); n != 1 {
			t.Fatalf("records of the refused key = %d, want 1: the retry used another key", n)
		}
		if n := b.count(t, `SELECT count(*) FROM orders`); n != 1 {
			t.Fatalf("orders = %d, want 1", n)
		}
		p.noExceptions()
	})

	t.Run("ProviderDropsAfterCharging", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := openPage(t, browser, b, shopReady)
		p.createOrder()
		if outcome := p.pay("pm_card_ok", "provider-drop"); outcome != "succeeded" {
			t.Fatalf("outcome = %q\n%s", outcome, p.state())
		}
		if !eval[bool](p, `!!document.querySelector('#pay-log li[data-status="503"]')`) {
			t.Fatalf("the 503 of the unknown outcome is not in the request log\n%s", p.state())
		}
		p.waitCharged(1)
		p.wantOneCharge(p.paymentID())
		p.noExceptions()
	})
}
