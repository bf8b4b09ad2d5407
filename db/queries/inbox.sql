-- name: InboxClaim :execrows
-- InboxClaim records that subscriber processed message_id. It affects no
-- row when the message was processed before: the primary key decides, and a
-- concurrent claim of the same message waits for the first one's commit.
INSERT INTO processed_messages (tenant_id, subscriber, message_id, processed_at)
VALUES (@tenant_id, @subscriber, @message_id, now())
ON CONFLICT DO NOTHING;

-- name: InboxListForMessages :many
-- InboxListForMessages returns who processed which of the tenant's
-- messages.
SELECT * FROM processed_messages
WHERE tenant_id = @tenant_id AND message_id = ANY(@message_ids::text[])
ORDER BY message_id, processed_at, subscriber;

-- name: InboxDeleteProcessed :execrows
-- InboxDeleteProcessed deletes one tenant's inbox rows of messages processed
-- at or before cutoff. The policy keeps them at least as long as the broker
-- may redeliver and an operator may replay the message.
-- The batch is a CTE, computed once (see IdempotencyDeleteExpired).
WITH d AS (
    SELECT r.tenant_id, r.message_id, r.subscriber FROM processed_messages r
    WHERE r.tenant_id = @tenant_id::uuid AND r.processed_at <= @cutoff::timestamptz
    ORDER BY r.processed_at
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
)
DELETE FROM processed_messages m
USING d
WHERE m.tenant_id = @tenant_id::uuid AND m.tenant_id = d.tenant_id AND m.message_id = d.message_id AND m.subscriber = d.subscriber;
