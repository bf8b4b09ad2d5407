-- The statements a step's transaction runs on its record are batch queries
-- (:batch...): sent at once on a transaction, or queued into a pipelined
-- step's batch (operation.Batch) with the step's own statements. Each is
-- written once for both.

-- name: IdempotencyInsert :batchone
-- IdempotencyInsert claims a key. It returns no row (pgx.ErrNoRows) when
-- the key is taken; a concurrent uncommitted claim makes it wait for that
-- transaction first (bounded by lock_timeout).
INSERT INTO api_idempotency (
    tenant_id, operation, idempotency_key, request_hash, state, recovery_point,
    locked_until, request_id, created_at, updated_at, expires_at, trace_context
) VALUES (
    $1, $2, $3, $4, 'pending', 'started', $5, $6, $7, $7, $8, $9
)
ON CONFLICT (tenant_id, operation, idempotency_key) DO NOTHING
RETURNING *;

-- name: IdempotencyTombstone :one
-- IdempotencyTombstone finishes a key nobody has claimed yet with a stored
-- answer (a cancel's refusal, recovery point 'cancelled'), so that the
-- request, should it still arrive, is answered from it and never runs. It
-- returns no row (pgx.ErrNoRows) when the key has a record; a concurrent
-- uncommitted claim makes it wait for that transaction first (bounded by
-- lock_timeout), so it never races the request it cancels.
INSERT INTO api_idempotency (
    tenant_id, operation, idempotency_key, request_hash, state, recovery_point,
    request_id, status_code, response_headers, response_body, created_at, updated_at, expires_at
) VALUES (
    @tenant_id, @operation, @idempotency_key, '\x'::bytea, 'failed', 'cancelled',
    @request_id, @status_code, @response_headers, @response_body, @now, @now, @expires_at
)
ON CONFLICT (tenant_id, operation, idempotency_key) DO NOTHING
RETURNING *;

-- name: IdempotencyInsertAt :one
-- IdempotencyInsertAt records an attempt that another operation's
-- transaction started on its behalf (a compensation): pending at the given
-- recovery point, its lease run out already, so the recoverer takes it over
-- at once. It returns no row when the key has a record.
INSERT INTO api_idempotency (
    tenant_id, operation, idempotency_key, request_hash, state, recovery_point,
    locked_until, request_id, resource_type, resource_id, created_at, updated_at, expires_at
) VALUES (
    @tenant_id, @operation, @idempotency_key, @request_hash, 'pending', @recovery_point,
    @now, @request_id, @resource_type, @resource_id, @now, @now, @expires_at
)
ON CONFLICT (tenant_id, operation, idempotency_key) DO NOTHING
RETURNING *;

-- name: IdempotencyGetForUpdate :batchone
-- IdempotencyGetForUpdate locks a record: a taken key's claim, and every
-- later step's transaction (Claim.Reacquire), before it acts on it.
SELECT * FROM api_idempotency
WHERE tenant_id = $1 AND operation = $2 AND idempotency_key = $3
FOR UPDATE;

-- name: IdempotencyGet :one
-- IdempotencyGet reads a record without locking it: only for the replay
-- fast path, which acts on final (immutable) records alone.
SELECT * FROM api_idempotency
WHERE tenant_id = $1 AND operation = $2 AND idempotency_key = $3;

-- name: IdempotencyFinish :batchone
-- IdempotencyFinish stores the final outcome of a pending record. A record
-- that is already final is never overwritten, and a held one is not
-- finished behind the operator's back: both return no row.
UPDATE api_idempotency
SET state = @state, recovery_point = 'finished', locked_until = NULL,
    status_code = @status_code, response_headers = @response_headers, response_body = @response_body,
    resource_type = @resource_type, resource_id = @resource_id,
    updated_at = @now, expires_at = @expires_at
WHERE tenant_id = @tenant_id AND operation = @operation AND idempotency_key = @idempotency_key
  AND state = 'pending' AND held_at IS NULL
RETURNING state;

-- name: IdempotencyCheckpoint :batchone
-- IdempotencyCheckpoint records a recovery point (and the resource it made)
-- and sets the lease of a pending record; a finished or held record is left
-- alone, and no row is returned.
UPDATE api_idempotency
SET recovery_point = @recovery_point, locked_until = @locked_until, updated_at = @now,
    resource_type = coalesce(sqlc.narg(resource_type), resource_type),
    resource_id = coalesce(sqlc.narg(resource_id), resource_id)
WHERE tenant_id = @tenant_id AND operation = @operation AND idempotency_key = @idempotency_key
  AND state = 'pending' AND held_at IS NULL
RETURNING recovery_point;

-- name: IdempotencyExpiredTenants :many
-- IdempotencyExpiredTenants lists up to max_rows tenants with pending
-- records of the given operations that the recoverer may take over, the
-- tenant of the longest expired first. It takes no lock: on Citus it is the
-- one statement of the recoverer that reads every shard.
SELECT tenant_id FROM api_idempotency
WHERE state = 'pending' AND operation = ANY(@operations::text[]) AND locked_until < @now::timestamptz
  AND held_at IS NULL AND (next_recovery_at IS NULL OR next_recovery_at <= @now::timestamptz)
GROUP BY tenant_id
ORDER BY min(locked_until)
LIMIT @max_rows;

-- name: IdempotencyClaimExpired :many
-- IdempotencyClaimExpired takes over one tenant's pending records of the given operations
-- whose lease ran out (abandoned attempts), for the recoverer. SKIP LOCKED
-- lets several recoverers run at once without waiting on each other; the
-- renewed lease keeps the others away after commit. A held record (no lease)
-- is an operator's, never the recoverer's, and one whose backoff has not
-- run out yet is not due. Each take-over counts one recovery; the caller
-- sets the next backoff (IdempotencySetNextRecovery).
WITH expired AS (
    SELECT tenant_id, operation, idempotency_key FROM api_idempotency
    WHERE tenant_id = @tenant_id AND state = 'pending' AND operation = ANY(@operations::text[]) AND locked_until < @now
      AND held_at IS NULL AND (next_recovery_at IS NULL OR next_recovery_at <= @now)
    ORDER BY locked_until
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
)
UPDATE api_idempotency a SET locked_until = @locked_until, updated_at = @now, recoveries = a.recoveries + 1
FROM expired e
WHERE a.tenant_id = @tenant_id AND a.tenant_id = e.tenant_id AND a.operation = e.operation AND a.idempotency_key = e.idempotency_key
RETURNING a.*;

-- name: IdempotencyDeleteExpired :execrows
-- IdempotencyDeleteExpired deletes up to max_rows of one tenant's finished
-- idempotency records that expired at or before cutoff, oldest first. Pending records
-- (an operation still unsettled) are never candidates. SKIP LOCKED: a record
-- a request is reading for update is left for the next round, and two
-- sweepers never wait on each other.
--
-- The batch is a CTE, computed once. As a subquery in USING the planner may
-- put it inside a nested loop and run it again for every row it joins, and
-- each run, skipping the rows this statement has deleted already, locks
-- another batch: the LIMIT would bound nothing.
WITH d AS (
    SELECT r.tenant_id, r.operation, r.idempotency_key FROM api_idempotency r
    WHERE r.tenant_id = @tenant_id::uuid AND r.state <> 'pending' AND r.expires_at <= @cutoff::timestamptz
    ORDER BY r.expires_at
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
)
DELETE FROM api_idempotency a
USING d
WHERE a.tenant_id = @tenant_id::uuid AND a.tenant_id = d.tenant_id AND a.operation = d.operation AND a.idempotency_key = d.idempotency_key;

-- name: IdempotencyCountStuck :one
-- IdempotencyCountStuck counts pending idempotency records whose lease ran
-- out before cutoff: operations nobody has settled for a long time.
SELECT count(*) FROM api_idempotency WHERE state = 'pending' AND locked_until < @cutoff::timestamptz;

-- name: IdempotencyHold :exec
-- IdempotencyHold holds a pending record for an operator: it keeps its
-- recovery point and loses its lease, so nobody resumes it until an
-- operator releases it.
UPDATE api_idempotency
SET held_at = @now::timestamptz, locked_until = NULL, updated_at = @now::timestamptz
WHERE tenant_id = @tenant_id AND operation = @operation AND idempotency_key = @idempotency_key
  AND state = 'pending' AND held_at IS NULL;

-- name: IdempotencyUnhold :one
-- IdempotencyUnhold releases a held record for another try (an operator's
-- decision): due at once, for a client's retry and the recoverer, with its
-- recoveries counted from zero.
UPDATE api_idempotency
SET held_at = NULL, locked_until = @now::timestamptz, recoveries = 0, next_recovery_at = NULL,
    updated_at = @now::timestamptz
WHERE tenant_id = @tenant_id AND operation = @operation AND idempotency_key = @idempotency_key
  AND state = 'pending' AND held_at IS NOT NULL
RETURNING *;

-- name: IdempotencySetNextRecovery :exec
-- IdempotencySetNextRecovery sets the recoverer's backoff of a record it
-- has just taken over: it is not taken over again before then.
UPDATE api_idempotency SET next_recovery_at = @next_recovery_at::timestamptz
WHERE tenant_id = @tenant_id AND operation = @operation AND idempotency_key = @idempotency_key;

-- name: IdempotencyTraceContext :one
-- IdempotencyTraceContext reads the trace context the claim stored, for a
-- trace that links to the original request's (a webhook that finished the
-- operation).
SELECT trace_context FROM api_idempotency
WHERE tenant_id = $1 AND operation = $2 AND idempotency_key = $3;
