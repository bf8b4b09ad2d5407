ALTER TABLE payments DROP COLUMN cancel_requested_at;
