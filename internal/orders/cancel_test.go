package orders_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/testkit"
)

const cancelOrderBody = `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":1}]}`

// cancelEvents returns the order.cancelled events of an order and their
// payloads.
func (b *testBundle) cancelEvents(t *testing.T, orderID uuid.UUID) []map[string]any {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT payload FROM outbox_events WHERE aggregate_id = $1 AND event_type = $2`, orderID, orders.EventOrderCancelled)
	if err != nil {
		t.Fatal(err)
	}
	payloads, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		t.Fatal(err)
	}
	out := make([]map[string]any, len(payloads))
	for i, p := range payloads {
		if err := json.Unmarshal(p, &out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// A cancel of an order awaiting its payment cancels it once: the answer is
// the cancelled order, stored and replayed byte for byte; the event goes
// out once, with the reason; a cancel under a new key of the cancelled order
// answers the order and adds nothing. The body is optional: none and {} are
// the same request.
func TestCancelAnOrderAwaitingItsPayment(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o, _ := b.create(t, b.acme, "cancel-order-1", cancelOrderBody)
	path := "/v1/orders/" + o.ID.String() + "/cancel"

	first := b.do(t, b.acme, http.MethodPost, path, "cancel-1", `{"reason":"changed my mind"}`)
	if first.Status != http.StatusOK {
		t.Fatalf("cancel = %d %s, want 200", first.Status, first.Body)
	}
	var got orderJSON
	if err := json.Unmarshal(first.Body, &got); err != nil {
		t.Fatal(err)
	}
	if got.ID != o.ID || got.Status != string(orders.StatusCancelled) || first.Header.Get("Location") != "/v1/orders/"+o.ID.String() {
		t.Fatalf("cancel answered %s (Location %q), want order %s cancelled", first.Body, first.Header.Get("Location"), o.ID)
	}
	again := b.do(t, b.acme, http.MethodPost, path, "cancel-1", `{ "reason" : "changed my mind" }`)
	if again.Status != first.Status || !bytes.Equal(again.Body, first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay = %d %s (replayed %q), want the first answer byte for byte", again.Status, again.Body, again.Header.Get("Idempotent-Replayed"))
	}
	if r := b.do(t, b.acme, http.MethodPost, path, "cancel-1", `{"reason":"another reason"}`); r.Status != http.StatusUnprocessableEntity || !strings.Contains(string(r.Body), "idempotency_key_reused") {
		t.Fatalf("the key with another reason = %d %s, want 422 idempotency_key_reused", r.Status, r.Body)
	}
	other := b.do(t, b.acme, http.MethodPost, path, "cancel-2", "")
	if other.Status != http.StatusOK || other.Header.Get("Idempotent-Replayed") != "" || !bytes.Equal(other.Body, first.Body) {
		t.Fatalf("a cancel of the cancelled order under a new key = %d %s, want 200 and the order", other.Status, other.Body)
	}
	if r := b.do(t, b.acme, http.MethodPost, path, "cancel-2", `{}`); r.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(r.Body, other.Body) {
		t.Fatalf("{} after no body under one key = %d %s, want the replay of the first", r.Status, r.Body)
	}
	events := b.cancelEvents(t, o.ID)
	if len(events) != 1 || events[0]["reason"] != "changed my mind" || events[0]["order"].(map[string]any)["status"] != "cancelled" {
		t.Fatalf("order.cancelled events = %v, want one with the reason and the cancelled order", events)
	}
}

// A cancel the lifecycle does not allow is refused, and the refusal is an
// answer like any other: stored and replayed, never executed later.
func TestCancelOfAPaidOrderIsRefusedAndStored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o, _ := b.create(t, b.acme, "cancel-order-paid", cancelOrderBody)
	ctx := context.Background()
	if err := postgres.InTx(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.svc.Advance(ctx, tx, b.acme.ID, o.ID, orders.StatusPaid)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	path := "/v1/orders/" + o.ID.String() + "/cancel"
	first := b.do(t, b.acme, http.MethodPost, path, "cancel-paid", "")
	if first.Status != http.StatusConflict || !strings.Contains(string(first.Body), `"code":"order_not_cancellable"`) {
		t.Fatalf("cancel of a paid order = %d %s, want 409 order_not_cancellable", first.Status, first.Body)
	}
	again := b.do(t, b.acme, http.MethodPost, path, "cancel-paid", "")
	if again.Status != http.StatusConflict || !bytes.Equal(again.Body, first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the refusal's replay = %d %s (replayed %q)", again.Status, again.Body, again.Header.Get("Idempotent-Replayed"))
	}
	if got, err := b.svc.Get(ctx, b.acme.ID, o.ID); err != nil || got.Status != orders.StatusPaid {
		t.Fatalf("order after the refused cancel: %v %v, want paid", got.Status, err)
	}
	if n := len(b.cancelEvents(t, o.ID)); n != 0 {
		t.Fatalf("%d order.cancelled events for a refused cancel", n)
	}
}

// What is wrong with a cancel request is answered before anything runs and
// is not stored: the key stays free for the corrected request.
func TestCancelRequestErrorsAreNotStored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o, _ := b.create(t, b.acme, "cancel-order-bad", cancelOrderBody)
	path := "/v1/orders/" + o.ID.String() + "/cancel"
	for _, tc := range []struct {
		name, path, body string
		status           int
		code             string
	}{
		{"a reason too long", path, `{"reason":"` + strings.Repeat("x", orders.MaxReasonLen+1) + `"}`, http.StatusUnprocessableEntity, "validation_failed"},
		{"a control character", path, `{"reason":"a\u0000b"}`, http.StatusUnprocessableEntity, "validation_failed"},
		{"an empty reason", path, `{"reason":""}`, http.StatusUnprocessableEntity, "validation_failed"},
		{"an unknown member", path, `{"why":"x"}`, http.StatusUnprocessableEntity, "validation_failed"},
		{"not JSON", path, `reason=x`, http.StatusBadRequest, "invalid_json"},
		{"another tenant's order", path, ``, http.StatusNotFound, "not_found"},
		{"no such order", "/v1/orders/" + uuid.New().String() + "/cancel", ``, http.StatusNotFound, "not_found"},
		{"not an id", "/v1/orders/nope/cancel", ``, http.StatusNotFound, "not_found"},
	} {
		tenant := b.acme
		if tc.name == "another tenant's order" {
			tenant = b.globex
		}
		r := b.do(t, tenant, http.MethodPost, tc.path, "cancel-bad", tc.body)
		if r.Status != tc.status || !strings.Contains(string(r.Body), `"code":"`+tc.code+`"`) || r.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s %s, want %d %s", tc.name, r.Status, r.Header.Get("Content-Type"), r.Body, tc.status, tc.code)
		}
	}
	if r := b.do(t, b.acme, http.MethodPost, path, "cancel-bad", ""); r.Status != http.StatusOK {
		t.Fatalf("the key after refused requests = %d %s, want the cancel executed", r.Status, r.Body)
	}
}

// Without the payments feature's answer, a cancel cannot tell whether the
// order is being paid: it fails instead of cancelling blind.
func TestCancelWithoutLivePaymentNeverCancels(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o, _ := b.create(t, b.acme, "cancel-order-blind", cancelOrderBody)
	store := idempotency.NewStore(operation.PolicyOf(orders.Specs()), time.Now)
	blind := orders.NewService(b.pool, operation.NewRunner(b.pool, store, testkit.Logger(t)), time.Now)
	fp, err := idempotency.NewFingerprint(orders.OpCancel, []string{o.ID.String()}, []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req := idempotency.Request{TenantID: b.acme.ID, Operation: orders.OpCancel, Key: "blind-1", Fingerprint: fp}
	if _, err := blind.Cancel(context.Background(), req, orders.CancelInput{OrderID: o.ID}); err == nil {
		t.Fatal("a cancel without LivePayment ran")
	}
	if got, err := b.svc.Get(context.Background(), b.acme.ID, o.ID); err != nil || got.Status != orders.StatusAwaitingPayment {
		t.Fatalf("order after the blind cancel: %v %v, want awaiting_payment", got.Status, err)
	}
}
