-- name: AttentionInsert :one
-- AttentionInsert raises an item. It returns no row (pgx.ErrNoRows) when
-- its attempt has an open item already, or its delivery has one.
INSERT INTO attention_items (
    id, reason, detail, tenant_id, operation, idempotency_key, delivery_id,
    resource_type, resource_id, raised_at
) VALUES (
    @id, @reason, @detail, @tenant_id, sqlc.narg('operation'), sqlc.narg('idempotency_key'), sqlc.narg('delivery_id'),
    sqlc.narg('resource_type'), sqlc.narg('resource_id'), @raised_at
)
ON CONFLICT DO NOTHING
RETURNING *;

-- name: AttentionGet :one
-- AttentionGet finds an item by its id alone, for an operator who names
-- it: on Citus a read of every shard, without a lock.
SELECT * FROM attention_items WHERE id = $1;

-- name: AttentionGetOpenForAttempt :one
SELECT * FROM attention_items
WHERE tenant_id = @tenant_id AND operation = @operation::text AND idempotency_key = @idempotency_key::text
  AND resolved_at IS NULL;

-- name: AttentionGetByDelivery :one
SELECT * FROM attention_items WHERE tenant_id = @tenant_id AND delivery_id = @delivery_id::text;

-- name: AttentionListForAttempt :many
-- AttentionListForAttempt returns an attempt's items, newest first.
SELECT * FROM attention_items
WHERE tenant_id = @tenant_id AND operation = @operation::text AND idempotency_key = @idempotency_key::text
ORDER BY raised_at DESC, id DESC;

-- name: AttentionListOpen :many
-- AttentionListOpen returns up to max_rows open items, oldest first: the
-- queue in the order it was raised.
SELECT * FROM attention_items
WHERE resolved_at IS NULL
ORDER BY raised_at, id
LIMIT @max_rows;

-- name: AttentionListResolved :many
-- AttentionListResolved returns up to max_rows resolved items, the most
-- recently resolved first.
SELECT * FROM attention_items
WHERE resolved_at IS NOT NULL
ORDER BY resolved_at DESC, id DESC
LIMIT @max_rows;

-- name: AttentionResolve :one
-- AttentionResolve resolves an open item; a resolved one is left as it is
-- and reports no row.
UPDATE attention_items
SET resolved_at = @resolved_at::timestamptz, resolution = @resolution::text, note = @note::text
WHERE tenant_id = @tenant_id AND id = @id AND resolved_at IS NULL
RETURNING *;

-- name: AttentionCountOpen :many
-- AttentionCountOpen counts the open items by reason, for the metrics.
SELECT reason, count(*) AS open FROM attention_items
WHERE resolved_at IS NULL
GROUP BY reason;
