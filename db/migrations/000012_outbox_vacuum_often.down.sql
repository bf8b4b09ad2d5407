ALTER TABLE outbox_events RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold);
