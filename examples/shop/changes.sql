-- Changes the demo makes between the first build and the fast refresh.
BEGIN;
INSERT INTO public.orders VALUES
    (5001, 7, 'open', 999.99, '2026-11-20 10:00:00', 'rush'),
    (5002, 8, 'open', 12.50,  '2026-11-20 10:05:00', NULL);
UPDATE public.orders SET status = 'shipped' WHERE id IN (4, 8, 12);       -- leave open_orders
UPDATE public.orders SET status = 'open', amount = 450 WHERE id = 2;     -- enters open_orders and big_orders
COMMIT;
UPDATE public.orders SET id = 9001 WHERE id = 16;                          -- a primary-key update
DELETE FROM public.orders WHERE id IN (20, 24);
UPDATE public.customers SET name = 'Ada Lovelace', email = NULL WHERE id = 8;
