CREATE INDEX refunds_payment_id ON refunds (payment_id);
CREATE INDEX refunds_id ON refunds (id);
CREATE INDEX payments_live_by_order ON payments (order_id) WHERE status IN ('pending', 'succeeded');
CREATE INDEX payments_id ON payments (id);
CREATE INDEX orders_id ON orders (id);

DROP INDEX processed_messages_processed_by_tenant;
CREATE INDEX processed_messages_processed_at ON processed_messages (processed_at);
DROP INDEX api_idempotency_pending;
DROP INDEX api_idempotency_expiry_by_tenant;
CREATE INDEX api_idempotency_expiry ON api_idempotency (expires_at) WHERE state <> 'pending';
DROP INDEX outbox_events_published_by_tenant;
CREATE INDEX outbox_events_published ON outbox_events (published_at) WHERE published_at IS NOT NULL;
DROP INDEX outbox_events_pending_by_tenant;
CREATE INDEX outbox_events_pending ON outbox_events (seq) WHERE published_at IS NULL AND stuck_at IS NULL;
