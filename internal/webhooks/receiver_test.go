package webhooks_test

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/testkit"
	"github.com/oncepay/oncepay/internal/webhooks"
	"github.com/oncepay/oncepay/internal/wire"
)

// Every delivery that is not provably the provider's, and recent, is 401
// and stores nothing.
func TestUnverifiedDeliveriesAreRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := b.payment(t, payments.StatusPending)
	body := chargeEvent(t, webhooks.EventChargeSucceeded, f.tenant, f.payment.String(), chargeIDOf(f.payment), b.clock.Now().Unix())
	now := b.clock.Now().Unix()
	without := func(h map[string]string, name string) map[string]string {
		delete(h, name)
		return h
	}
	for _, tc := range []struct {
		name   string
		header map[string]string
	}{
		{"no headers", map[string]string{}},
		{"no webhook-id", without(signedHeaders("msg_1", now, body, b.current), webhooks.HeaderID)},
		{"no webhook-timestamp", without(signedHeaders("msg_1", now, body, b.current), webhooks.HeaderTimestamp)},
		{"no webhook-signature", without(signedHeaders("msg_1", now, body, b.current), webhooks.HeaderSignature)},
		{"timestamp not a number", map[string]string{webhooks.HeaderID: "msg_1", webhooks.HeaderTimestamp: "yesterday", webhooks.HeaderSignature: "v1,AAAA"}},
		{"wrong signature", map[string]string{webhooks.HeaderID: "msg_1", webhooks.HeaderTimestamp: strconv.FormatInt(now, 10), webhooks.HeaderSignature: "v1,c2lnbmF0dXJl"}},
		{"unknown secret", signedHeaders("msg_1", now, body, b.unknown)},
		{"signed for another body", signedHeaders("msg_1", now, []byte(`{}`), b.current)},
		{"signed for another delivery id", func() map[string]string {
			h := signedHeaders("msg_0", now, body, b.current)
			h[webhooks.HeaderID] = "msg_1"
			return h
		}()},
		{"stale timestamp", signedHeaders("msg_1", now-int64((5*time.Minute+time.Second)/time.Second), body, b.current)},
		{"future timestamp", signedHeaders("msg_1", now+int64((5*time.Minute+time.Second)/time.Second), body, b.current)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := b.post(t, tc.header, body)
			testkit.WantProblem(t, r, http.StatusUnauthorized, problem.Unauthorized)
			// The provider signs; a Bearer challenge would ask it for a
			// token it does not have.
			if got, ok := r.Header["Www-Authenticate"]; ok {
				t.Fatalf("WWW-Authenticate = %q, want none", got)
			}
			if n := b.count(t, `SELECT count(*) FROM webhook_receipts`); n != 0 {
				t.Fatalf("receipts = %d, want 0", n)
			}
		})
	}
	if n := b.processOnce(t, 10); n != 0 {
		t.Fatalf("ProcessOnce = %d, want 0", n)
	}
	if s := b.state(t, f); s.payment != payments.StatusPending || s.succeeded != 0 {
		t.Fatalf("state = %+v, want the payment untouched", s)
	}
}

// Rotation: while the verifier holds the old and the new secret, a delivery
// signed only with the old one is accepted; one signed with neither is not.
func TestRotatedSecret(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := b.payment(t, payments.StatusPending)
	body := chargeEvent(t, webhooks.EventChargeSucceeded, f.tenant, f.payment.String(), chargeIDOf(f.payment), b.clock.Now().Unix())
	now := b.clock.Now().Unix()

	wantReceived(t, b.post(t, signedHeaders("msg_old", now, body, b.old), body), false)
	wantReceived(t, b.post(t, signedHeaders("msg_both", now, body, b.unknown, b.current), body), false)
	testkit.WantProblem(t, b.post(t, signedHeaders("msg_unknown", now, body, b.unknown), body), http.StatusUnauthorized, problem.Unauthorized)

	if n := b.count(t, `SELECT count(*) FROM webhook_receipts`); n != 2 {
		t.Fatalf("receipts = %d, want 2", n)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_receipts WHERE delivery_id = 'msg_unknown'`); n != 0 {
		t.Fatalf("the unverified delivery was stored")
	}
}

// A verified delivery whose body is not a valid event is refused with a 4xx
// and stores nothing.
func TestMalformedBodiesAreRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		name   string
		body   string
		status int
		code   problem.Code
	}{
		{"empty", ``, http.StatusBadRequest, problem.InvalidJSON},
		{"not JSON", `{"id":"evt_1","type":`, http.StatusBadRequest, problem.InvalidJSON},
		{"trailing data", `{"id":"evt_1"} {}`, http.StatusBadRequest, problem.InvalidJSON},
		{"not an object", `["charge.succeeded"]`, http.StatusUnprocessableEntity, problem.ValidationFailed},
		{"wrong types", `{"id":1,"type":"charge.succeeded","data":{"object":{"id":"ch_1","status":"succeeded"}}}`, http.StatusUnprocessableEntity, problem.ValidationFailed},
		{"unknown type", `{"id":"evt_1","type":"charge.disputed","data":{"object":{"id":"ch_1","status":"succeeded"}}}`, http.StatusUnprocessableEntity, problem.ValidationFailed},
		{"no type", `{"id":"evt_1","data":{"object":{"id":"ch_1","status":"succeeded"}}}`, http.StatusUnprocessableEntity, problem.ValidationFailed},
		{"no id", `{"type":"charge.succeeded","data":{"object":{"id":"ch_1","status":"succeeded"}}}`, http.StatusUnprocessableEntity, problem.ValidationFailed},
		{"no object", `{"id":"evt_1","type":"charge.succeeded","data":{}}`, http.StatusUnprocessableEntity, problem.ValidationFailed},
		{"null object", `{"id":"evt_1","type":"charge.succeeded","data":{"object":null}}`, http.StatusUnprocessableEntity, problem.ValidationFailed},
		{"object without id", `{"id":"evt_1","type":"charge.succeeded","data":{"object":{"status":"succeeded"}}}`, http.StatusUnprocessableEntity, problem.ValidationFailed},
		{"object of the wrong shape", `{"id":"evt_1","type":"charge.succeeded","data":{"object":{"id":"ch_1","status":"succeeded","amount":"5000"}}}`, http.StatusUnprocessableEntity, problem.ValidationFailed},
		{"status contradicts type", `{"id":"evt_1","type":"charge.succeeded","data":{"object":{"id":"ch_1","status":"failed"}}}`, http.StatusUnprocessableEntity, problem.ValidationFailed},
		{"refund event without refund", `{"id":"evt_1","type":"charge.refunded","data":{"object":{"id":"ch_1","status":"succeeded"}}}`, http.StatusUnprocessableEntity, problem.ValidationFailed},
		{"refund without id", `{"id":"evt_1","type":"charge.refunded","data":{"object":{"id":"ch_1","status":"succeeded"},"refund":{"amount":1}}}`, http.StatusUnprocessableEntity, problem.ValidationFailed},
		{"NUL in a string", `{"id":"evt_1","type":"charge.succeeded","data":{"object":{"id":"ch_1\u0000","status":"succeeded"}}}`, http.StatusBadRequest, problem.InvalidJSON},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testkit.WantProblem(t, b.deliver(t, "msg_"+strings.ReplaceAll(tc.name, " ", "_"), []byte(tc.body)), tc.status, tc.code)
			if n := b.count(t, `SELECT count(*) FROM webhook_receipts`); n != 0 {
				t.Fatalf("receipts = %d, want 0", n)
			}
		})
	}
	long := strings.Repeat("m", 256)
	body := []byte(`{"id":"evt_1","type":"charge.succeeded","data":{"object":{"id":"ch_1","status":"succeeded"}}}`)
	testkit.WantProblem(t, b.deliver(t, long, body), http.StatusUnprocessableEntity, problem.ValidationFailed)
	big := append([]byte(`{"id":"evt_1","pad":"`), strings.Repeat("x", wire.MaxBodyBytes)...)
	testkit.WantProblem(t, b.deliver(t, "msg_big", append(big, `"}`...)), http.StatusRequestEntityTooLarge, problem.RequestTooLarge)
	if n := b.count(t, `SELECT count(*) FROM webhook_receipts`); n != 0 {
		t.Fatalf("receipts = %d, want 0", n)
	}
}

// Drill 5: the provider delivers the same webhook three times. One receipt,
// the repeats answer 2xx duplicate, and the payment succeeds once with one
// event.
func TestDrill5_SameWebhookThreeTimes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := b.payment(t, payments.StatusPending)
	body := chargeEvent(t, webhooks.EventChargeSucceeded, f.tenant, f.payment.String(), chargeIDOf(f.payment), b.clock.Now().Unix())

	wantReceived(t, b.deliver(t, "msg_drill5", body), false)
	b.clock.Advance(time.Second) // a retry is stamped anew and signed again
	wantReceived(t, b.deliver(t, "msg_drill5", body), true)
	wantReceived(t, b.deliver(t, "msg_drill5", body), true)
	if n := b.count(t, `SELECT count(*) FROM webhook_receipts`); n != 1 {
		t.Fatalf("receipts = %d, want 1", n)
	}
	// Nothing is applied by the request itself.
	if s := b.state(t, f); s.payment != payments.StatusPending || s.succeeded != 0 {
		t.Fatalf("state before processing = %+v", s)
	}

	if n := b.processOnce(t, 10); n != 1 {
		t.Fatalf("ProcessOnce = %d, want 1", n)
	}
	wantReceived(t, b.deliver(t, "msg_drill5", body), true) // a fourth, after processing
	if n := b.processOnce(t, 10); n != 0 {
		t.Fatalf("second ProcessOnce = %d, want 0", n)
	}
	want := state{payment: payments.StatusSucceeded, order: "paid", succeeded: 1}
	if got := b.state(t, f); got != want {
		t.Fatalf("state = %+v, want %+v", got, want)
	}
	if got := b.str(t, `SELECT provider_charge_id FROM payments WHERE id = $1`, f.payment); got != chargeIDOf(f.payment) {
		t.Fatalf("provider_charge_id = %q, want %q", got, chargeIDOf(f.payment))
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_receipts WHERE processed_at IS NOT NULL AND attempts = 1 AND last_error IS NULL`); n != 1 {
		t.Fatalf("cleanly processed receipts = %d, want 1", n)
	}
}

// A new receipt wakes the worker (WithNotify) once it is stored; a
// duplicate and a refused delivery store nothing and wake nobody.
func TestNewReceiptWakesTheWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := b.payment(t, payments.StatusPending)
	body := chargeEvent(t, webhooks.EventChargeSucceeded, f.tenant, f.payment.String(), chargeIDOf(f.payment), b.clock.Now().Unix())
	wantReceived(t, b.deliver(t, "msg_wake", body), false)
	if n := b.notified.Load(); n != 1 {
		t.Fatalf("wake-ups after a new receipt = %d, want 1", n)
	}
	wantReceived(t, b.deliver(t, "msg_wake", body), true)
	if r := b.post(t, signedHeaders("msg_other", b.clock.Now().Unix(), body, b.unknown), body); r.Status != http.StatusUnauthorized {
		t.Fatalf("delivery signed with an unknown secret: status %d, want 401", r.Status)
	}
	if n := b.notified.Load(); n != 1 {
		t.Fatalf("wake-ups after a duplicate and a refused delivery = %d, want still 1", n)
	}
}

// Concurrent copies of one delivery: exactly one is new.
func TestConcurrentDuplicateDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := b.payment(t, payments.StatusPending)
	body := chargeEvent(t, webhooks.EventChargeSucceeded, f.tenant, f.payment.String(), chargeIDOf(f.payment), b.clock.Now().Unix())
	const copies = 8
	header := signedHeaders("msg_concurrent", b.clock.Now().Unix(), body, b.current)
	answers := make([]testkit.Response, copies)
	errs := make([]error, copies)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range copies {
		wg.Go(func() {
			<-start
			answers[i], errs[i] = b.try(header, body)
		})
	}
	close(start)
	wg.Wait()
	fresh := 0
	for i, a := range answers {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if a.Status != http.StatusOK {
			t.Fatalf("status = %d, body %s", a.Status, a.Body)
		}
		if strings.Contains(string(a.Body), `"duplicate":false`) {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("answers with duplicate:false = %d, want 1", fresh)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_receipts`); n != 1 {
		t.Fatalf("receipts = %d, want 1", n)
	}
}
