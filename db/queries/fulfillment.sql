-- name: FulfillmentLockStock :many
-- FulfillmentLockStock locks the products an order needs, in SKU order (two
-- fulfillments that share products lock in the same order and never
-- deadlock), and returns each line with what is in stock. order_lines
-- counts all lines of the order: fewer rows than that means a line names a
-- product that does not exist (any more).
SELECT i.sku, i.name, i.quantity, p.stock,
       (SELECT count(*) FROM order_items c WHERE c.order_id = i.order_id)::int AS order_lines
FROM order_items i
JOIN products p ON p.tenant_id = @tenant_id AND p.sku = i.sku
WHERE i.order_id = @order_id
ORDER BY i.sku
FOR UPDATE OF p;

-- name: FulfillmentTakeStock :execrows
-- FulfillmentTakeStock takes every line's quantity out of stock. Run it on
-- locked rows that all suffice; p.stock >= i.quantity (and the CHECK on
-- products.stock) make sure it never goes below zero regardless.
UPDATE products p
SET stock = p.stock - i.quantity
FROM order_items i
WHERE i.order_id = @order_id AND p.tenant_id = @tenant_id AND p.sku = i.sku AND p.stock >= i.quantity;

-- name: NotificationInsert :exec
INSERT INTO notifications (id, tenant_id, order_id, kind, event_id, body, created_at)
VALUES (@id, @tenant_id, @order_id, @kind, @event_id, @body, @created_at);
