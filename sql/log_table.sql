-- The materialized view log of one table: CREATE MATERIALIZED VIEW LOG ON table WITH PRIMARY KEY.
--
-- Rendered by mvlog with psycopg2.sql (every placeholder in braces is a quoted identifier or a composed
-- list of them), executed by `mvlog apply` in its transaction. Who fills it is the log's capture:
-- its table's triggers (log_triggers.sql) or mvlog's logical decoding (capture: logical).
--
-- snaptime$$ starts at the sentinel 4000-01-01; a refresh stamps it (see DESIGN.md, section 3).
-- dmltype$$: I insert, U update, D delete, T truncate (keys NULL), P partitions changed unwatched.
-- old_new$$: O old key, N new key. xid$$ and lsn$$: the source transaction and its commit position of
-- a row written by logical decoding (NULL for a trigger's row, which its writer's transaction wrote).

CREATE TABLE IF NOT EXISTS {log} (
    {key_defs},
    "snaptime$$" timestamptz NOT NULL DEFAULT '4000-01-01 00:00:00+00',
    "dmltype$$"  "char"      NOT NULL,
    "old_new$$"  "char"      NOT NULL,
    "xact_time$$" timestamptz NOT NULL DEFAULT transaction_timestamp(),  -- for status: age of pending changes
    "xid$$"      xid8,
    "lsn$$"      pg_lsn
);
ALTER TABLE {log} ADD COLUMN IF NOT EXISTS "xid$$" xid8, ADD COLUMN IF NOT EXISTS "lsn$$" pg_lsn;
-- No index (as Oracle's MLOG$ tables): the log holds the changes since the oldest dependent
-- view's last refresh, and stamping, the window read and purge each read most of it anyway.
-- An index on snaptime$$ cost writers ~10 % of pgbench TPC-B TPS (BENCHMARKS.md), and without
-- it the stamping UPDATE can be HOT. Earlier versions of mvlog created one: dropped here.
DROP INDEX IF EXISTS {log_index};
