-- The materialized view log of one table: CREATE MATERIALIZED VIEW LOG ON table WITH PRIMARY KEY.
--
-- Rendered by mvlog with psycopg2.sql (every placeholder in braces is a quoted identifier or a composed
-- list of them), executed by `mvlog apply` in its transaction. Statement-level AFTER
-- triggers with transition tables write the changed keys in the writer's transaction:
-- one INSERT ... SELECT per statement, no per-row dynamic SQL, no column values.
--
-- snaptime$$ starts at the sentinel 4000-01-01; a refresh stamps it (see DESIGN.md, section 3).
-- dmltype$$: I insert, U update, D delete, T truncate (keys NULL). old_new$$: O old key, N new key.

CREATE TABLE IF NOT EXISTS {log} (
    {key_defs},
    "snaptime$$" timestamptz NOT NULL DEFAULT '4000-01-01 00:00:00+00',
    "dmltype$$"  "char"      NOT NULL,
    "old_new$$"  "char"      NOT NULL,
    "xact_time$$" timestamptz NOT NULL DEFAULT transaction_timestamp()  -- for status: age of pending changes
);
-- No index (as Oracle's MLOG$ tables): the log holds the changes since the oldest dependent
-- view's last refresh, and stamping, the window read and purge each read most of it anyway.
-- An index on snaptime$$ cost writers ~10 % of pgbench TPC-B TPS (BENCHMARKS.md), and without
-- it the stamping UPDATE can be HOT. Earlier versions of mvlog created one: dropped here.
DROP INDEX IF EXISTS {log_index};

CREATE OR REPLACE FUNCTION {fn_insert}() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS {body_insert};

CREATE OR REPLACE FUNCTION {fn_update}() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS {body_update};

CREATE OR REPLACE FUNCTION {fn_delete}() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS {body_delete};

CREATE OR REPLACE FUNCTION {fn_truncate}() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS {body_truncate};

REVOKE ALL ON FUNCTION {fn_insert}(), {fn_update}(), {fn_delete}(), {fn_truncate}() FROM PUBLIC;

DROP TRIGGER IF EXISTS "mvlog$insert" ON {table};
DROP TRIGGER IF EXISTS "mvlog$update" ON {table};
DROP TRIGGER IF EXISTS "mvlog$delete" ON {table};
DROP TRIGGER IF EXISTS "mvlog$truncate" ON {table};

CREATE TRIGGER "mvlog$insert" AFTER INSERT ON {table}
    REFERENCING NEW TABLE AS mvlog_new FOR EACH STATEMENT EXECUTE FUNCTION {fn_insert}();
CREATE TRIGGER "mvlog$update" AFTER UPDATE ON {table}
    REFERENCING OLD TABLE AS mvlog_old NEW TABLE AS mvlog_new FOR EACH STATEMENT EXECUTE FUNCTION {fn_update}();
CREATE TRIGGER "mvlog$delete" AFTER DELETE ON {table}
    REFERENCING OLD TABLE AS mvlog_old FOR EACH STATEMENT EXECUTE FUNCTION {fn_delete}();
CREATE TRIGGER "mvlog$truncate" AFTER TRUNCATE ON {table}
    FOR EACH STATEMENT EXECUTE FUNCTION {fn_truncate}();
