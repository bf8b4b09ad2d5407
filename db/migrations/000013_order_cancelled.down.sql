-- Back to the statuses without 'cancelled'. A database that holds a
-- cancelled order refuses this (the CHECK fails): going down would have to
-- decide what such an order becomes, and no answer is right.
DO $$
BEGIN
    ALTER TABLE orders DROP CONSTRAINT orders_status_check;
    ALTER TABLE orders ADD CONSTRAINT orders_status_check
        CHECK (status IN ('awaiting_payment', 'paid', 'fulfilled', 'partially_refunded', 'refunded'));
END
$$;
