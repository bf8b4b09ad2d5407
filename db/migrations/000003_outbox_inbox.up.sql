-- The outbox dispatcher's bookkeeping (rule 6, producer side). A dispatcher
-- claims due rows with FOR UPDATE SKIP LOCKED and leases them (locked_until,
-- locked_by) while it publishes outside any transaction; a dispatcher that
-- dies loses its lease and another one publishes the rows again (at least
-- once; the event id is the broker's message id, and consumers keep an inbox).
--   next_attempt_at: a failed row waits until then (exponential backoff);
--                    NULL means due at once.
--   stuck_at:        set when attempts reached the dispatcher's limit; a stuck
--                    row is never claimed again until an operator retries it.
ALTER TABLE outbox_events
    ADD COLUMN locked_until    timestamptz,
    ADD COLUMN locked_by       uuid,
    ADD COLUMN next_attempt_at timestamptz,
    ADD COLUMN stuck_at        timestamptz;

-- Leave room on every page so that the lease, written once per claim and
-- touching no indexed column, can be a HOT update that adds no index entries.
ALTER TABLE outbox_events SET (fillfactor = 70);

-- The claim walks unpublished rows in seq order. Stuck rows leave the index:
-- they are not work until an operator says so.
DROP INDEX outbox_events_unpublished;
CREATE INDEX outbox_events_pending ON outbox_events (seq) WHERE published_at IS NULL AND stuck_at IS NULL;

-- Every transaction that appends to the outbox wakes the dispatchers when it
-- commits: NOTIFY is delivered at commit (never for a rollback), and identical
-- notifications of one transaction fold into one. The payload is empty: the
-- dispatchers look at the table, the notification only says "look now".
-- Polling backs this up for notifications lost while no dispatcher listened.
CREATE FUNCTION outbox_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('oncepay_outbox', '');
    RETURN NULL;
END
$$;
CREATE TRIGGER outbox_events_notify AFTER INSERT ON outbox_events
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_events_notify();

-- The inbox (rule 6, consumer side): a consumer inserts (subscriber, message
-- id) in the same transaction as its effect. The primary key decides: the
-- first delivery inserts, every redelivery (or replay) conflicts and changes
-- nothing (rule 3). message_id leads the key so GET /v1/events can look up
-- who processed an event by its id. Rows are kept at least as long as the
-- broker may redeliver (the stream's max age); processed_at feeds the sweeper.
CREATE TABLE processed_messages (
    message_id   text        NOT NULL,
    subscriber   text        NOT NULL,
    processed_at timestamptz NOT NULL,
    PRIMARY KEY (message_id, subscriber)
);
CREATE INDEX processed_messages_processed_at ON processed_messages (processed_at);

-- What the fulfillment consumer tells the customer: a receipt when the order
-- shipped, a backorder notice when stock did not suffice, a refund notice.
-- event_id names the message that caused it.
CREATE TABLE notifications (
    id         uuid        PRIMARY KEY,
    tenant_id  uuid        NOT NULL REFERENCES tenants (id),
    order_id   uuid        NOT NULL REFERENCES orders (id),
    kind       text        NOT NULL CHECK (kind IN ('receipt', 'backorder', 'refund')),
    event_id   uuid        NOT NULL,
    body       jsonb       NOT NULL,
    created_at timestamptz NOT NULL
);
CREATE INDEX notifications_order ON notifications (order_id);
