-- name: ProductList :many
SELECT * FROM products WHERE tenant_id = $1 ORDER BY sku;

-- name: ProductInsert :exec
-- ProductInsert adds a product to the tenant's catalog. It does nothing
-- when the tenant has the SKU already: the product keeps its price and its
-- stock, so seeding again never gives back stock that orders took.
INSERT INTO products (tenant_id, sku, name, unit_amount, currency, stock)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (tenant_id, sku) DO NOTHING;

-- name: OrderGet :one
SELECT * FROM orders WHERE tenant_id = $1 AND id = $2;

-- name: OrderItemsGet :many
SELECT * FROM order_items WHERE tenant_id = $1 AND order_id = $2 ORDER BY line;

-- name: OrderItemsGetMany :many
SELECT * FROM order_items WHERE tenant_id = @tenant_id AND order_id = ANY(@order_ids::uuid[]) ORDER BY order_id, line;

-- name: OrderListNewest :many
-- OrderListNewest lists a tenant's orders newest first, after the keyset
-- cursor (created_at, id) when one is given.
SELECT * FROM orders
WHERE tenant_id = @tenant_id
  AND (NOT @has_cursor::bool OR (created_at, id) < (@cursor_created_at::timestamptz, @cursor_id::uuid))
ORDER BY created_at DESC, id DESC
LIMIT @max_rows;

-- name: OrderGetForUpdate :one
SELECT * FROM orders WHERE tenant_id = $1 AND id = $2 FOR UPDATE;

-- name: OrderAdvanceStatus :execrows
-- OrderAdvanceStatus moves an order to @status from one of @from_statuses,
-- the statuses the lifecycle allows it from (orders.Status.Predecessors,
-- in Go): an order never moves backwards, and a status it already has or
-- has passed changes nothing.
UPDATE orders SET status = @status, updated_at = @now
WHERE tenant_id = @tenant_id AND id = @id AND status = ANY(@from_statuses::text[]);

-- name: OrderLockStock :many
-- OrderLockStock locks the products an order needs, in SKU order (two
-- shipments that share products lock in the same order and never
-- deadlock), and returns each line with what is in stock. order_lines
-- counts all lines of the order: fewer rows than that means a line names a
-- product that does not exist (any more).
SELECT i.sku, i.name, i.quantity, p.stock,
       (SELECT count(*) FROM order_items c WHERE c.tenant_id = @tenant_id AND c.order_id = @order_id)::int AS order_lines
FROM order_items i
JOIN products p ON p.tenant_id = i.tenant_id AND p.sku = i.sku
WHERE i.tenant_id = @tenant_id AND p.tenant_id = @tenant_id AND i.order_id = @order_id
ORDER BY i.sku
FOR UPDATE OF p;

-- name: OrderTakeStock :execrows
-- OrderTakeStock takes every line's quantity out of stock. Run it on
-- locked rows that all suffice; p.stock >= i.quantity (and the CHECK on
-- products.stock) make sure it never goes below zero regardless.
UPDATE products p
SET stock = p.stock - i.quantity
FROM order_items i
WHERE i.tenant_id = @tenant_id AND i.order_id = @order_id AND p.tenant_id = @tenant_id AND p.sku = i.sku AND p.stock >= i.quantity;

-- The create's statements (orders.Service.createOrder): batch queries,
-- queued into the step's pipeline (operation.Batch). The reads go in the
-- first send, with the key's claim; the writes in the second, with the
-- stored answer and COMMIT.

-- name: ProductGetMany :batchmany
-- ProductGetMany returns the tenant's products with the given SKUs.
SELECT * FROM products WHERE tenant_id = $1 AND sku = ANY(@skus::text[]);

-- name: OrderGetByIdempotencyKey :batchone
-- OrderGetByIdempotencyKey finds the order a key created: there is one
-- when the key's idempotency record expired and a late retry came.
SELECT * FROM orders WHERE tenant_id = $1 AND idempotency_key = $2;

-- name: OrderItemsGetByIdempotencyKey :batchmany
-- OrderItemsGetByIdempotencyKey returns the lines of the order a key
-- created (none for a new key), for a late retry's answer.
SELECT i.* FROM order_items i
JOIN orders o ON o.tenant_id = i.tenant_id AND o.id = i.order_id
WHERE o.tenant_id = @tenant_id AND i.tenant_id = @tenant_id AND o.idempotency_key = @idempotency_key
ORDER BY i.line;

-- name: OrderInsert :batchexec
-- OrderInsert inserts an order, queued with its lines, its event, the
-- stored answer and COMMIT. It has no ON CONFLICT: the key's order was
-- looked for in the first send, under the claim's lock, and a conflict
-- now would abort the rest of the batch, COMMIT included. The row is the
-- one the service built, so nothing is returned.
INSERT INTO orders (id, tenant_id, idempotency_key, request_hash, status, currency, amount_total, created_at, updated_at)
VALUES ($1, $2, $3, $4, 'awaiting_payment', $5, $6, $7, $7);

-- name: OrderItemsInsert :batchexec
-- OrderItemsInsert inserts all lines of an order in one statement, after
-- the order in the same transaction. The lines are selected with the order
-- row (tenant_id, id) rather than from the parameters alone: on Citus that
-- makes it an INSERT ... SELECT within the tenant's shard, pushed down to
-- it as one task. Lines from parameters alone Citus evaluates on the
-- coordinator and COPYs into the shard, and a COPY turns every order
-- creation into a two-phase commit, whose COMMIT PREPARED cut by a lost
-- connection leaves the order invisible, and its key locked, until Citus
-- recovers it (docs/RELIABILITY.md, the cluster run's finding).
INSERT INTO order_items (tenant_id, order_id, line, sku, name, quantity, unit_amount, amount)
SELECT o.tenant_id, o.id,
       unnest(@lines::int[]), unnest(@skus::text[]), unnest(@names::text[]),
       unnest(@quantities::int[]), unnest(@unit_amounts::bigint[]), unnest(@amounts::bigint[])
FROM orders o
WHERE o.tenant_id = @tenant_id::uuid AND o.id = @order_id::uuid;
