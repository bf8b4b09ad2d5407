-- A payment is one attempt to charge an order at the provider. It is created
-- pending in phase 1 (before the provider is called) and finished in phase 2.
-- provider_key is the Idempotency-Key sent to the provider, derived from the
-- client's (tenant, operation, key): every retry and every recovery of the
-- attempt sends the same one (rule 7).
CREATE TABLE payments (
    id                 uuid        PRIMARY KEY,
    tenant_id          uuid        NOT NULL REFERENCES tenants (id),
    order_id           uuid        NOT NULL REFERENCES orders (id),
    idempotency_key    text        NOT NULL,
    request_hash       bytea       NOT NULL,
    provider_key       text        NOT NULL,
    status             text        NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
    amount             bigint      NOT NULL CHECK (amount > 0),
    currency           text        NOT NULL,
    payment_method     text        NOT NULL,
    provider_charge_id text,
    failure_code       text,
    -- refund_reserved counts pending and succeeded refunds; the CHECK holds
    -- "refunds never exceed the payment" in the database, under any
    -- concurrency.
    refund_reserved    bigint      NOT NULL DEFAULT 0 CHECK (refund_reserved >= 0 AND refund_reserved <= amount),
    amount_refunded    bigint      NOT NULL DEFAULT 0 CHECK (amount_refunded >= 0 AND amount_refunded <= refund_reserved),
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    -- Business-level uniqueness that outlives the idempotency record (drill 8).
    CONSTRAINT payments_tenant_idempotency_key UNIQUE (tenant_id, idempotency_key),
    CONSTRAINT payments_provider_key UNIQUE (provider_key)
);
-- At most one pending-or-succeeded payment per order: a declined attempt does
-- not block a new one, a second charge of a paid order cannot exist.
CREATE UNIQUE INDEX payments_one_live_per_order ON payments (order_id) WHERE status IN ('pending', 'succeeded');
CREATE UNIQUE INDEX payments_provider_charge ON payments (provider_charge_id) WHERE provider_charge_id IS NOT NULL;

CREATE TABLE refunds (
    id                 uuid        PRIMARY KEY,
    tenant_id          uuid        NOT NULL REFERENCES tenants (id),
    payment_id         uuid        NOT NULL REFERENCES payments (id),
    idempotency_key    text        NOT NULL,
    request_hash       bytea       NOT NULL,
    provider_key       text        NOT NULL,
    status             text        NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
    amount             bigint      NOT NULL CHECK (amount > 0),
    provider_refund_id text,
    failure_code       text,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    CONSTRAINT refunds_tenant_idempotency_key UNIQUE (tenant_id, idempotency_key),
    CONSTRAINT refunds_provider_key UNIQUE (provider_key)
);
CREATE INDEX refunds_payment ON refunds (payment_id);

-- Webhook deliveries from the provider, stored by delivery id (webhook-id)
-- before any effect: a redelivery finds its receipt and changes nothing. The
-- work is queued here and applied by a worker (processed_at).
CREATE TABLE webhook_receipts (
    delivery_id  text        PRIMARY KEY,
    event_type   text        NOT NULL,
    payload      jsonb       NOT NULL,
    received_at  timestamptz NOT NULL,
    processed_at timestamptz,
    attempts     int         NOT NULL DEFAULT 0,
    last_error   text
);
CREATE INDEX webhook_receipts_unprocessed ON webhook_receipts (received_at) WHERE processed_at IS NULL;
