-- mvlog catalog, version 2: DDL capture (as pgl_ddl_deploy / pgcapture do).
-- Event triggers record DDL that touches a logged table into mvlog.ddl_log. Before a fast
-- refresh, a view compares its output columns and its tables' keys with what they were at its
-- last refresh; the log says what happened and when.

CREATE TABLE IF NOT EXISTS mvlog.ddl_log (
    id              bigserial   PRIMARY KEY,
    logged_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    command_tag     text        NOT NULL,
    object_type     text,
    object_identity text,
    table_oid       oid,
    statement       text
);
CREATE INDEX IF NOT EXISTS ddl_log_table_idx ON mvlog.ddl_log (table_oid, logged_at);

ALTER TABLE mvlog.views ADD COLUMN IF NOT EXISTS output_signature text;  -- columns and types at the last refresh

CREATE OR REPLACE FUNCTION mvlog.capture_ddl() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    -- An index reports its own oid: record it against its table.
    INSERT INTO mvlog.ddl_log (command_tag, object_type, object_identity, table_oid, statement)
    SELECT c.command_tag, c.object_type, c.object_identity, t.table_oid, current_query()
    FROM pg_event_trigger_ddl_commands() AS c
    CROSS JOIN LATERAL (SELECT coalesce((SELECT i.indrelid FROM pg_index AS i WHERE i.indexrelid = c.objid),
                                        c.objid) AS table_oid) AS t
    WHERE c.classid = 'pg_class'::regclass
      AND t.table_oid IN (SELECT l.table_oid FROM mvlog.logs AS l);
END
$fn$;

CREATE OR REPLACE FUNCTION mvlog.capture_drop() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    INSERT INTO mvlog.ddl_log (command_tag, object_type, object_identity, table_oid, statement)
    SELECT tg_tag, d.object_type, d.object_identity, d.objid, current_query()
    FROM pg_event_trigger_dropped_objects() AS d
    WHERE d.classid = 'pg_class'::regclass
      AND d.objid IN (SELECT l.table_oid FROM mvlog.logs AS l);
END
$fn$;

REVOKE ALL ON FUNCTION mvlog.capture_ddl(), mvlog.capture_drop() FROM PUBLIC;


-- Statistics for mvlog's own tables (logs, key maps), callable by a refresh role that does not
-- own them: the planner needs them to probe indexes instead of scanning base tables.
CREATE OR REPLACE FUNCTION mvlog.analyze(target regclass) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    IF (SELECT c.relnamespace FROM pg_class AS c WHERE c.oid = target) <> 'mvlog'::regnamespace THEN
        RAISE EXCEPTION 'mvlog.analyze only analyzes tables in schema mvlog, not %', target;
    END IF;
    EXECUTE format('ANALYZE %s', target);
END
$fn$;
REVOKE ALL ON FUNCTION mvlog.analyze(regclass) FROM PUBLIC;

INSERT INTO mvlog.schema_version (version) VALUES (2) ON CONFLICT DO NOTHING;
