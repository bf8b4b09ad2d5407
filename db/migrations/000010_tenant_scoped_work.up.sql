-- Every statement now names the tenant, the background roles included: the
-- outbox dispatcher, the recoverer and the sweeper find the tenants with due
-- work first and then claim or delete one tenant's rows at a time (on Citus,
-- one shard per statement). Their indexes lead with tenant_id so that a
-- tenant's due rows are one index range, and the plain indexes on id alone
-- that 000009 kept for statements without a tenant go.
--
-- outbox_events_id and attention_items_id stay: an operator names an event
-- or an item by its id alone (outbox retry, attention resolve), and that
-- lookup, a read without a lock, is the one place that does not know the
-- tenant yet.
--
-- On a table that is already large in production, build the new indexes
-- with CREATE INDEX CONCURRENTLY outside a migration transaction first; the
-- IF NOT EXISTS lets this migration pass over them.
DROP INDEX outbox_events_pending;
CREATE INDEX IF NOT EXISTS outbox_events_pending_by_tenant ON outbox_events (tenant_id, seq)
    WHERE published_at IS NULL AND stuck_at IS NULL;
DROP INDEX outbox_events_published;
CREATE INDEX IF NOT EXISTS outbox_events_published_by_tenant ON outbox_events (tenant_id, published_at)
    WHERE published_at IS NOT NULL;
DROP INDEX api_idempotency_expiry;
CREATE INDEX IF NOT EXISTS api_idempotency_expiry_by_tenant ON api_idempotency (tenant_id, expires_at)
    WHERE state <> 'pending';
-- The recoverer's candidates (pending records whose lease ran out) were
-- found by a scan of the whole table; the pending ones are few.
CREATE INDEX IF NOT EXISTS api_idempotency_pending ON api_idempotency (tenant_id, locked_until)
    WHERE state = 'pending';
DROP INDEX processed_messages_processed_at;
CREATE INDEX IF NOT EXISTS processed_messages_processed_by_tenant ON processed_messages (tenant_id, processed_at);

DROP INDEX orders_id;
DROP INDEX payments_id;
DROP INDEX payments_live_by_order;
DROP INDEX refunds_id;
DROP INDEX refunds_payment_id;
