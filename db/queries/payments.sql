-- name: PaymentInsert :one
INSERT INTO payments (id, tenant_id, order_id, idempotency_key, request_hash, provider_key, status, amount, currency, payment_method, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7, $8, $9, $10, $10)
RETURNING *;

-- name: PaymentGet :one
SELECT * FROM payments WHERE tenant_id = $1 AND id = $2;

-- name: PaymentGetForUpdate :one
SELECT * FROM payments WHERE tenant_id = $1 AND id = $2 FOR UPDATE;

-- name: PaymentGetByIdempotencyKey :one
SELECT * FROM payments WHERE tenant_id = $1 AND idempotency_key = $2;

-- name: PaymentGetLiveForOrder :one
SELECT * FROM payments WHERE tenant_id = $1 AND order_id = $2 AND status IN ('pending', 'succeeded');

-- name: PaymentSucceed :one
-- PaymentSucceed finishes a pending payment; it returns no row when the
-- payment is no longer pending (someone else finished it first).
UPDATE payments SET status = 'succeeded', provider_charge_id = @provider_charge_id, updated_at = @now
WHERE tenant_id = @tenant_id AND id = @id AND status = 'pending'
RETURNING *;

-- name: PaymentFail :one
UPDATE payments SET status = 'failed', provider_charge_id = @provider_charge_id, failure_code = @failure_code, updated_at = @now
WHERE tenant_id = @tenant_id AND id = @id AND status = 'pending'
RETURNING *;

-- name: PaymentRequestCancel :one
-- PaymentRequestCancel marks a pending payment to be cancelled (once: the
-- first mark's time stays); it returns no row when the payment is no longer
-- pending, and the caller reads what it became.
UPDATE payments SET cancel_requested_at = coalesce(cancel_requested_at, @now), updated_at = @now
WHERE tenant_id = @tenant_id AND id = @id AND status = 'pending'
RETURNING *;

-- name: PaymentReserveRefund :one
-- PaymentReserveRefund reserves amount for a refund of a succeeded payment;
-- no row means the payment cannot cover it.
UPDATE payments SET refund_reserved = refund_reserved + @amount, updated_at = @now
WHERE tenant_id = @tenant_id AND id = @id AND status = 'succeeded' AND refund_reserved + @amount <= amount
RETURNING *;

-- name: PaymentReleaseRefund :exec
UPDATE payments SET refund_reserved = refund_reserved - @amount, updated_at = @now WHERE tenant_id = @tenant_id AND id = @id;

-- name: PaymentAddRefunded :one
UPDATE payments SET amount_refunded = amount_refunded + @amount, updated_at = @now WHERE tenant_id = @tenant_id AND id = @id
RETURNING *;

-- name: RefundInsert :one
INSERT INTO refunds (id, tenant_id, payment_id, idempotency_key, request_hash, provider_key, status, amount, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7, $8, $8)
RETURNING *;

-- name: RefundGetByIdempotencyKey :one
SELECT * FROM refunds WHERE tenant_id = $1 AND idempotency_key = $2;

-- name: RefundGet :one
SELECT * FROM refunds WHERE tenant_id = $1 AND id = $2;

-- name: RefundSucceed :one
UPDATE refunds SET status = 'succeeded', provider_refund_id = @provider_refund_id, updated_at = @now
WHERE tenant_id = @tenant_id AND id = @id AND status = 'pending'
RETURNING *;

-- name: RefundFail :one
UPDATE refunds SET status = 'failed', failure_code = @failure_code, updated_at = @now
WHERE tenant_id = @tenant_id AND id = @id AND status = 'pending'
RETURNING *;

-- name: PaymentListByOrder :many
-- PaymentListByOrder lists every payment attempt of one of the tenant's
-- orders, oldest first: declined ones, the live one, and any that are still
-- pending.
SELECT * FROM payments WHERE tenant_id = $1 AND order_id = $2 ORDER BY created_at, id;

-- name: RefundListByOrder :many
-- RefundListByOrder lists the refunds of all payments of one of the
-- tenant's orders, oldest first.
SELECT r.* FROM refunds r
JOIN payments p ON p.tenant_id = r.tenant_id AND p.id = r.payment_id
WHERE r.tenant_id = $1 AND p.tenant_id = $1 AND p.order_id = $2
ORDER BY r.created_at, r.id;
