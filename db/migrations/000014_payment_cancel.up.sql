-- A payment may be cancelled by its idempotency key while its outcome is
-- still unknown (POST /v1/payments/cancel-by-key): cancel_requested_at marks
-- it, and the step that learns the outcome compensates a charge that
-- succeeded with a full refund (internal/payments, cancel.go). One
-- statement: it runs as it is on plain PostgreSQL and on Citus.
ALTER TABLE payments ADD COLUMN cancel_requested_at timestamptz;
