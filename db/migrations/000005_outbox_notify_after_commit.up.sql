-- The statement trigger of 000003 sent a NOTIFY from every transaction that
-- appended to the outbox. PostgreSQL queues notifications at commit under
-- one database-wide lock held until the commit is durable, so those
-- transactions committed one at a time and their WAL flushes could not be
-- grouped: create throughput at 16 clients was about halved
-- (docs/BENCHMARKS.md, "NOTIFY serializes commits"). The services now wake
-- the dispatcher of their own process after the commit (outbox.Signal);
-- other processes' dispatchers poll, and operators' commands still NOTIFY.
DROP TRIGGER outbox_events_notify ON outbox_events;
DROP FUNCTION outbox_events_notify();
