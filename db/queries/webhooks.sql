-- name: WebhookReceiptInsert :execrows
-- WebhookReceiptInsert stores a provider delivery by its delivery id
-- (webhook-id). It affects no row when the delivery was received before: a
-- redelivery changes nothing.
INSERT INTO webhook_receipts (delivery_id, event_type, payload, received_at)
VALUES (@delivery_id, @event_type, @payload, @received_at)
ON CONFLICT (delivery_id) DO NOTHING;

-- name: WebhookReceiptClaimBatch :many
-- WebhookReceiptClaimBatch locks up to max_rows unprocessed receipts, oldest
-- first, skipping those another worker holds. A new receipt is due at once;
-- one that failed n times waits until received_at + (2^n - 1) seconds, so a
-- poison receipt backs off exponentially instead of taking every round's
-- batch.
SELECT * FROM webhook_receipts
WHERE processed_at IS NULL
  AND (attempts = 0 OR received_at + (power(2, LEAST(attempts, 30)) - 1) * interval '1 second' <= @now::timestamptz)
ORDER BY received_at, delivery_id
LIMIT @max_rows
FOR UPDATE SKIP LOCKED;

-- name: WebhookReceiptMarkProcessed :exec
-- WebhookReceiptMarkProcessed finishes a receipt. note, when given, replaces
-- last_error (an event that was not applied, and why); otherwise the last
-- error of an earlier attempt is kept for the record.
UPDATE webhook_receipts
SET processed_at = @processed_at::timestamptz, attempts = attempts + 1, last_error = COALESCE(sqlc.narg('note')::text, last_error)
WHERE delivery_id = @delivery_id;

-- name: WebhookReceiptRecordFailure :exec
-- WebhookReceiptRecordFailure counts a failed attempt and leaves the receipt
-- unprocessed for a later round.
UPDATE webhook_receipts
SET attempts = attempts + 1, last_error = @last_error::text
WHERE delivery_id = @delivery_id;

-- name: WebhookReceiptDeleteProcessed :execrows
-- WebhookReceiptDeleteProcessed deletes processed webhook receipts received
-- at or before cutoff. Unprocessed receipts are never candidates.
-- The batch is a CTE, computed once (see IdempotencyDeleteExpired).
WITH d AS (
    SELECT r.delivery_id FROM webhook_receipts r
    WHERE r.processed_at IS NOT NULL AND r.received_at <= @cutoff::timestamptz
    ORDER BY r.received_at
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
)
DELETE FROM webhook_receipts w
USING d
WHERE w.delivery_id = d.delivery_id;
