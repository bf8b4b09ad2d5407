-- On a database with the citus extension, distribute every tenant-owned
-- table by tenant_id, all co-located with orders, so that the rows of one
-- tenant live on one shard and every business transaction is a
-- single-shard one. tenants and api_keys are small and read on every
-- request: reference tables, copied to every node. On plain PostgreSQL this
-- does nothing.
--
-- The foreign keys to tenants are taken off while the tables move and put
-- back after: a local table that references a reference table becomes a
-- Citus local table, which a distributed table then may not reference.
DO $$
DECLARE
    t text;
    owned text[] := ARRAY['products', 'order_items', 'payments', 'refunds', 'notifications',
                          'outbox_events', 'processed_messages', 'api_idempotency', 'attention_items'];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        RETURN;
    END IF;
    FOREACH t IN ARRAY owned || ARRAY['orders'] LOOP
        EXECUTE format('ALTER TABLE %I DROP CONSTRAINT IF EXISTS %I', t, t || '_tenant_id_fkey');
    END LOOP;
    PERFORM create_reference_table('tenants');
    PERFORM create_reference_table('api_keys');
    PERFORM create_distributed_table('orders', 'tenant_id');
    FOREACH t IN ARRAY owned LOOP
        PERFORM create_distributed_table(t, 'tenant_id', colocate_with => 'orders');
    END LOOP;
    FOREACH t IN ARRAY ARRAY['orders', 'products', 'payments', 'refunds', 'notifications',
                             'outbox_events', 'api_idempotency', 'attention_items'] LOOP
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I FOREIGN KEY (tenant_id) REFERENCES tenants (id)', t, t || '_tenant_id_fkey');
    END LOOP;
END
$$;
