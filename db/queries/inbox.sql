-- name: InboxClaim :execrows
-- InboxClaim records that subscriber processed message_id. It affects no
-- row when the message was processed before: the primary key decides, and a
-- concurrent claim of the same message waits for the first one's commit.
INSERT INTO processed_messages (subscriber, message_id, processed_at)
VALUES (@subscriber, @message_id, now())
ON CONFLICT DO NOTHING;

-- name: InboxListForMessages :many
-- InboxListForMessages returns who processed which of the messages.
SELECT * FROM processed_messages
WHERE message_id = ANY(@message_ids::text[])
ORDER BY message_id, processed_at, subscriber;
