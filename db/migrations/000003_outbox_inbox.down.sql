DROP TABLE notifications;
DROP TABLE processed_messages;
DROP TRIGGER outbox_events_notify ON outbox_events;
DROP FUNCTION outbox_events_notify();
DROP INDEX outbox_events_pending;
CREATE INDEX outbox_events_unpublished ON outbox_events (seq) WHERE published_at IS NULL;
ALTER TABLE outbox_events RESET (fillfactor);
ALTER TABLE outbox_events
    DROP COLUMN stuck_at,
    DROP COLUMN next_attempt_at,
    DROP COLUMN locked_by,
    DROP COLUMN locked_until;
