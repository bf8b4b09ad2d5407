ALTER TABLE api_idempotency DROP COLUMN trace_context;
ALTER TABLE outbox_events DROP COLUMN trace_context;
