-- Every sweep statement walks an index in the order it deletes, so a batch
-- reads only the rows it removes, however large the table (rule 5: the
-- sweeper must never stall live traffic). The partial indexes hold only
-- candidates: unpublished events and unprocessed receipts are not in them.
-- api_idempotency (api_idempotency_expiry) and processed_messages
-- (processed_messages_processed_at) have theirs already.
--
-- On a table that is already large in production, build these with
-- CREATE INDEX CONCURRENTLY outside a migration transaction first; the
-- IF NOT EXISTS lets this migration pass over them.
CREATE INDEX IF NOT EXISTS outbox_events_published ON outbox_events (published_at) WHERE published_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS webhook_receipts_processed ON webhook_receipts (received_at) WHERE processed_at IS NOT NULL;
