// Package client is a Go client for the oncepay orders and payments API that
// keeps the API's idempotency contract for its caller.
//
// Every POST is one business intent under one Idempotency-Key: a key names
// an intent, never a transport attempt. The client makes
// a fresh key per call, or uses the caller's ([WithIdempotencyKey]), and sends
// that same key on every attempt of the call. This is what makes its retries
// safe: a retry after a lost response, a dropped connection, a 5xx or
// 409 request_in_progress either replays the stored answer or resumes the
// same attempt on the server, and never charges twice.
//
// What is retried, with the same key: network errors (including a connection
// that drops after the request was sent), 500, 502, 503 and 504, and
// 409 request_in_progress. Waits honour Retry-After as their floor and
// otherwise grow exponentially with jitter up to a cap. A Retry-After over
// a minute is not waited for: the call returns the [*Error] with its
// RetryAfter, and the caller retries with the key from [Meta] then
// (docs/CONTRACT.md, "Retry-After"). The number of attempts is bounded
// ([WithMaxAttempts]) and the caller's context bounds the whole call. A
// definite answer is never retried: 2xx, and every other 4xx, such as
// 402 card_declined or 422 idempotency_key_reused. Nor is
// 409 awaiting_operator: the attempt is held until an operator has looked at
// it, so a retry would get the same answer; the same key, later, gets the
// attempt's outcome once an operator released it, and a new key would be a
// new intent. (Go's http.Transport may
// also re-send a request that carries an Idempotency-Key once when a reused
// connection fails; that re-send has the same key too, and is not counted in
// Meta.Attempts or reported to OnRetry.)
//
// Errors the API answers are [*Error] values decoded from
// application/problem+json; branch on their stable code with [IsCode] or
// errors.As. [Retryable] tells a definite failure from one whose outcome is
// still open, which a caller resumes later with the key from [Meta].
//
// Every POST returns a [Meta] beside its result, also when it fails: the key
// that was used, whether the answer was a replay (Idempotent-Replayed), and
// how long the server keeps the key's record (Idempotency-Expires).
//
// In short (the package's Example runs the whole flow, retry and replay
// included, against a stand-in server as part of go test):
//
//	c, err := client.New("http://127.0.0.1:8080", "sk_test_acme")
//	if err != nil { ... }
//	order, _, err := c.CreateOrder(ctx, client.CreateOrderRequest{
//		Currency: "EUR",
//		Items:    []client.LineItem{{SKU: "travel-mug", Quantity: 2}},
//	})
//	// Keep the key with the intent to resume it after a crash of your own.
//	key := client.NewIdempotencyKey()
//	payment, meta, err := c.Pay(ctx, order.ID, client.PaymentMethodOK, client.WithIdempotencyKey(key))
//	if client.IsCode(err, client.CodeCardDeclined) { ... } // definite: a new attempt needs a new key
//	if client.Retryable(err) { ... }                        // open: retry later with meta.IdempotencyKey
//
// The package is the public face of the contract in docs/CONTRACT.md and
// imports nothing of the service: its types mirror the API's JSON.
package client
