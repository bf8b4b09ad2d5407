-- Every tenant-owned row is addressed by its tenant first: tenant_id leads
-- every primary key, every unique constraint and every foreign key of the
-- tables a tenant owns. On plain PostgreSQL this changes no behaviour (ids
-- are UUIDv7 and never collide across tenants); it is what lets Citus
-- distribute the tables by tenant_id and keep every business transaction
-- on one shard.

-- order_items had no tenant of its own.
ALTER TABLE order_items ADD COLUMN tenant_id uuid;
UPDATE order_items i SET tenant_id = o.tenant_id FROM orders o WHERE o.id = i.order_id;
ALTER TABLE order_items ALTER COLUMN tenant_id SET NOT NULL;

-- The foreign keys to the old single-column keys go first.
ALTER TABLE order_items DROP CONSTRAINT order_items_order_id_fkey;
ALTER TABLE payments DROP CONSTRAINT payments_order_id_fkey;
ALTER TABLE notifications DROP CONSTRAINT notifications_order_id_fkey;
ALTER TABLE refunds DROP CONSTRAINT refunds_payment_id_fkey;

ALTER TABLE orders DROP CONSTRAINT orders_pkey, ADD PRIMARY KEY (tenant_id, id);

ALTER TABLE order_items DROP CONSTRAINT order_items_pkey,
    ADD PRIMARY KEY (tenant_id, order_id, line),
    ADD CONSTRAINT order_items_order FOREIGN KEY (tenant_id, order_id) REFERENCES orders (tenant_id, id) ON DELETE CASCADE;

-- The provider key is derived from (tenant, operation, key), so it is
-- unique per tenant exactly when it is unique at all.
ALTER TABLE payments DROP CONSTRAINT payments_pkey,
    ADD PRIMARY KEY (tenant_id, id),
    DROP CONSTRAINT payments_provider_key,
    ADD CONSTRAINT payments_provider_key UNIQUE (tenant_id, provider_key),
    ADD CONSTRAINT payments_order FOREIGN KEY (tenant_id, order_id) REFERENCES orders (tenant_id, id);
DROP INDEX payments_one_live_per_order;
CREATE UNIQUE INDEX payments_one_live_per_order ON payments (tenant_id, order_id) WHERE status IN ('pending', 'succeeded');
DROP INDEX payments_provider_charge;
CREATE UNIQUE INDEX payments_provider_charge ON payments (tenant_id, provider_charge_id) WHERE provider_charge_id IS NOT NULL;

ALTER TABLE refunds DROP CONSTRAINT refunds_pkey,
    ADD PRIMARY KEY (tenant_id, id),
    DROP CONSTRAINT refunds_provider_key,
    ADD CONSTRAINT refunds_provider_key UNIQUE (tenant_id, provider_key),
    ADD CONSTRAINT refunds_payment FOREIGN KEY (tenant_id, payment_id) REFERENCES payments (tenant_id, id);
DROP INDEX refunds_payment;
CREATE INDEX refunds_payment ON refunds (tenant_id, payment_id);

ALTER TABLE notifications DROP CONSTRAINT notifications_pkey,
    ADD PRIMARY KEY (tenant_id, id),
    ADD CONSTRAINT notifications_order FOREIGN KEY (tenant_id, order_id) REFERENCES orders (tenant_id, id);
DROP INDEX notifications_order;
CREATE INDEX notifications_order_id ON notifications (tenant_id, order_id);

-- The outbox's order: Citus refuses identity columns, so seq comes from a
-- plain sequence, continuing where the identity stopped. The claim and the
-- event list keep walking it; it is unique by construction, and no longer
-- by a constraint of its own (which would have to include tenant_id).
ALTER TABLE outbox_events ALTER COLUMN seq DROP IDENTITY;
CREATE SEQUENCE outbox_events_seq AS bigint OWNED BY outbox_events.seq;
SELECT setval('outbox_events_seq', COALESCE((SELECT max(seq) FROM outbox_events), 0) + 1, false);
ALTER TABLE outbox_events ALTER COLUMN seq SET DEFAULT nextval('outbox_events_seq'),
    DROP CONSTRAINT outbox_events_seq_key,
    DROP CONSTRAINT outbox_events_pkey,
    ADD PRIMARY KEY (tenant_id, id);

-- The inbox learns whose message it recorded. Rows whose event the outbox
-- still holds, or that left a notification, get its tenant; the others are
-- of events swept long ago, which no broker redelivers and no operator can
-- replay: they keep the nil tenant until the sweeper removes them.
ALTER TABLE processed_messages ADD COLUMN tenant_id uuid;
UPDATE processed_messages m SET tenant_id = e.tenant_id FROM outbox_events e WHERE e.id::text = m.message_id;
UPDATE processed_messages m SET tenant_id = n.tenant_id FROM notifications n
    WHERE m.tenant_id IS NULL AND n.event_id::text = m.message_id;
UPDATE processed_messages SET tenant_id = '00000000-0000-0000-0000-000000000000' WHERE tenant_id IS NULL;
ALTER TABLE processed_messages ALTER COLUMN tenant_id SET NOT NULL,
    DROP CONSTRAINT processed_messages_pkey,
    ADD PRIMARY KEY (tenant_id, message_id, subscriber);

ALTER TABLE attention_items DROP CONSTRAINT attention_items_pkey, ADD PRIMARY KEY (tenant_id, id);
DROP INDEX attention_items_delivery;
CREATE UNIQUE INDEX attention_items_delivery ON attention_items (tenant_id, delivery_id) WHERE delivery_id IS NOT NULL;

-- Some statements still find a row by its id alone (a payment or refund
-- finished by id, an outbox row marked by id, an order's live payment by
-- the order): with the id second in the primary key they would scan the
-- table. These plain indexes keep them as fast as before; they go again
-- once every such statement names the tenant too (which Citus needs to
-- route it to one shard). Plain, not unique: the ids are UUIDv7, and a
-- distributed table takes no unique index without tenant_id.
CREATE INDEX orders_id ON orders (id);
CREATE INDEX payments_id ON payments (id);
CREATE INDEX payments_live_by_order ON payments (order_id) WHERE status IN ('pending', 'succeeded');
CREATE INDEX refunds_id ON refunds (id);
CREATE INDEX refunds_payment_id ON refunds (payment_id);
CREATE INDEX outbox_events_id ON outbox_events (id);
CREATE INDEX attention_items_id ON attention_items (id);
