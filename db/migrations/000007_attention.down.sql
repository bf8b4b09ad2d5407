ALTER TABLE api_idempotency DROP CONSTRAINT api_idempotency_held_is_pending, DROP COLUMN held_at,
    DROP COLUMN recoveries, DROP COLUMN next_recovery_at;
DROP TABLE attention_items;
