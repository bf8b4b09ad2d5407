-- name: DemoOrderGet :one
-- DemoOrderGet returns the order if it is the tenant's. The Demo queries
-- serve the demo-mode endpoints (internal/demo): they only read, and each is
-- scoped by tenant like the public API.
SELECT id, status, amount_total, currency FROM orders WHERE tenant_id = $1 AND id = $2;

-- name: DemoPaymentListByOrder :many
-- DemoPaymentListByOrder lists every payment attempt of an order, oldest
-- first: declined ones, the live one, and any that are still pending.
SELECT * FROM payments WHERE tenant_id = $1 AND order_id = $2 ORDER BY created_at, id;

-- name: DemoRefundListByOrder :many
-- DemoRefundListByOrder lists the refunds of all payments of an order,
-- oldest first.
SELECT r.* FROM refunds r
JOIN payments p ON p.id = r.payment_id
WHERE p.tenant_id = $1 AND p.order_id = $2
ORDER BY r.created_at, r.id;

-- name: DemoEventExists :one
-- DemoEventExists reports whether the tenant has the outbox event.
SELECT EXISTS (SELECT 1 FROM outbox_events WHERE tenant_id = $1 AND id = $2);
