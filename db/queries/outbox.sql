-- name: OutboxInsert :batchexec
-- OutboxInsert appends an event: a batch query, run at once on a
-- transaction (outbox.Append) or queued into a pipelined step's batch with
-- the step's other statements (outbox.Queue).
INSERT INTO outbox_events (id, tenant_id, event_type, aggregate_type, aggregate_id, idempotency_key, payload, occurred_at, trace_context)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9);

-- name: OutboxListNewest :many
-- OutboxListNewest lists a tenant's events newest first, before the
-- cursor sequence number when one is given.
SELECT * FROM outbox_events
WHERE tenant_id = @tenant_id AND (NOT @has_cursor::bool OR seq < @cursor_seq::bigint)
ORDER BY seq DESC
LIMIT @max_rows;

-- name: OutboxDueTenants :many
-- OutboxDueTenants lists up to max_rows tenants that have due, unpublished
-- events, for the dispatcher to claim them tenant by tenant. It takes no
-- lock: on Citus it is the one statement of the dispatcher that reads every
-- shard.
SELECT DISTINCT tenant_id FROM outbox_events
WHERE published_at IS NULL AND stuck_at IS NULL
  AND (next_attempt_at IS NULL OR next_attempt_at <= @now::timestamptz)
  AND (locked_until IS NULL OR locked_until <= @now::timestamptz)
LIMIT @max_rows;

-- name: OutboxClaimBatch :many
-- OutboxClaimBatch leases up to max_rows of one tenant's due, unpublished
-- rows to the dispatcher holding token, oldest first. One tenant at a time:
-- on Citus the statement stays on the tenant's shard (a FOR UPDATE across
-- shards is refused there). FOR UPDATE SKIP LOCKED lets
-- concurrent dispatchers claim disjoint batches without waiting; the lease
-- (locked_until) keeps the rows theirs after this statement commits, while
-- they publish. A lease that ran out (its dispatcher died) is claimable again.
--
-- The claim selects by state (published_at IS NULL), never by a high-water
-- mark of seq: a transaction that took a low seq and commits after higher
-- seqs were published is still claimed by the next round.
WITH due AS (
    SELECT id FROM outbox_events
    WHERE tenant_id = @tenant_id::uuid AND published_at IS NULL AND stuck_at IS NULL
      AND (next_attempt_at IS NULL OR next_attempt_at <= @now::timestamptz)
      AND (locked_until IS NULL OR locked_until <= @now::timestamptz)
    ORDER BY seq
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
)
UPDATE outbox_events e
SET locked_until = @lease_until::timestamptz, locked_by = @token::uuid
FROM due
WHERE e.tenant_id = @tenant_id::uuid AND e.id = due.id
RETURNING e.*;

-- name: OutboxMarkPublished :execrows
-- OutboxMarkPublished records that the broker acknowledged the rows. It
-- does not check the lease: an acknowledged publish is a fact whoever holds
-- the row now.
UPDATE outbox_events
SET published_at = @published_at::timestamptz, attempts = attempts + 1,
    locked_until = NULL, locked_by = NULL, next_attempt_at = NULL
WHERE tenant_id = @tenant_id::uuid AND id = ANY(@ids::uuid[]) AND published_at IS NULL;

-- name: OutboxRecordFailures :many
-- OutboxRecordFailures counts a failed attempt for each row the dispatcher
-- holding token still leases: it records the error, and when the row is due
-- again or that it is now stuck (no more automatic attempts).
UPDATE outbox_events e
SET attempts = e.attempts + 1,
    last_error = f.last_error,
    next_attempt_at = CASE WHEN NOT f.stuck THEN f.next_attempt_at END,
    stuck_at = CASE WHEN f.stuck THEN @now::timestamptz END,
    locked_until = NULL, locked_by = NULL
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@last_errors::text[]) AS last_error,
             unnest(@next_attempt_ats::timestamptz[]) AS next_attempt_at, unnest(@stuck::bool[]) AS stuck) AS f
WHERE e.tenant_id = @tenant_id::uuid AND e.id = f.id AND e.locked_by = @token::uuid AND e.published_at IS NULL
RETURNING e.id, e.tenant_id, e.event_type, e.attempts, e.stuck_at;

-- name: OutboxGet :one
-- OutboxGet finds an event by its id alone, for an operator who names it:
-- on Citus a read of every shard, without a lock.
SELECT * FROM outbox_events WHERE id = $1;

-- name: OutboxExists :one
-- OutboxExists reports whether the tenant has the event.
SELECT EXISTS (SELECT 1 FROM outbox_events WHERE tenant_id = $1 AND id = $2);

-- name: OutboxRetry :one
-- OutboxRetry makes an unpublished event due at once with a fresh count of
-- attempts: the operator's answer to a stuck event. A row leased right now
-- keeps its lease. It returns no row for a published or unknown event.
UPDATE outbox_events
SET stuck_at = NULL, attempts = 0, next_attempt_at = NULL
WHERE tenant_id = @tenant_id AND id = @id AND published_at IS NULL
RETURNING *;

-- name: OutboxStats :one
-- OutboxStats describes the outbox at one moment, in one statement: the
-- events not yet published, the age of the oldest of them in seconds (0
-- when none; the database's clock), and those of them the dispatcher gave
-- up on (stuck) until an operator retries them.
SELECT count(*) AS pending,
       coalesce(extract(epoch FROM now() - min(occurred_at)), 0)::float8 AS lag_seconds,
       count(*) FILTER (WHERE stuck_at IS NOT NULL) AS stuck
FROM outbox_events
WHERE published_at IS NULL;

-- name: OutboxListStuck :many
-- OutboxListStuck lists stuck events of every tenant, oldest first.
SELECT * FROM outbox_events
WHERE stuck_at IS NOT NULL AND published_at IS NULL
ORDER BY seq
LIMIT @max_rows;

-- name: OutboxNotify :exec
-- OutboxNotify wakes the dispatchers of every process (an operator's retry).
SELECT pg_notify('oncepay_outbox', '');

-- name: OutboxDeletePublished :execrows
-- OutboxDeletePublished deletes one tenant's published outbox rows
-- published at or before cutoff. Unpublished rows are never candidates.
-- The batch is a CTE, computed once (see IdempotencyDeleteExpired).
WITH d AS (
    SELECT r.id FROM outbox_events r
    WHERE r.tenant_id = @tenant_id::uuid AND r.published_at IS NOT NULL AND r.published_at <= @cutoff::timestamptz
    ORDER BY r.published_at
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
)
DELETE FROM outbox_events o
USING d
WHERE o.tenant_id = @tenant_id::uuid AND o.id = d.id;
