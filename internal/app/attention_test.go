package app_test

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/attention"
	"github.com/oncepay/oncepay/internal/testkit"
)

// openItems scrapes oncepay_attention_open_items of reason. A scrape whose
// count could not be read within its 2s (-1: a busy Citus run met it) is
// scraped again, up to a deadline.
func (b *testBundle) openItems(t *testing.T, reason attention.Reason) float64 {
	t.Helper()
	var v float64
	testkit.WaitFor(t, 30*time.Second, "the open items to be read", func() bool {
		var ok bool
		v, ok = b.scrape(t)[`oncepay_attention_open_items{reason="`+string(reason)+`"}`]
		if !ok {
			t.Fatalf("oncepay_attention_open_items{reason=%q} is not exported", reason)
		}
		return v != -1
	})
	return v
}

// attemptItems returns the attention items of an attempt of acme's.
func (b *testBundle) attemptItems(t *testing.T, op, key string) []attention.Item {
	t.Helper()
	var tenant uuid.UUID
	if err := b.pool.QueryRow(context.Background(), `SELECT id FROM tenants WHERE slug = 'acme'`).Scan(&tenant); err != nil {
		t.Fatal(err)
	}
	items, err := attention.ForAttempt(context.Background(), b.pool, tenant, attention.Attempt{Operation: op, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return items
}

// attentionAdmin is the operator's queue on b's database, as the CLI
// builds it.
func (b *testBundle) attentionAdmin(t *testing.T) *attention.Admin {
	t.Helper()
	return app.NewAttentionAdmin(b.pool, app.NewIdempotencyStore(testConfig(t), b.clock.Now), b.clock.Now, slog.New(slog.DiscardHandler))
}

// A charge for other money found in phase 2 holds the attempt for an
// operator: an open mismatch item about the payment, counted by the metric
// from zero, shown by GET /admin/attention; the client's retries answer 409
// awaiting_operator and ask the provider nothing. Closing the item leaves the
// attempt held (the answer stays), and the metric drops back.
func TestMismatchInPhase2HoldsTheAttempt(t *testing.T) {
	t.Parallel()
	provider, url := newOddProvider(t)
	provider.set(func(p *oddProvider) { p.chargeSkew = map[string]any{"amount": 1} })
	b := setup(t, withAdminToken, func(c *app.Config) { c.PSPURL = url })
	if n := b.openItems(t, attention.ReasonMismatch); n != 0 {
		t.Fatalf("open mismatch items at start = %v, want 0", n)
	}
	orderID, _ := b.order(t, "o1")
	p := wantProblem(t, b.pay(t, orderID, "pay-odd", "pm_card_ok"), http.StatusConflict, "awaiting_operator")
	if p["detail"] == "" {
		t.Fatal("awaiting_operator without a detail")
	}
	items := b.attemptItems(t, "payments.create", "pay-odd")
	if len(items) != 1 || items[0].Reason != attention.ReasonMismatch || items[0].Status() != attention.StatusOpen ||
		items[0].Resource == nil || items[0].Resource.Type != "payment" {
		t.Fatalf("items = %+v, want one open mismatch about the payment", items)
	}
	item := items[0]
	if n := b.openItems(t, attention.ReasonMismatch); n != 1 {
		t.Fatalf("open mismatch items = %v, want 1", n)
	}
	for range 3 {
		wantProblem(t, b.pay(t, orderID, "pay-odd", "pm_card_ok"), http.StatusConflict, "awaiting_operator")
	}
	if held := wantKey(t, b.lookupKey(t, acme, "payments.create", "pay-odd"), "awaiting_operator"); held["response"] != nil {
		t.Fatalf("a held key has a response: %v", held)
	}
	b.clock.Advance(31 * time.Second) // past any lease: the recoverer leaves it alone too
	if n, err := b.app.Recoverer().RecoverOnce(context.Background(), 10); err != nil || n != 0 {
		t.Fatalf("RecoverOnce = %d, %v; want nothing", n, err)
	}
	if n := provider.callCount(); n != 1 {
		t.Fatalf("provider calls = %d, want 1 (the charge)", n)
	}

	list := b.admin(t, "GET", "/admin/attention").json(t)["data"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["id"] != item.ID.String() {
		t.Fatalf("GET /admin/attention = %v, want the one item", list)
	}
	one := b.admin(t, "GET", "/admin/attention/"+item.ID.String())
	if one.status != http.StatusOK {
		t.Fatalf("GET /admin/attention/{id} = %d %s", one.status, one.body)
	}
	if m := one.json(t); m["operation"] != "payments.create" || m["idempotency_key"] != "pay-odd" || m["status"] != "open" ||
		m["reason"] != "mismatch" || m["resource"].(map[string]any)["id"] != item.Resource.ID.String() {
		t.Fatalf("item = %v", m)
	}

	if _, err := b.attentionAdmin(t).Resolve(context.Background(), item.ID, attention.ResolutionRetried, "try"); err == nil {
		// Retried is allowed for a held attempt; undo nothing here: the
		// next request would meet the same odd charge and be held again.
		wantProblem(t, b.pay(t, orderID, "pay-odd", "pm_card_ok"), http.StatusConflict, "awaiting_operator")
		if n := len(b.attemptItems(t, "payments.create", "pay-odd")); n != 2 {
			t.Fatalf("items after a retry that met the same charge = %d, want 2 (the resolved one and a new one)", n)
		}
	} else {
		t.Fatalf("resolve retried: %v", err)
	}
	open := b.attemptItems(t, "payments.create", "pay-odd")[0]
	if _, err := b.attentionAdmin(t).Resolve(context.Background(), open.ID, attention.ResolutionClosed, "refunded the odd charge at the provider"); err != nil {
		t.Fatal(err)
	}
	if n := b.openItems(t, attention.ReasonMismatch); n != 0 {
		t.Fatalf("open mismatch items after closing = %v, want 0", n)
	}
	wantProblem(t, b.pay(t, orderID, "pay-odd", "pm_card_ok"), http.StatusConflict, "awaiting_operator")
	if n := b.count(t, `SELECT count(*) FROM payments WHERE status = 'succeeded'`); n != 0 {
		t.Fatalf("succeeded payments = %d, want 0", n)
	}
}

// The recoverer that finds a charge for other money holds the attempt just
// as phase 2 does: the client's retry, which would have resumed it, now
// answers awaiting_operator without calling the provider.
func TestMismatchFoundByTheRecovererHoldsTheAttempt(t *testing.T) {
	t.Parallel()
	provider, url := newOddProvider(t)
	provider.set(func(p *oddProvider) { p.down = true })
	b := setup(t, func(c *app.Config) { c.PSPURL = url })
	orderID, _ := b.order(t, "o1")
	wantProblem(t, b.pay(t, orderID, "pay-1", "pm_card_ok"), http.StatusServiceUnavailable, "payment_provider_unavailable")
	provider.set(func(p *oddProvider) { p.down, p.chargeSkew = false, map[string]any{"currency": "USD"} })
	if n, err := b.app.Recoverer().RecoverOnce(context.Background(), 10); err != nil || n != 0 {
		t.Fatalf("RecoverOnce = %d, %v; want 0 finished", n, err)
	}
	items := b.attemptItems(t, "payments.create", "pay-1")
	if len(items) != 1 || items[0].Reason != attention.ReasonMismatch || items[0].Status() != attention.StatusOpen {
		t.Fatalf("items = %+v, want one open mismatch", items)
	}
	calls := provider.callCount()
	wantProblem(t, b.pay(t, orderID, "pay-1", "pm_card_ok"), http.StatusConflict, "awaiting_operator")
	if n, err := b.app.Recoverer().RecoverOnce(context.Background(), 10); err != nil || n != 0 {
		t.Fatalf("RecoverOnce = %d, %v; want nothing", n, err)
	}
	if n := provider.callCount(); n != calls {
		t.Fatalf("provider calls = %d after the hold, want %d", n, calls)
	}
	if n := b.count(t, `SELECT count(*) FROM payments WHERE status = 'pending'`); n != 1 {
		t.Fatalf("pending payments = %d, want 1", n)
	}
}

// The recovery bound: while the provider is down, the recoverer resumes an
// attempt at most RecovererMaxAttempts times, RecovererBackoff apart
// (doubling), and then holds it for an operator (recovery_exhausted). The
// client's own retry is not delayed by the backoff and does not count. An
// operator's "try again" releases it with a fresh bound, and once the
// provider is back the client's retry finishes it.
func TestRecoveryBoundHoldsTheAttempt(t *testing.T) {
	t.Parallel()
	provider, url := newOddProvider(t)
	provider.set(func(p *oddProvider) { p.down = true })
	b := setup(t, func(c *app.Config) {
		c.PSPURL = url
		// A backoff of an hour: the test's clock runs with real time too, and
		// a busy machine must not carry it past the backoff on its own.
		c.Tuning.RecovererMaxAttempts, c.Tuning.RecovererBackoff, c.Tuning.RecovererBackoffMax = 2, time.Hour, 10*time.Hour
	})
	ctx := context.Background()
	rc := b.app.Recoverer()
	recoveries := func() int {
		t.Helper()
		return b.count(t, `SELECT recoveries FROM api_idempotency WHERE idempotency_key = 'pay-1'`)
	}
	orderID, _ := b.order(t, "o1")
	wantProblem(t, b.pay(t, orderID, "pay-1", "pm_card_ok"), http.StatusServiceUnavailable, "payment_provider_unavailable")

	if n, err := rc.RecoverOnce(ctx, 10); err != nil || n != 0 || recoveries() != 1 {
		t.Fatalf("first recovery: RecoverOnce = %d, %v, recoveries %d; want 0, nil, 1", n, err, recoveries())
	}
	b.clock.Advance(30 * time.Minute) // within the backoff
	if _, err := rc.RecoverOnce(ctx, 10); err != nil || recoveries() != 1 {
		t.Fatalf("within the backoff: recoveries = %d, %v; want still 1", recoveries(), err)
	}
	calls := provider.callCount()
	// The client is not held back by the recoverer's backoff, nor counted.
	wantProblem(t, b.pay(t, orderID, "pay-1", "pm_card_ok"), http.StatusServiceUnavailable, "payment_provider_unavailable")
	if n := provider.callCount(); n != calls+1 || recoveries() != 1 {
		t.Fatalf("client retry: provider asked %d times (want %d), recoveries %d (want 1)", n, calls+1, recoveries())
	}
	b.clock.Advance(31 * time.Minute) // the backoff ran out
	if _, err := rc.RecoverOnce(ctx, 10); err != nil || recoveries() != 2 {
		t.Fatalf("second recovery: recoveries = %d, %v; want 2", recoveries(), err)
	}
	items := b.attemptItems(t, "payments.create", "pay-1")
	if len(items) != 1 || items[0].Reason != attention.ReasonRecoveryExhausted || items[0].Status() != attention.StatusOpen {
		t.Fatalf("items = %+v, want one open recovery_exhausted", items)
	}
	if n := b.openItems(t, attention.ReasonRecoveryExhausted); n != 1 {
		t.Fatalf("open recovery_exhausted items = %v, want 1", n)
	}
	calls = provider.callCount()
	wantProblem(t, b.pay(t, orderID, "pay-1", "pm_card_ok"), http.StatusConflict, "awaiting_operator")
	b.clock.Advance(24 * time.Hour)
	if _, err := rc.RecoverOnce(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if n := provider.callCount(); n != calls {
		t.Fatalf("provider asked %d times after the hold, want %d", n, calls)
	}

	// The outage is over; the operator tries again.
	provider.set(func(p *oddProvider) { p.down = false })
	if _, err := b.attentionAdmin(t).Resolve(ctx, items[0].ID, attention.ResolutionRetried, "provider outage over"); err != nil {
		t.Fatal(err)
	}
	if recoveries() != 0 {
		t.Fatalf("recoveries after the release = %d, want 0", recoveries())
	}
	r := b.pay(t, orderID, "pay-1", "pm_card_ok")
	if r.status != http.StatusCreated || r.json(t)["status"] != "succeeded" {
		t.Fatalf("retry after the release = %d %s, want 201 succeeded", r.status, r.body)
	}
	if n := b.openItems(t, attention.ReasonRecoveryExhausted); n != 0 {
		t.Fatalf("open recovery_exhausted items = %v, want 0", n)
	}
	if _, err := b.attentionAdmin(t).Resolve(ctx, items[0].ID, attention.ResolutionClosed, "again"); err == nil {
		t.Fatal("resolving a resolved item succeeded")
	}
}

// GET /admin/attention is the operator's: routed only with ADMIN_TOKEN,
// authenticated by it, and strict about its parameters.
func TestAttentionAdminEndpoints(t *testing.T) {
	t.Parallel()
	without := setup(t)
	wantProblem(t, without.do(t, "GET", "/admin/attention", openAPIAdminToken, "", ""), http.StatusNotFound, "not_found")

	b := setup(t, withAdminToken)
	if got := b.admin(t, "GET", "/admin/attention").json(t)["data"].([]any); len(got) != 0 {
		t.Fatalf("open items of a fresh service = %v", got)
	}
	if got := b.admin(t, "GET", "/admin/attention?status=resolved&limit=5").json(t)["data"].([]any); len(got) != 0 {
		t.Fatalf("resolved items of a fresh service = %v", got)
	}
	wantProblem(t, b.admin(t, "GET", "/admin/attention?status=all"), http.StatusUnprocessableEntity, "validation_failed")
	wantProblem(t, b.admin(t, "GET", "/admin/attention/"+uuid.NewString()), http.StatusNotFound, "not_found")
	wantProblem(t, b.admin(t, "GET", "/admin/attention/not-a-uuid"), http.StatusNotFound, "not_found")
	wantProblem(t, b.do(t, "GET", "/admin/attention", "", "", ""), http.StatusUnauthorized, "unauthorized")
	wantProblem(t, b.do(t, "GET", "/admin/attention", acme, "", ""), http.StatusUnauthorized, "unauthorized")
}
