package conformance

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Cases returns every case of the kit, in the order Run runs them.
func Cases() []Case {
	return []Case{
		{"replay-is-byte-identical", "outcomes",
			"same key, same request, finished | the stored status, Content-Type, Location and byte-identical body, plus Idempotent-Replayed: true",
			replayIsByteIdentical},
		{"expires-header", "expiry-idempotency-expires",
			"Every stored answer, first and replayed, carries Idempotency-Expires: an HTTP-date after which the record may be deleted.",
			expiresHeader},
		{"fingerprint-is-canonical-json", "fingerprint",
			"Key order, whitespace, string escapes and number spelling (2 vs 2.0) do not change it; any change of meaning does.",
			fingerprintIsCanonical},
		{"other-payload-is-refused", "fingerprint",
			"The same key with another fingerprint: 422 idempotency_key_reused. Nothing is executed and the original outcome is untouched.",
			otherPayloadIsRefused},
		{"path-is-in-the-fingerprint", "payments-and-refunds-the-external-side-effect",
			"follow the same contract, with the path parameter in the fingerprint",
			pathIsInTheFingerprint},
		{"tenant-scope", "keys",
			"Keys are scoped by (tenant, operation, key).",
			tenantScope},
		{"operation-scope", "keys",
			"The same key in another tenant or for another operation is another intent.",
			operationScope},
		{"key-length-bounds", "keys",
			"Every POST under /v1 needs an Idempotency-Key header: 1 to 255 visible ASCII characters (0x21-0x7E).",
			keyLengthBounds},
		{"key-errors-are-400", "keys",
			"missing: 400 idempotency_key_missing; malformed or sent twice: 400 idempotency_key_invalid.",
			keyErrors},
		{"key-structured-field-form", "keys",
			"The Structured-Field string form of the IETF draft (Idempotency-Key: \"abc\", with \\\" and \\\\ escapes) is accepted and names the same key as abc.",
			keyStructuredField},
		{"validation-errors-are-not-stored", "outcomes",
			"What is not stored (the key stays free, a retry executes): 401, key errors, request validation errors",
			validationNotStored},
		{"invalid-body-under-a-used-key", "errors",
			"an invalid body is refused as invalid (400, 422 validation_failed) also under a key that another request used (not 422 idempotency_key_reused).",
			invalidBodyUnderUsedKey},
		{"unauthorized-is-not-stored", "outcomes",
			"What is not stored (the key stays free, a retry executes): 401",
			unauthorizedNotStored},
		{"not-found-is-not-stored", "outcomes",
			"404 for an order or payment in the path that does not exist (or belongs to another tenant)",
			notFoundNotStored},
		{"rate-limited-is-not-stored", "errors",
			"rate_limited (with Retry-After; only demo mode's POST /demo/events/{id}/replay, per tenant)",
			rateLimitedNotStored},
		{"business-failures-are-stored", "outcomes",
			"What is stored and replayed: every outcome after execution began: 2xx, and business failures (402 card_declined, 409 order_already_paid, 409 order_not_payable, 409 order_not_cancellable, 422 refund_exceeds_payment).",
			businessFailuresStored},
		{"concurrent-duplicates-one-effect", "in-short",
			"Same key while the first still runs: a brief wait and a replay, or 409 request_in_progress with Retry-After.",
			concurrentDuplicates},
		{"in-flight-answers-409", "payments-and-refunds-the-external-side-effect",
			"the same key while another request of it is at the provider | 409 request_in_progress with Retry-After",
			inFlightAnswers409},
		{"unknown-outcome-is-not-stored", "payments-and-refunds-the-external-side-effect",
			"503 payment_provider_unavailable with Retry-After; nothing final is stored, the attempt stays pending and a retry with the same key resumes it at once",
			unknownOutcomeNotStored},
		{"late-retry-after-expiry", "a-late-retry-after-expiry",
			"same request: the status of the original outcome (201) with the original order as it is now (its status may have moved on), the same Location, and no second order or event.",
			lateRetryAfterExpiry},
		{"key-lookup", "looking-a-key-up",
			"GET /v1/idempotency-keys/{operation}/{key} tells a client what became of one of its keys without sending the request again",
			keyLookup},
		{"cancel-by-key", "giving-up-on-a-payment-by-its-key",
			"Every outcome above is stored under the cancel's key and replayed.",
			cancelByKeyIsStored},
		{"problem-json-everywhere", "errors",
			"Every error is application/problem+json (RFC 9457) with a stable code",
			problemJSONEverywhere},
	}
}

// replayIsByteIdentical: an order's and a payment's 201, sent again under
// their keys, come back byte for byte, marked as replays.
func replayIsByteIdentical(ctx context.Context, k *kit) error {
	a := k.keys[0]
	key := k.key("replay")
	first, err := k.post(ctx, a, "/v1/orders", key, k.orderBody(1))
	if err != nil {
		return err
	}
	if err := want(first, http.StatusCreated); err != nil {
		return err
	}
	if first.replayed() {
		return fmt.Errorf("the first answer says Idempotent-Replayed: %v", first)
	}
	if first.header.Get("Location") == "" {
		return fmt.Errorf("the 201 of an order has no Location: %v", first)
	}
	for range 2 {
		again, err := k.post(ctx, a, "/v1/orders", key, k.orderBody(1))
		if err != nil {
			return err
		}
		if err := sameAnswer(first, again); err != nil {
			return fmt.Errorf("orders.create: %w", err)
		}
	}
	id, err := jsonID(first)
	if err != nil {
		return err
	}
	payKey := k.key("replay-pay")
	path := "/v1/orders/" + id + "/payments"
	paid, err := k.post(ctx, a, path, payKey, payOK)
	if err != nil {
		return err
	}
	if err := want(paid, http.StatusCreated); err != nil {
		return err
	}
	again, err := k.post(ctx, a, path, payKey, payOK)
	if err != nil {
		return err
	}
	if err := sameAnswer(paid, again); err != nil {
		return fmt.Errorf("payments.create: %w", err)
	}
	return nil
}

// expiresHeader: the first answer and its replay carry the same
// Idempotency-Expires, the retention the contract gives each operation
// from the answer's Date: 7 days for an order, 45 for a payment.
func expiresHeader(ctx context.Context, k *kit) error {
	a := k.keys[0]
	check := func(path, key, body string, keep time.Duration) (exchange, error) {
		first, err := k.post(ctx, a, path, key, body)
		if err != nil {
			return first, err
		}
		if err := want(first, http.StatusCreated); err != nil {
			return first, err
		}
		again, err := k.post(ctx, a, path, key, body)
		if err != nil {
			return first, err
		}
		exp := first.header.Get("Idempotency-Expires")
		at, err := http.ParseTime(exp)
		if err != nil {
			return first, fmt.Errorf("%v: Idempotency-Expires %q is not an HTTP-date", first, exp)
		}
		if got := again.header.Get("Idempotency-Expires"); got != exp {
			return first, fmt.Errorf("POST %s: the replay's Idempotency-Expires is %q, the first answer's %q", path, got, exp)
		}
		date, err := http.ParseTime(first.header.Get("Date"))
		if err != nil {
			return first, fmt.Errorf("%v: no Date header to measure Idempotency-Expires from", first)
		}
		if d := at.Sub(date); d < keep-5*time.Minute || d > keep+5*time.Minute {
			return first, fmt.Errorf("POST %s: Idempotency-Expires is %v after Date, want %v", path, d.Round(time.Minute), keep)
		}
		return first, nil
	}
	order, err := check("/v1/orders", k.key("expires"), k.orderBody(1), 7*24*time.Hour)
	if err != nil {
		return err
	}
	id, err := jsonID(order)
	if err != nil {
		return err
	}
	_, err = check("/v1/orders/"+id+"/payments", k.key("expires-pay"), payOK, 45*24*time.Hour)
	return err
}

// fingerprintIsCanonical: the same JSON, reordered, respaced, escaped and
// spelt otherwise, replays; the first answer is untouched.
func fingerprintIsCanonical(ctx context.Context, k *kit) error {
	a := k.keys[0]
	key := k.key("canonical")
	first, err := k.post(ctx, a, "/v1/orders", key, k.orderBody(2))
	if err != nil {
		return err
	}
	if err := want(first, http.StatusCreated); err != nil {
		return err
	}
	escaped := jsonEscapeAll(k.cur)
	variants := []string{
		fmt.Sprintf(`{"items":[{"quantity":2,"sku":%q}],"currency":%q}`, k.sku, k.cur),
		fmt.Sprintf("{\n  \"currency\" : %q ,\n\t\"items\": [ { \"sku\": %q, \"quantity\": 2 } ]\n}\n", k.cur, k.sku),
		fmt.Sprintf(`{"currency":"%s","items":[{"sku":%q,"quantity":2.0}]}`, escaped, k.sku),
	}
	for _, body := range variants {
		again, err := k.post(ctx, a, "/v1/orders", key, body)
		if err != nil {
			return err
		}
		if err := sameAnswer(first, again); err != nil {
			return fmt.Errorf("the same order written as %s: %w", body, err)
		}
	}
	return nil
}

// jsonEscapeAll writes every character of s as a JSON \u escape.
func jsonEscapeAll(s string) string {
	var b strings.Builder
	for _, r := range s {
		fmt.Fprintf(&b, `\u%04x`, r)
	}
	return b.String()
}

// otherPayloadIsRefused: another order under a used key is refused, and the
// key still replays its first answer.
func otherPayloadIsRefused(ctx context.Context, k *kit) error {
	a := k.keys[0]
	key := k.key("reused")
	first, err := k.post(ctx, a, "/v1/orders", key, k.orderBody(1))
	if err != nil {
		return err
	}
	if err := want(first, http.StatusCreated); err != nil {
		return err
	}
	other, err := k.post(ctx, a, "/v1/orders", key, k.orderBody(3))
	if err != nil {
		return err
	}
	if err := wantProblem(other, http.StatusUnprocessableEntity, "idempotency_key_reused"); err != nil {
		return err
	}
	again, err := k.post(ctx, a, "/v1/orders", key, k.orderBody(1))
	if err != nil {
		return err
	}
	return sameAnswer(first, again)
}

// pathIsInTheFingerprint: a payment key used for one order is refused for
// another, which stays payable under a key of its own.
func pathIsInTheFingerprint(ctx context.Context, k *kit) error {
	a := k.keys[0]
	one, _, err := k.createOrder(ctx, a)
	if err != nil {
		return err
	}
	two, _, err := k.createOrder(ctx, a)
	if err != nil {
		return err
	}
	key := k.key("path")
	paid, err := k.post(ctx, a, "/v1/orders/"+one+"/payments", key, payOK)
	if err != nil {
		return err
	}
	if err := want(paid, http.StatusCreated); err != nil {
		return err
	}
	other, err := k.post(ctx, a, "/v1/orders/"+two+"/payments", key, payOK)
	if err != nil {
		return err
	}
	if err := wantProblem(other, http.StatusUnprocessableEntity, "idempotency_key_reused"); err != nil {
		return fmt.Errorf("the same payment key for another order: %w", err)
	}
	own, err := k.post(ctx, a, "/v1/orders/"+two+"/payments", k.key("path-own"), payOK)
	if err != nil {
		return err
	}
	return want(own, http.StatusCreated)
}

// tenantScope: the same key and request in another tenant creates another
// order, which the first tenant cannot see.
func tenantScope(ctx context.Context, k *kit) error {
	key := k.key("tenant")
	a, err := k.post(ctx, k.keys[0], "/v1/orders", key, k.orderBody(1))
	if err != nil {
		return err
	}
	if err := want(a, http.StatusCreated); err != nil {
		return err
	}
	b, err := k.post(ctx, k.keys[1], "/v1/orders", key, k.orderBody(1))
	if err != nil {
		return err
	}
	if err := want(b, http.StatusCreated); err != nil {
		return fmt.Errorf("the second tenant, same key: %w", err)
	}
	if b.replayed() {
		return fmt.Errorf("the second tenant got a replay of the first's answer: %v", b)
	}
	idA, err := jsonID(a)
	if err != nil {
		return err
	}
	idB, err := jsonID(b)
	if err != nil {
		return err
	}
	if idA == idB {
		return fmt.Errorf("both tenants got the order %s", idA)
	}
	seen, err := k.get(ctx, k.keys[0], "/v1/orders/"+idB)
	if err != nil {
		return err
	}
	if err := wantProblem(seen, http.StatusNotFound, "not_found"); err != nil {
		return fmt.Errorf("the first tenant reading the second's order: %w", err)
	}
	return nil
}

// operationScope: an order's key used for its payment is a new intent.
func operationScope(ctx context.Context, k *kit) error {
	a := k.keys[0]
	key := k.key("operation")
	order, err := k.post(ctx, a, "/v1/orders", key, k.orderBody(1))
	if err != nil {
		return err
	}
	if err := want(order, http.StatusCreated); err != nil {
		return err
	}
	id, err := jsonID(order)
	if err != nil {
		return err
	}
	pay, err := k.post(ctx, a, "/v1/orders/"+id+"/payments", key, payOK)
	if err != nil {
		return err
	}
	if err := want(pay, http.StatusCreated); err != nil {
		return fmt.Errorf("paying under the order's own key: %w", err)
	}
	if pay.replayed() {
		return fmt.Errorf("the payment under the order's key is a replay: %v", pay)
	}
	return nil
}

// keyLengthBounds: a key of 255 characters is a key, one of 256 is not, nor
// is one with a character outside 0x21-0x7E.
func keyLengthBounds(ctx context.Context, k *kit) error {
	a := k.keys[0]
	base := k.key("len")
	long := base + strings.Repeat("k", 255-len(base))
	ok, err := k.post(ctx, a, "/v1/orders", long, k.orderBody(1))
	if err != nil {
		return err
	}
	if err := want(ok, http.StatusCreated); err != nil {
		return fmt.Errorf("a key of 255 characters: %w", err)
	}
	again, err := k.post(ctx, a, "/v1/orders", long, k.orderBody(1))
	if err != nil {
		return err
	}
	if err := sameAnswer(ok, again); err != nil {
		return fmt.Errorf("a key of 255 characters: %w", err)
	}
	for what, bad := range map[string]string{
		"a key of 256 characters": long + "k",
		"a key with a space":      base + " x",
	} {
		x, err := k.post(ctx, a, "/v1/orders", bad, k.orderBody(1))
		if err != nil {
			return err
		}
		if err := wantProblem(x, http.StatusBadRequest, "idempotency_key_invalid"); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil
}

// keyErrors: no key, an empty one and two are refused before anything runs.
func keyErrors(ctx context.Context, k *kit) error {
	a := k.keys[0]
	missing, err := k.do(ctx, request{method: http.MethodPost, path: "/v1/orders", apiKey: a, body: k.orderBody(1)})
	if err != nil {
		return err
	}
	if err := wantProblem(missing, http.StatusBadRequest, "idempotency_key_missing"); err != nil {
		return fmt.Errorf("no Idempotency-Key: %w", err)
	}
	empty, err := k.post(ctx, a, "/v1/orders", "", k.orderBody(1))
	if err != nil {
		return err
	}
	if wantProblem(empty, http.StatusBadRequest, "idempotency_key_missing") != nil {
		if err := wantProblem(empty, http.StatusBadRequest, "idempotency_key_invalid"); err != nil {
			return fmt.Errorf("an empty Idempotency-Key: %w", err)
		}
	}
	two, err := k.do(ctx, request{method: http.MethodPost, path: "/v1/orders", apiKey: a,
		keys: []string{k.key("twice-a"), k.key("twice-b")}, body: k.orderBody(1)})
	if err != nil {
		return err
	}
	if err := wantProblem(two, http.StatusBadRequest, "idempotency_key_invalid"); err != nil {
		return fmt.Errorf("two Idempotency-Key headers: %w", err)
	}
	return nil
}

// keyStructuredField: "K" in the Structured-Field string form is K.
func keyStructuredField(ctx context.Context, k *kit) error {
	a := k.keys[0]
	key := k.key("sf")
	first, err := k.post(ctx, a, "/v1/orders", key, k.orderBody(1))
	if err != nil {
		return err
	}
	if err := want(first, http.StatusCreated); err != nil {
		return err
	}
	quoted, err := k.post(ctx, a, "/v1/orders", `"`+key+`"`, k.orderBody(1))
	if err != nil {
		return err
	}
	if err := sameAnswer(first, quoted); err != nil {
		return fmt.Errorf("the key in its quoted form: %w", err)
	}
	// With escapes: "a\"b" names the key a"b.
	esc := k.key("sf-esc") + `"q\`
	sf := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(esc) + `"`
	plain, err := k.post(ctx, a, "/v1/orders", esc, k.orderBody(1))
	if err != nil {
		return err
	}
	if err := want(plain, http.StatusCreated); err != nil {
		return err
	}
	escaped, err := k.post(ctx, a, "/v1/orders", sf, k.orderBody(1))
	if err != nil {
		return err
	}
	if err := sameAnswer(plain, escaped); err != nil {
		return fmt.Errorf("the key %s in its quoted form %s: %w", esc, sf, err)
	}
	return nil
}
