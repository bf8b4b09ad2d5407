// Package webhooks takes the payment provider's webhooks in and applies them.
//
// It owns POST /webhooks/psp (the Receiver), the signature check (the
// Verifier, Standard Webhooks: HMAC-SHA256 over "id.timestamp.body" with any
// of several "whsec_" secrets, so secrets can rotate) and the table
// webhook_receipts with the Worker that drains it.
//
// Two rules make provider deliveries harmless however often they come:
//
//   - Receipt by delivery id before any effect. The Receiver verifies the
//     signature first, validates the envelope, then inserts the receipt keyed
//     by the webhook-id header (INSERT ... ON CONFLICT DO NOTHING) and answers
//     2xx at once. The insert is the request's only effect: a redelivery finds
//     its receipt, answers {"duplicate":true} and changes nothing. The work is
//     queued in the table (processed_at NULL), never done in the request.
//
//   - Order-aware, forward-only application. The Worker claims unprocessed
//     receipts with FOR UPDATE SKIP LOCKED (any number of processes may run
//     one), applies each in provider creation order through
//     payments.Service.ApplyChargeEvent or ApplyRefundEvent, and marks it
//     processed in the same transaction. Those functions only move a payment
//     or refund forward from pending, so a late, repeated or reordered event
//     (charge.succeeded after a refund, charge.failed after a success) changes
//     nothing and emits no event. An event naming nothing of ours is marked
//     processed with a note; any other failure is counted and retried later
//     with exponential backoff.
//
// No other package touches the webhook_receipts table: its queries are in
// internal/webhooks/internal/dbsqlc.
package webhooks
