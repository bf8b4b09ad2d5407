-- name: RetentionDeleteIdempotency :execrows
-- RetentionDeleteIdempotency deletes up to max_rows finished idempotency
-- records that expired at or before cutoff, oldest first. Pending records
-- (an operation still unsettled) are never candidates. SKIP LOCKED: a record
-- a request is reading for update is left for the next round, and two
-- sweepers never wait on each other.
DELETE FROM api_idempotency a
USING (
    SELECT r.tenant_id, r.operation, r.idempotency_key FROM api_idempotency r
    WHERE r.state <> 'pending' AND r.expires_at <= @cutoff::timestamptz
    ORDER BY r.expires_at
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
) d
WHERE a.tenant_id = d.tenant_id AND a.operation = d.operation AND a.idempotency_key = d.idempotency_key;

-- name: RetentionDeletePublishedEvents :execrows
-- RetentionDeletePublishedEvents deletes published outbox rows published at
-- or before cutoff. Unpublished rows are never candidates.
DELETE FROM outbox_events o
USING (
    SELECT r.id FROM outbox_events r
    WHERE r.published_at IS NOT NULL AND r.published_at <= @cutoff::timestamptz
    ORDER BY r.published_at
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
) d
WHERE o.id = d.id;

-- name: RetentionDeleteWebhookReceipts :execrows
-- RetentionDeleteWebhookReceipts deletes processed webhook receipts received
-- at or before cutoff. Unprocessed receipts are never candidates.
DELETE FROM webhook_receipts w
USING (
    SELECT r.delivery_id FROM webhook_receipts r
    WHERE r.processed_at IS NOT NULL AND r.received_at <= @cutoff::timestamptz
    ORDER BY r.received_at
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
) d
WHERE w.delivery_id = d.delivery_id;

-- name: RetentionDeleteProcessedMessages :execrows
-- RetentionDeleteProcessedMessages deletes inbox rows of messages processed
-- at or before cutoff. The policy keeps them at least as long as the broker
-- may redeliver and an operator may replay the message.
DELETE FROM processed_messages m
USING (
    SELECT r.message_id, r.subscriber FROM processed_messages r
    WHERE r.processed_at <= @cutoff::timestamptz
    ORDER BY r.processed_at
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
) d
WHERE m.message_id = d.message_id AND m.subscriber = d.subscriber;

-- name: RetentionCountStuck :one
-- RetentionCountStuck counts pending idempotency records whose lease ran
-- out before cutoff: operations nobody has settled for a long time.
SELECT count(*) FROM api_idempotency WHERE state = 'pending' AND locked_until < @cutoff::timestamptz;
