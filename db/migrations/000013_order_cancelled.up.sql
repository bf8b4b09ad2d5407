-- An order awaiting its payment may be cancelled (orders.cancel): the
-- status CHECK takes 'cancelled'.
--
-- One DO block on purpose: it is the form that runs on plain PostgreSQL and
-- on Citus alike, where orders is a distributed table. Measured on Citus
-- 13.2: the same two statements as two commands of the file fail there
-- ("cannot insert multiple commands into a prepared statement", SQLSTATE
-- 42601), and as one ALTER TABLE with two subcommands ("cannot execute ADD
-- CONSTRAINT command with other subcommands", 0A000); both pass on plain
-- PostgreSQL (docs/EXTENDING.md, "Migrations that run on Citus too").
DO $$
BEGIN
    ALTER TABLE orders DROP CONSTRAINT orders_status_check;
    ALTER TABLE orders ADD CONSTRAINT orders_status_check
        CHECK (status IN ('awaiting_payment', 'paid', 'fulfilled', 'partially_refunded', 'refunded', 'cancelled'));
END
$$;
