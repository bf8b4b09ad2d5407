-- name: NotificationInsert :exec
INSERT INTO notifications (id, tenant_id, order_id, kind, event_id, body, created_at)
VALUES (@id, @tenant_id, @order_id, @kind, @event_id, @body, @created_at);
