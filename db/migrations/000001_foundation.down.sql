DROP TABLE outbox_events;
DROP TABLE api_idempotency;
DROP TABLE order_items;
DROP TABLE orders;
DROP TABLE products;
DROP TABLE api_keys;
DROP TABLE tenants;
