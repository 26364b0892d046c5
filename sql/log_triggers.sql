-- The triggers of a log captured by triggers (capture: trigger, the default). Rendered like
-- log_table.sql, run after it. Statement-level AFTER triggers with transition tables write the
-- changed keys in the writer's transaction: one INSERT ... SELECT per statement, no per-row
-- dynamic SQL, no column values.

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
