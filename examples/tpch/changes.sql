-- Changes the TPC-H demo makes between the first build and the fast refresh.
BEGIN;  -- a new order with three lines
INSERT INTO orders VALUES (20001, 7, 'O', 0, '2026-11-20');
INSERT INTO lineitem VALUES (20001, 1, 5, 12000.00, 0.05, 'N'), (20001, 2, 1, 880.50, 0.00, 'R'),
                            (20001, 3, 9, 4500.00, 0.10, 'N');
COMMIT;
UPDATE orders SET o_orderstatus = 'F' WHERE o_orderkey IN (4, 8, 12);       -- orders leave "open"
UPDATE customer SET c_nationkey = 6 WHERE c_custkey = 31;                  -- a customer moves to FRANCE
UPDATE nation SET n_name = 'KINGDOM OF MOROCCO' WHERE n_nationkey = 15;    -- a dimension fans out
DELETE FROM lineitem WHERE l_orderkey = 100;                               -- an order loses its lines
DELETE FROM orders WHERE o_orderkey = 100;
UPDATE lineitem SET l_linenumber = 9 WHERE l_orderkey = 7 AND l_linenumber = 1;   -- a key update
UPDATE lineitem SET l_returnflag = 'R' WHERE l_orderkey = 21;              -- lines enter returned_lines
