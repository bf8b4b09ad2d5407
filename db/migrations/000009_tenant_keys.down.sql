DROP INDEX orders_id, payments_id, payments_live_by_order, refunds_id, refunds_payment_id, outbox_events_id, attention_items_id;
DROP INDEX attention_items_delivery;
CREATE UNIQUE INDEX attention_items_delivery ON attention_items (delivery_id) WHERE delivery_id IS NOT NULL;
ALTER TABLE attention_items DROP CONSTRAINT attention_items_pkey, ADD PRIMARY KEY (id);

ALTER TABLE processed_messages DROP CONSTRAINT processed_messages_pkey, ADD PRIMARY KEY (message_id, subscriber);
ALTER TABLE processed_messages DROP COLUMN tenant_id;

ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_pkey, ADD PRIMARY KEY (id),
    ADD CONSTRAINT outbox_events_seq_key UNIQUE (seq), ALTER COLUMN seq DROP DEFAULT;
DROP SEQUENCE outbox_events_seq;
ALTER TABLE outbox_events ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY;
SELECT setval(pg_get_serial_sequence('outbox_events', 'seq'), COALESCE((SELECT max(seq) FROM outbox_events), 0) + 1, false);

ALTER TABLE notifications DROP CONSTRAINT notifications_order;
DROP INDEX notifications_order_id;
CREATE INDEX notifications_order ON notifications (order_id);
ALTER TABLE refunds DROP CONSTRAINT refunds_payment;
DROP INDEX refunds_payment;
CREATE INDEX refunds_payment ON refunds (payment_id);
ALTER TABLE payments DROP CONSTRAINT payments_order;
ALTER TABLE order_items DROP CONSTRAINT order_items_order;

DROP INDEX payments_provider_charge;
CREATE UNIQUE INDEX payments_provider_charge ON payments (provider_charge_id) WHERE provider_charge_id IS NOT NULL;
DROP INDEX payments_one_live_per_order;
CREATE UNIQUE INDEX payments_one_live_per_order ON payments (order_id) WHERE status IN ('pending', 'succeeded');

ALTER TABLE refunds DROP CONSTRAINT refunds_pkey, ADD PRIMARY KEY (id),
    DROP CONSTRAINT refunds_provider_key, ADD CONSTRAINT refunds_provider_key UNIQUE (provider_key);
ALTER TABLE notifications DROP CONSTRAINT notifications_pkey, ADD PRIMARY KEY (id);
ALTER TABLE payments DROP CONSTRAINT payments_pkey, ADD PRIMARY KEY (id),
    DROP CONSTRAINT payments_provider_key, ADD CONSTRAINT payments_provider_key UNIQUE (provider_key);
ALTER TABLE order_items DROP CONSTRAINT order_items_pkey, ADD PRIMARY KEY (order_id, line);
ALTER TABLE orders DROP CONSTRAINT orders_pkey, ADD PRIMARY KEY (id);

ALTER TABLE order_items ADD CONSTRAINT order_items_order_id_fkey FOREIGN KEY (order_id) REFERENCES orders (id) ON DELETE CASCADE;
ALTER TABLE payments ADD CONSTRAINT payments_order_id_fkey FOREIGN KEY (order_id) REFERENCES orders (id);
ALTER TABLE notifications ADD CONSTRAINT notifications_order_id_fkey FOREIGN KEY (order_id) REFERENCES orders (id);
ALTER TABLE refunds ADD CONSTRAINT refunds_payment_id_fkey FOREIGN KEY (payment_id) REFERENCES payments (id);
ALTER TABLE order_items DROP COLUMN tenant_id;
