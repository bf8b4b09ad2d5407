-- Back to plain tables on the coordinator (on plain PostgreSQL: nothing).
DO $$
DECLARE
    t text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        RETURN;
    END IF;
    FOREACH t IN ARRAY ARRAY['attention_items', 'api_idempotency', 'processed_messages', 'outbox_events', 'notifications',
                             'refunds', 'payments', 'order_items', 'products', 'orders', 'api_keys', 'tenants'] LOOP
        PERFORM undistribute_table(t, cascade_via_foreign_keys => true)
        FROM pg_dist_partition WHERE logicalrelid = t::regclass;
    END LOOP;
END
$$;
