package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// freeKey checks that key is still free after refusals: a valid order under
// it executes (a 201 that is no replay).
func (k *kit) freeKey(ctx context.Context, apiKey, key string) error {
	x, err := k.post(ctx, apiKey, "/v1/orders", key, k.orderBody(1))
	if err != nil {
		return err
	}
	if err := want(x, http.StatusCreated); err != nil {
		return fmt.Errorf("the corrected request under the same key: %w", err)
	}
	if x.replayed() {
		return fmt.Errorf("the corrected request under the same key is a replay: %v", x)
	}
	return nil
}

// validationNotStored: a body that is not JSON, and one that is invalid,
// leave the key free for the corrected request.
func validationNotStored(ctx context.Context, k *kit) error {
	a := k.keys[0]
	key := k.key("invalid")
	x, err := k.post(ctx, a, "/v1/orders", key, `{"currency":`)
	if err != nil {
		return err
	}
	if err := wantProblem(x, http.StatusBadRequest, "invalid_json"); err != nil {
		return err
	}
	x, err = k.post(ctx, a, "/v1/orders", key, fmt.Sprintf(`{"currency":%q,"items":[{"sku":%q,"quantity":1}]}`, k.cur, k.sku+"-no-such-product"))
	if err != nil {
		return err
	}
	if err := wantProblem(x, http.StatusUnprocessableEntity, "validation_failed"); err != nil {
		return err
	}
	return k.freeKey(ctx, a, key)
}

// invalidBodyUnderUsedKey: under a key whose request succeeded, an invalid
// body is answered as invalid, and the key still replays its answer.
func invalidBodyUnderUsedKey(ctx context.Context, k *kit) error {
	a := k.keys[0]
	key := k.key("used")
	first, err := k.post(ctx, a, "/v1/orders", key, k.orderBody(1))
	if err != nil {
		return err
	}
	if err := want(first, http.StatusCreated); err != nil {
		return err
	}
	x, err := k.post(ctx, a, "/v1/orders", key, fmt.Sprintf(`{"currency":%q,"items":[]}`, k.cur))
	if err != nil {
		return err
	}
	if err := wantProblem(x, http.StatusUnprocessableEntity, "validation_failed"); err != nil {
		return err
	}
	x, err = k.post(ctx, a, "/v1/orders", key, `[`)
	if err != nil {
		return err
	}
	if err := wantProblem(x, http.StatusBadRequest, "invalid_json"); err != nil {
		return err
	}
	again, err := k.post(ctx, a, "/v1/orders", key, k.orderBody(1))
	if err != nil {
		return err
	}
	return sameAnswer(first, again)
}

// unauthorizedNotStored: a request without a valid API key is 401 with its
// challenge, and its key stays free.
func unauthorizedNotStored(ctx context.Context, k *kit) error {
	key := k.key("unauthorized")
	for what, apiKey := range map[string]string{"an unknown API key": k.prefix + "-not-a-key", "no API key": ""} {
		x, err := k.post(ctx, apiKey, "/v1/orders", key, k.orderBody(1))
		if err != nil {
			return err
		}
		if err := wantProblem(x, http.StatusUnauthorized, "unauthorized"); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if !strings.HasPrefix(x.header.Get("WWW-Authenticate"), "Bearer") {
			return fmt.Errorf("%s: WWW-Authenticate %q, want Bearer", what, x.header.Get("WWW-Authenticate"))
		}
	}
	return k.freeKey(ctx, k.keys[0], key)
}

// notFoundNotStored: a payment of an order that does not exist, or is
// another tenant's, is 404 and leaves the payment key free for an order
// that exists.
func notFoundNotStored(ctx context.Context, k *kit) error {
	a := k.keys[0]
	theirs, _, err := k.createOrder(ctx, k.keys[1])
	if err != nil {
		return err
	}
	mine, _, err := k.createOrder(ctx, a)
	if err != nil {
		return err
	}
	key := k.key("notfound")
	for what, id := range map[string]string{"an order that does not exist": "00000000-0000-7000-8000-000000000000", "another tenant's order": theirs} {
		x, err := k.post(ctx, a, "/v1/orders/"+id+"/payments", key, payOK)
		if err != nil {
			return err
		}
		if err := wantProblem(x, http.StatusNotFound, "not_found"); err != nil {
			return fmt.Errorf("paying %s: %w", what, err)
		}
	}
	x, err := k.post(ctx, a, "/v1/orders/"+mine+"/payments", key, payOK)
	if err != nil {
		return err
	}
	if err := want(x, http.StatusCreated); err != nil {
		return fmt.Errorf("paying an order of one's own under the key a 404 answered: %w", err)
	}
	if x.replayed() {
		return fmt.Errorf("the payment is a replay: %v", x)
	}
	return nil
}

// rateLimitedNotStored: no request that carries an idempotency key can meet
// a 429 in this contract.
func rateLimitedNotStored(context.Context, *kit) error {
	return notApplicable{"the contract answers 429 only on POST /demo/events/{id}/replay, which takes no Idempotency-Key: no keyed request can meet a 429 to store (its analogue on /v1, 503, is unknown-outcome-is-not-stored)"}
}

// businessFailuresStored: a decline and a refusal of a paid order are
// answered, stored and replayed byte for byte.
func businessFailuresStored(ctx context.Context, k *kit) error {
	a := k.keys[0]
	id, _, err := k.createOrder(ctx, a)
	if err != nil {
		return err
	}
	path := "/v1/orders/" + id + "/payments"
	declineKey := k.key("declined")
	declined, err := k.post(ctx, a, path, declineKey, `{"payment_method":"pm_card_declined"}`)
	if err != nil {
		return err
	}
	if err := wantProblem(declined, http.StatusPaymentRequired, "card_declined"); err != nil {
		return err
	}
	again, err := k.post(ctx, a, path, declineKey, `{"payment_method":"pm_card_declined"}`)
	if err != nil {
		return err
	}
	if err := sameAnswer(declined, again); err != nil {
		return fmt.Errorf("402 card_declined: %w", err)
	}
	paid, err := k.post(ctx, a, path, k.key("paid"), payOK)
	if err != nil {
		return err
	}
	if err := want(paid, http.StatusCreated); err != nil {
		return fmt.Errorf("paying after a decline, under a new key: %w", err)
	}
	twiceKey := k.key("twice")
	twice, err := k.post(ctx, a, path, twiceKey, payOK)
	if err != nil {
		return err
	}
	if err := wantProblem(twice, http.StatusConflict, "order_already_paid"); err != nil {
		return err
	}
	again, err = k.post(ctx, a, path, twiceKey, payOK)
	if err != nil {
		return err
	}
	if err := sameAnswer(twice, again); err != nil {
		return fmt.Errorf("409 order_already_paid: %w", err)
	}
	return nil
}

// lateRetryAfterExpiry: once the records expired (Target.Expire), an
// order's and a payment's retries find the original, as it is now, and the
// late answer is stored; another order under the key is refused.
func lateRetryAfterExpiry(ctx context.Context, k *kit) error {
	if k.expire == nil {
		return notApplicable{"no Expire hook: a URL gives no way to make the target's records expire (7 and 45 days); a Go test that owns the target's clock passes one (Target.Expire)"}
	}
	a := k.keys[0]
	key := k.key("late")
	first, err := k.post(ctx, a, "/v1/orders", key, k.orderBody(1))
	if err != nil {
		return err
	}
	if err := want(first, http.StatusCreated); err != nil {
		return err
	}
	id, err := jsonID(first)
	if err != nil {
		return err
	}
	payKey := k.key("late-pay")
	path := "/v1/orders/" + id + "/payments"
	paid, err := k.post(ctx, a, path, payKey, payOK)
	if err != nil {
		return err
	}
	if err := want(paid, http.StatusCreated); err != nil {
		return err
	}
	if err := k.expire(ctx); err != nil {
		return fmt.Errorf("the Expire hook: %w", err)
	}
	late, err := k.post(ctx, a, "/v1/orders", key, k.orderBody(1))
	if err != nil {
		return err
	}
	if err := want(late, http.StatusCreated); err != nil {
		return fmt.Errorf("the order's late retry: %w", err)
	}
	if lateID, _ := jsonID(late); lateID != id {
		return fmt.Errorf("the order's late retry answered the order %s, want the original %s", lateID, id)
	}
	if late.header.Get("Location") != first.header.Get("Location") {
		return fmt.Errorf("the order's late retry has Location %q, want %q", late.header.Get("Location"), first.header.Get("Location"))
	}
	if late.replayed() {
		return fmt.Errorf("the order's late retry says Idempotent-Replayed, though its record was gone: %v", late)
	}
	again, err := k.post(ctx, a, "/v1/orders", key, k.orderBody(1))
	if err != nil {
		return err
	}
	if err := sameAnswer(late, again); err != nil {
		return fmt.Errorf("the late answer is not stored: %w", err)
	}
	payLate, err := k.post(ctx, a, path, payKey, payOK)
	if err != nil {
		return err
	}
	if err := want(payLate, http.StatusCreated); err != nil {
		return fmt.Errorf("the payment's late retry: %w", err)
	}
	if got, want := mustID(payLate), mustID(paid); got != want {
		return fmt.Errorf("the payment's late retry answered the payment %s, want the original %s", got, want)
	}
	other, err := k.post(ctx, a, "/v1/orders", key, k.orderBody(2))
	if err != nil {
		return err
	}
	return wantProblem(other, http.StatusUnprocessableEntity, "idempotency_key_reused")
}

func mustID(x exchange) string {
	id, _ := jsonID(x)
	return id
}

// problemJSONEverywhere: a few errors of every kind, and every error answer
// the run met, are problems with a code.
func problemJSONEverywhere(ctx context.Context, k *kit) error {
	a := k.keys[0]
	for _, r := range []request{
		{method: http.MethodGet, path: "/v1/no-such-route", apiKey: a},
		{method: http.MethodDelete, path: "/v1/orders", apiKey: a},
		{method: http.MethodGet, path: "/v1/products"},
		{method: http.MethodGet, path: "/v1/orders/not-an-id", apiKey: a},
		{method: http.MethodPost, path: "/v1/orders", apiKey: a, keys: []string{k.key("large")},
			body: `{"currency":"` + strings.Repeat("x", 70_000) + `"}`},
	} {
		x, err := k.do(ctx, r)
		if err != nil {
			return err
		}
		if x.status < 400 {
			return fmt.Errorf("%v, want an error", x)
		}
	}
	k.mu.Lock()
	seen := append([]exchange(nil), k.errorsSeen...)
	k.mu.Unlock()
	codes := map[string]int{}
	for _, x := range seen {
		if err := isProblem(x, ""); err != nil {
			return err
		}
		var p struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(x.body, &p) // isProblem read it already
		codes[fmt.Sprintf("%d %s", x.status, p.Code)]++
	}
	if len(codes) < 5 {
		return fmt.Errorf("the run met only %d kinds of error, too few to judge: %v", len(codes), codes)
	}
	return nil
}
