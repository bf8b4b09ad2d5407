-- name: OutboxInsert :exec
INSERT INTO outbox_events (id, tenant_id, event_type, aggregate_type, aggregate_id, idempotency_key, payload, occurred_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8);

-- name: OutboxListNewest :many
-- OutboxListNewest lists a tenant's events newest first, before the
-- cursor sequence number when one is given.
SELECT * FROM outbox_events
WHERE tenant_id = @tenant_id AND (NOT @has_cursor::bool OR seq < @cursor_seq::bigint)
ORDER BY seq DESC
LIMIT @max_rows;
