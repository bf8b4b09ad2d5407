-- Tenants own everything else; every key space below is scoped by tenant (rule 2).
CREATE TABLE tenants (
    id         uuid        PRIMARY KEY,
    slug       text        NOT NULL UNIQUE,
    name       text        NOT NULL,
    created_at timestamptz NOT NULL
);

-- API keys are stored as SHA-256 hashes: a leaked table does not leak keys.
-- API keys are high-entropy random strings, so a fast hash is the right tool
-- (a password hash would only slow every request down).
CREATE TABLE api_keys (
    key_hash   bytea       PRIMARY KEY,
    tenant_id  uuid        NOT NULL REFERENCES tenants (id),
    key_prefix text        NOT NULL,
    created_at timestamptz NOT NULL,
    revoked_at timestamptz
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id);

CREATE TABLE products (
    tenant_id   uuid   NOT NULL REFERENCES tenants (id),
    sku         text   NOT NULL,
    name        text   NOT NULL,
    unit_amount bigint NOT NULL CHECK (unit_amount > 0),
    currency    text   NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    stock       bigint NOT NULL CHECK (stock >= 0),
    PRIMARY KEY (tenant_id, sku)
);

-- Orders carry the idempotency key that created them, unique per tenant and
-- kept for the life of the order. The api_idempotency record expires; this
-- constraint never does, so a genuine late retry finds the original order
-- instead of creating a second one (drill 8).
CREATE TABLE orders (
    id              uuid        PRIMARY KEY,
    tenant_id       uuid        NOT NULL REFERENCES tenants (id),
    idempotency_key text        NOT NULL,
    request_hash    bytea       NOT NULL,
    status          text        NOT NULL CHECK (status IN ('awaiting_payment', 'paid', 'fulfilled', 'partially_refunded', 'refunded')),
    currency        text        NOT NULL,
    amount_total    bigint      NOT NULL CHECK (amount_total > 0),
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    CONSTRAINT orders_tenant_idempotency_key UNIQUE (tenant_id, idempotency_key)
);
CREATE INDEX orders_tenant_newest ON orders (tenant_id, created_at DESC, id DESC);

CREATE TABLE order_items (
    order_id    uuid   NOT NULL REFERENCES orders (id) ON DELETE CASCADE,
    line        int    NOT NULL,
    sku         text   NOT NULL,
    name        text   NOT NULL,
    quantity    int    NOT NULL CHECK (quantity > 0),
    unit_amount bigint NOT NULL,
    amount      bigint NOT NULL,
    PRIMARY KEY (order_id, line)
);

-- The idempotency record of one business intent (rule 1), scoped by tenant and
-- operation (rule 2). The primary key decides races (rule 3): the first
-- INSERT ... ON CONFLICT DO NOTHING wins, everybody else waits on its row.
--
-- state: pending (execution began; the owner holds locked_until), completed
-- (a 2xx outcome is stored), failed (a business failure such as a decline is
-- stored). completed and failed are final and replayed byte for byte.
-- recovery_point names the last phase a multi-phase operation committed, so a
-- retry or the recoverer resumes there instead of starting over.
CREATE TABLE api_idempotency (
    tenant_id        uuid        NOT NULL REFERENCES tenants (id),
    operation        text        NOT NULL,
    idempotency_key  text        NOT NULL,
    request_hash     bytea       NOT NULL,
    state            text        NOT NULL CHECK (state IN ('pending', 'completed', 'failed')),
    recovery_point   text        NOT NULL,
    locked_until     timestamptz,
    request_id       text        NOT NULL,
    status_code      int,
    response_headers jsonb,
    response_body    bytea,
    resource_type    text,
    resource_id      uuid,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    expires_at       timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, operation, idempotency_key),
    CHECK (state = 'pending' OR (status_code IS NOT NULL AND response_body IS NOT NULL))
);
-- The sweeper walks finished records by expiry; pending ones are never swept.
CREATE INDEX api_idempotency_expiry ON api_idempotency (expires_at) WHERE state <> 'pending';

-- The transactional outbox (rule 6): written in the business transaction,
-- published later, at least once, with id as the broker's message id.
CREATE TABLE outbox_events (
    id              uuid        PRIMARY KEY,
    seq             bigint      NOT NULL GENERATED ALWAYS AS IDENTITY UNIQUE,
    tenant_id       uuid        NOT NULL REFERENCES tenants (id),
    event_type      text        NOT NULL,
    aggregate_type  text        NOT NULL,
    aggregate_id    uuid        NOT NULL,
    idempotency_key text        NOT NULL,
    payload         jsonb       NOT NULL,
    occurred_at     timestamptz NOT NULL,
    published_at    timestamptz,
    attempts        int         NOT NULL DEFAULT 0,
    last_error      text
);
CREATE INDEX outbox_events_unpublished ON outbox_events (seq) WHERE published_at IS NULL;
CREATE INDEX outbox_events_tenant_newest ON outbox_events (tenant_id, seq DESC);
