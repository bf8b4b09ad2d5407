// Package pspsim is a simulator of a Stripe-like payment service provider
// (PSP), spoken to over real HTTP/JSON. It belongs to oncepay's proving
// ground (proving/), not to the service, and it is no test double: the demo
// and the test suites run the merchant service against it exactly as they
// would run it against a real provider.
//
// # Why it exists
//
// The service passes the same operation identity downstream: when
// oncepay charges a card it sends the provider an
// Idempotency-Key derived from its own operation, so that a repeated call
// (after a timeout, a crash or a dropped connection) is harmless. That only
// holds while the provider still remembers the key. Real providers keep keys
// for a limited time (Stripe: 24 hours), far shorter than the merchant's own
// 45-day idempotency horizon. After the provider forgets the key, the same
// request creates a second charge. The merchant must therefore look charges up
// by its own reference before charging again, and this simulator makes that
// failure mode observable and testable.
//
// # What it simulates
//
//   - Charges and refunds with Stripe-like objects and errors, including
//     declined cards that are recorded as failed charges (HTTP 402).
//   - The provider's own idempotency: same key and same request replays the
//     stored response with "Idempotent-Replayed: true"; same key and a
//     different request is rejected (422); a key still being processed is
//     rejected (409); keys expire after a configurable retention measured on an
//     injected clock, after which the key is treated as new.
//   - Fault injection, configured at start and changed at runtime through
//     /admin/faults: latency, 503s before charging, dropped connections after
//     charging, hung requests after charging, random declines, and
//     deterministic one-shot counters so tests can script a failure exactly,
//     globally or for one scope (ScopedFaults: the charges and refunds of
//     one merchant tenant, named by metadata tenant_id).
//   - Signed webhooks following the Standard Webhooks specification, delivered
//     in the background with exponential backoff, optional duplicates and
//     optional reordering, with several secrets for rotation.
//   - A ledger (/v1/ledger) of every charge and refund ever created with the
//     key that created it: the ground truth for "charged exactly once".
//
// State is in memory; a Server is safe for concurrent use.
package pspsim
