DROP INDEX webhook_receipts_processed;
DROP INDEX outbox_events_published;
