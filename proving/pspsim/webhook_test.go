package pspsim

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/testkit"
)

// wireEvent mirrors the webhook body independently of the package types.
type wireEvent struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Created int64  `json:"created"`
	Data    struct {
		Object Charge  `json:"object"`
		Refund *Refund `json:"refund"`
	} `json:"data"`
}

func webhookConfig(rc *receiver, secrets ...string) Config {
	return Config{
		WebhookURL:         rc.ts.URL + "/webhooks/psp",
		WebhookSecrets:     secrets,
		WebhookBackoffBase: 5 * time.Millisecond,
		WebhookBackoffMax:  20 * time.Millisecond,
		WebhookBatchWindow: 20 * time.Millisecond,
	}
}

func waitDelivered(t *testing.T, srv *Server) DeliveryStats {
	t.Helper()
	var st DeliveryStats
	testkit.WaitFor(t, 15*time.Second, "webhook deliveries to finish", func() bool {
		st = srv.Deliveries()
		return st.Pending == 0
	})
	return st
}

func TestWebhooksAreSignedAndDescribeTheCharge(t *testing.T) {
	t.Parallel()
	secret := testSecret("current")
	rc := newReceiver(t)
	h := newHarness(t, webhookConfig(rc, secret))
	startRun(t, h.srv)

	ch := wantCharge(t, h.charge("k1", chargeBody(1200, PaymentMethodOK, "ord_w")))
	e := wantError(t, h.charge("k2", chargeBody(300, PaymentMethodInsufficientFunds, "ord_w")), 402, ErrTypeCard, CodeInsufficientFunds)
	rr := h.refund("k3", fmt.Sprintf(`{"charge":%q,"amount":200}`, ch.ID))
	if rr.status != http.StatusOK {
		t.Fatalf("refund: got %d: %s", rr.status, rr.body)
	}
	rf := decode[Refund](t, rr.body)

	st := waitDelivered(t, h.srv)
	if st.Events != 3 || st.Succeeded != 3 || st.Attempts != 3 || st.Abandoned != 0 {
		t.Fatalf("stats: got %+v, want 3 events delivered once each", st)
	}
	got := rc.all()
	if len(got) != 3 {
		t.Fatalf("received %d webhooks, want 3", len(got))
	}
	ids := map[string]bool{}
	for _, w := range got {
		if !verifySignature(t, secret, w) {
			t.Fatalf("signature %q does not verify for id %s", w.signature, w.id)
		}
		if !strings.HasPrefix(w.id, "msg_") || ids[w.id] {
			t.Fatalf("webhook-id: got %q, want a fresh msg_ id", w.id)
		}
		ids[w.id] = true
		if want := strconv.FormatInt(h.clock.Now().Unix(), 10); w.timestamp != want {
			t.Fatalf("webhook-timestamp: got %q, want %q", w.timestamp, want)
		}
		if w.contentType != "application/json" {
			t.Fatalf("Content-Type: got %q", w.contentType)
		}
		if strings.Count(w.signature, "v1,") != 1 {
			t.Fatalf("signature header: got %q, want one signature", w.signature)
		}
	}

	byType := map[string]wireEvent{}
	for _, w := range got {
		ev := decode[wireEvent](t, w.body)
		if !strings.HasPrefix(ev.ID, "evt_") || ev.Created != h.clock.Now().Unix() {
			t.Fatalf("event envelope: got %+v", ev)
		}
		byType[ev.Type] = ev
	}
	if ev := byType[EventChargeSucceeded]; ev.Data.Object.ID != ch.ID || ev.Data.Object.Status != StatusSucceeded || ev.Data.Refund != nil {
		t.Fatalf("charge.succeeded: got %+v", ev)
	}
	if ev := byType[EventChargeFailed]; ev.Data.Object.ID != e.Error.Charge || ev.Data.Object.FailureCode == nil || *ev.Data.Object.FailureCode != CodeInsufficientFunds {
		t.Fatalf("charge.failed: got %+v", ev)
	}
	ev := byType[EventChargeRefunded]
	if ev.Data.Object.ID != ch.ID || ev.Data.Object.AmountRefunded != 200 || ev.Data.Refund == nil || ev.Data.Refund.ID != rf.ID {
		t.Fatalf("charge.refunded: got %+v", ev)
	}

	// Replays create no new events.
	h.charge("k1", chargeBody(1200, PaymentMethodOK, "ord_w"))
	if st := h.srv.Deliveries(); st.Events != 3 {
		t.Fatalf("events after replay: got %d, want 3", st.Events)
	}
}

func TestWebhookRetriesUntil2xx(t *testing.T) {
	t.Parallel()
	secret := testSecret("retry")
	rc := newReceiver(t, http.StatusInternalServerError, http.StatusServiceUnavailable)
	h := newHarness(t, webhookConfig(rc, secret))
	startRun(t, h.srv)

	wantCharge(t, h.charge("k", chargeBody(100, PaymentMethodOK, "ord_retry")))
	st := waitDelivered(t, h.srv)
	if st.Attempts != 3 || st.Succeeded != 1 || st.Abandoned != 0 {
		t.Fatalf("stats: got %+v, want 3 attempts, 1 success", st)
	}
	got := rc.all()
	if len(got) != 3 {
		t.Fatalf("received %d, want 3", len(got))
	}
	for _, w := range got {
		if w.id != got[0].id || string(w.body) != string(got[0].body) {
			t.Fatalf("retry changed the message: %s %s vs %s %s", w.id, w.body, got[0].id, got[0].body)
		}
		if !verifySignature(t, secret, w) {
			t.Fatalf("retry signature does not verify")
		}
	}
}

func TestWebhookAbandonedAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, 500, 500, 500, 500, 500)
	cfg := webhookConfig(rc, testSecret("x"))
	cfg.WebhookMaxAttempts = 3
	h := newHarness(t, cfg)
	startRun(t, h.srv)
	wantCharge(t, h.charge("k", chargeBody(100, PaymentMethodOK, "r")))
	st := waitDelivered(t, h.srv)
	if st.Attempts != 3 || st.Abandoned != 1 || st.Succeeded != 0 {
		t.Fatalf("stats: got %+v, want 3 attempts then abandoned", st)
	}
}

func TestWebhookDuplicates(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	cfg := webhookConfig(rc, testSecret("dup"))
	cfg.Faults.WebhookDuplicates = 2
	h := newHarness(t, cfg)
	startRun(t, h.srv)

	wantCharge(t, h.charge("k", chargeBody(100, PaymentMethodOK, "r")))
	st := waitDelivered(t, h.srv)
	if st.Events != 1 || st.Succeeded != 3 {
		t.Fatalf("stats: got %+v, want 1 event delivered 3 times", st)
	}
	got := rc.all()
	if len(got) != 3 || got[0].id != got[1].id || got[1].id != got[2].id {
		t.Fatalf("duplicates: got %d deliveries, want 3 with one webhook-id", len(got))
	}

	// Runtime change through the admin endpoint.
	if r := h.must(http.MethodPut, "/admin/faults", "", `{"webhook_duplicates":0}`); r.status != http.StatusOK {
		t.Fatalf("PUT faults: %d", r.status)
	}
	wantCharge(t, h.charge("k2", chargeBody(100, PaymentMethodOK, "r")))
	if st := waitDelivered(t, h.srv); st.Succeeded != 4 {
		t.Fatalf("after disabling duplicates: got %+v, want 4 successes", st)
	}
}

func TestWebhookSecretRotationSendsTwoSignatures(t *testing.T) {
	t.Parallel()
	current, previous := testSecret("new"), testSecret("old")
	rc := newReceiver(t)
	h := newHarness(t, webhookConfig(rc, current, previous))
	startRun(t, h.srv)

	wantCharge(t, h.charge("k", chargeBody(100, PaymentMethodOK, "r")))
	waitDelivered(t, h.srv)
	got := rc.all()
	if len(got) != 1 {
		t.Fatalf("received %d, want 1", len(got))
	}
	sigs := strings.Fields(got[0].signature)
	if len(sigs) != 2 {
		t.Fatalf("signature header %q: want two space-separated signatures", got[0].signature)
	}
	for i, secret := range []string{current, previous} {
		one := got[0]
		one.signature = sigs[i]
		if !verifySignature(t, secret, one) {
			t.Fatalf("signature %d does not verify with its secret", i)
		}
	}
	only := got[0]
	only.signature = sigs[1]
	if verifySignature(t, current, only) {
		t.Fatalf("old signature must not verify with the new secret")
	}
}

func TestWebhookReorderReversesBatch(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	cfg := webhookConfig(rc, testSecret("order"))
	cfg.Faults.WebhookReorder = true
	h := newHarness(t, cfg)

	// Events queue up before the worker starts, so they form one batch.
	var want []string
	for i := range 3 {
		c := wantCharge(t, h.charge(fmt.Sprintf("k%d", i), chargeBody(int64(100+i), PaymentMethodOK, "r")))
		want = append([]string{c.ID}, want...)
	}
	startRun(t, h.srv)
	waitDelivered(t, h.srv)
	got := rc.all()
	if len(got) != 3 {
		t.Fatalf("received %d, want 3", len(got))
	}
	for i, w := range got {
		if id := decode[wireEvent](t, w.body).Data.Object.ID; id != want[i] {
			t.Fatalf("delivery %d: got charge %s, want %s (reverse creation order)", i, id, want[i])
		}
	}
}

func TestRunWithoutWebhooksAndSingleRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.srv.Run(ctx) }()
	testkit.WaitFor(t, 15*time.Second, "Run to start", func() bool {
		h.srv.mu.Lock()
		defer h.srv.mu.Unlock()
		return h.srv.webhooks.running
	})
	if err := h.srv.Run(ctx); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second Run: got %v, want ErrAlreadyRunning", err)
	}
	wantCharge(t, h.charge("k", chargeBody(100, PaymentMethodOK, "r")))
	if st := h.srv.Deliveries(); st != (DeliveryStats{}) {
		t.Fatalf("stats without webhooks: got %+v, want zero", st)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: got %v, want nil", err)
	}
}

func TestWebhookPendingSurvivesRestart(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	h := newHarness(t, webhookConfig(rc, testSecret("restart")))
	wantCharge(t, h.charge("k", chargeBody(100, PaymentMethodOK, "r")))
	if st := h.srv.Deliveries(); st.Pending != 1 {
		t.Fatalf("pending before Run: got %d, want 1", st.Pending)
	}
	startRun(t, h.srv)
	if st := waitDelivered(t, h.srv); st.Succeeded != 1 {
		t.Fatalf("stats: got %+v, want 1 success", st)
	}
	r := h.must(http.MethodGet, "/admin/deliveries", "", "")
	if got := decode[DeliveryStats](t, r.body); got.Succeeded != 1 || got.Pending != 0 {
		t.Fatalf("GET /admin/deliveries: got %+v", got)
	}
}

func TestSignWebhookMatchesIndependentHMAC(t *testing.T) {
	t.Parallel()
	secret := testSecret("sign")
	key, err := ParseWebhookSecret(secret)
	if err != nil {
		t.Fatalf("ParseWebhookSecret: %v", err)
	}
	w := received{id: "msg_1", timestamp: "1700000000", body: []byte(`{"a":1}`)}
	w.signature = SignWebhook(key, w.id, 1700000000, w.body)
	if !verifySignature(t, secret, w) {
		t.Fatalf("SignWebhook output %q does not verify", w.signature)
	}
}

func TestBackoffDoublesAndCaps(t *testing.T) {
	t.Parallel()
	srv, err := New(Config{WebhookBackoffBase: time.Second, WebhookBackoffMax: 5 * time.Second}, nil, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	for attempts, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 5 * time.Second, 60: 5 * time.Second} {
		if got := srv.backoff(attempts); got != want {
			t.Fatalf("backoff(%d): got %v, want %v", attempts, got, want)
		}
	}
}

// A merchant that listens only after the simulator runs is named later:
// events from before are never queued, every one after is delivered there,
// signed like any other.
func TestWebhookURLSetAfterStart(t *testing.T) {
	t.Parallel()
	secret := testSecret("later")
	rc := newReceiver(t)
	cfg := webhookConfig(rc, secret)
	cfg.WebhookURL = ""
	h := newHarness(t, cfg)
	startRun(t, h.srv)

	wantCharge(t, h.charge("k-before", chargeBody(100, PaymentMethodOK, "r")))
	if st := h.srv.Deliveries(); st.Events != 0 {
		t.Fatalf("events without a webhook URL: got %d, want 0", st.Events)
	}
	if err := h.srv.SetWebhookURL(rc.ts.URL + "/webhooks/psp"); err != nil {
		t.Fatalf("SetWebhookURL: %v", err)
	}
	ch := wantCharge(t, h.charge("k-after", chargeBody(200, PaymentMethodOK, "r")))
	if st := waitDelivered(t, h.srv); st.Events != 1 || st.Succeeded != 1 {
		t.Fatalf("stats: got %+v, want 1 event delivered", st)
	}
	got := rc.all()
	if len(got) != 1 || !verifySignature(t, secret, got[0]) {
		t.Fatalf("received %d webhooks, want 1 signed with the secret", len(got))
	}
	if ev := decode[wireEvent](t, got[0].body); ev.Data.Object.ID != ch.ID {
		t.Fatalf("webhook about charge %s, want %s", ev.Data.Object.ID, ch.ID)
	}

	if err := h.srv.SetWebhookURL("/relative"); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("SetWebhookURL(relative): got %v, want ErrInvalidConfig", err)
	}
	unsigned := newHarness(t, Config{})
	if err := unsigned.srv.SetWebhookURL(rc.ts.URL); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("SetWebhookURL without a secret: got %v, want ErrInvalidConfig", err)
	}
}
