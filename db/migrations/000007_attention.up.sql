-- The needs-attention queue (internal/attention): what no retry can settle
-- and a person has to look at. An item is written in the same transaction as
-- the state change that causes it (an attempt held for an operator, a
-- provider webhook set aside unapplied), so nothing is held or set aside
-- without its item, and an item never names a change that did not commit.
--
-- The subject is exactly one of: an attempt of an idempotent operation
-- (tenant_id, operation, idempotency_key: the api_idempotency record it
-- holds) or a provider webhook delivery (delivery_id). resource names the
-- payment or refund it is about. An item is open until an operator resolves
-- it: retried (the held attempt was released for another try) or closed
-- (settled outside the service), with a note that says what was done.
CREATE TABLE attention_items (
    id              uuid        PRIMARY KEY,
    reason          text        NOT NULL CHECK (reason IN ('mismatch', 'recovery_exhausted')),
    detail          text        NOT NULL,
    tenant_id       uuid        NOT NULL REFERENCES tenants (id),
    operation       text,
    idempotency_key text,
    delivery_id     text,
    resource_type   text,
    resource_id     uuid,
    raised_at       timestamptz NOT NULL,
    resolved_at     timestamptz,
    resolution      text        CHECK (resolution IN ('retried', 'closed')),
    note            text,
    CONSTRAINT attention_items_one_subject CHECK (
        (operation IS NOT NULL AND idempotency_key IS NOT NULL AND delivery_id IS NULL)
        OR (operation IS NULL AND idempotency_key IS NULL AND delivery_id IS NOT NULL)),
    CONSTRAINT attention_items_resource CHECK ((resource_type IS NULL) = (resource_id IS NULL)),
    CONSTRAINT attention_items_resolved CHECK (
        (resolved_at IS NULL) = (resolution IS NULL) AND (resolved_at IS NULL) = (note IS NULL))
);
-- One open item per attempt, one item per delivery: raising again finds the
-- item that is there.
CREATE UNIQUE INDEX attention_items_open_attempt ON attention_items (tenant_id, operation, idempotency_key)
    WHERE resolved_at IS NULL AND operation IS NOT NULL;
CREATE UNIQUE INDEX attention_items_delivery ON attention_items (delivery_id) WHERE delivery_id IS NOT NULL;
-- The queue itself, oldest first, and an attempt's history.
CREATE INDEX attention_items_open ON attention_items (raised_at, id) WHERE resolved_at IS NULL;
CREATE INDEX attention_items_attempt ON attention_items (tenant_id, operation, idempotency_key, raised_at)
    WHERE operation IS NOT NULL;

-- held_at: when the attempt was held for an operator (its attention item
-- says why). Nothing runs under a held key, neither a client's retry nor
-- the recoverer, until an operator releases it; it has no lease meanwhile.
-- recoveries: how often the recoverer took the attempt over (a client's
-- retry does not count); at its bound (RECOVERER_MAX_ATTEMPTS) an attempt
-- still without an outcome is held. next_recovery_at: the recoverer's
-- backoff, the earliest time it takes the attempt over again (NULL: as soon
-- as its lease runs out); a client's retry never waits for it.
ALTER TABLE api_idempotency
    ADD COLUMN held_at timestamptz,
    ADD COLUMN recoveries int NOT NULL DEFAULT 0,
    ADD COLUMN next_recovery_at timestamptz,
    ADD CONSTRAINT api_idempotency_held_is_pending CHECK (held_at IS NULL OR state = 'pending');
