-- name: IdempotencyInsert :one
-- IdempotencyInsert claims a key. It returns no row (pgx.ErrNoRows) when
-- the key is taken; a concurrent uncommitted claim makes it wait for that
-- transaction first (bounded by lock_timeout).
INSERT INTO api_idempotency (
    tenant_id, operation, idempotency_key, request_hash, state, recovery_point,
    locked_until, request_id, created_at, updated_at, expires_at
) VALUES (
    $1, $2, $3, $4, 'pending', 'started', $5, $6, $7, $7, $8
)
ON CONFLICT (tenant_id, operation, idempotency_key) DO NOTHING
RETURNING *;

-- name: IdempotencyGetForUpdate :one
SELECT * FROM api_idempotency
WHERE tenant_id = $1 AND operation = $2 AND idempotency_key = $3
FOR UPDATE;

-- name: IdempotencyGet :one
-- IdempotencyGet reads a record without locking it: only for the replay
-- fast path, which acts on final (immutable) records alone.
SELECT * FROM api_idempotency
WHERE tenant_id = $1 AND operation = $2 AND idempotency_key = $3;

-- name: IdempotencyFinish :exec
UPDATE api_idempotency
SET state = @state, recovery_point = 'finished', locked_until = NULL,
    status_code = @status_code, response_headers = @response_headers, response_body = @response_body,
    resource_type = @resource_type, resource_id = @resource_id,
    updated_at = @now, expires_at = @expires_at
WHERE tenant_id = @tenant_id AND operation = @operation AND idempotency_key = @idempotency_key;

-- name: IdempotencyCheckpoint :exec
-- IdempotencyCheckpoint records a recovery point and renews the lease.
UPDATE api_idempotency
SET recovery_point = @recovery_point, locked_until = @locked_until, updated_at = @now
WHERE tenant_id = @tenant_id AND operation = @operation AND idempotency_key = @idempotency_key;

-- name: IdempotencyDelete :execrows
-- IdempotencyDelete removes a record; used by tests to stand for expiry.
DELETE FROM api_idempotency
WHERE tenant_id = $1 AND operation = $2 AND idempotency_key = $3;
