-- Least privilege for refreshing: the role mvlog_refresh.
--
-- Run once as the role that runs `mvlog apply` (the owner of schema mvlog), after the first
-- `mvlog apply`. Then give a login role the refresh rights plus SELECT on the base tables:
--
--     GRANT mvlog_refresh TO etl;
--     GRANT SELECT ON public.orders, public.customers TO etl;
--
-- etl can then run `mvlog refresh`, `status`, `history`, `explain`, `plan`, `verify`, `purge` and
-- `schedule`, but not `apply` or `drop` (they create and drop triggers, tables and functions).
-- Writers need nothing from mvlog: the log triggers run as their owner (SECURITY DEFINER, with a
-- fixed search_path), and nobody but the owner can read or write a log directly.

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'mvlog_refresh') THEN
        CREATE ROLE mvlog_refresh NOLOGIN;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA mvlog TO mvlog_refresh;

-- The catalog: read it; record stamps, refreshes and their history, and what verify found.
GRANT SELECT ON mvlog.schema_version, mvlog.logs, mvlog.views, mvlog.view_logs, mvlog.refresh_history,
                mvlog.ddl_log, mvlog.log_partitions, mvlog.verify_history TO mvlog_refresh;
GRANT UPDATE (last_stamp) ON mvlog.logs TO mvlog_refresh;
GRANT UPDATE (last_snaptime, last_refresh_at, last_method, needs_complete, row_count, output_signature, checked_at)
    ON mvlog.views TO mvlog_refresh;
GRANT INSERT, UPDATE ON mvlog.refresh_history TO mvlog_refresh;
GRANT USAGE ON SEQUENCE mvlog.refresh_history_id_seq TO mvlog_refresh;
GRANT INSERT ON mvlog.verify_history TO mvlog_refresh;
GRANT EXECUTE ON FUNCTION mvlog.analyze(regclass) TO mvlog_refresh;
-- capture: logical. A refresh (and `mvlog capture`) runs capture passes: it writes the logs (below)
-- and the capture's position. The slot's functions also need the REPLICATION attribute, which a
-- role cannot get by GRANT: ALTER ROLE etl REPLICATION (RDS/Aurora: GRANT rds_replication TO etl).
-- A hand-over back to triggers is finished by the next `mvlog apply` (it takes a table out of the
-- publication, which only the table's owner may).
GRANT SELECT, UPDATE ON mvlog.capture_state TO mvlog_refresh;

-- Logs (stamp = UPDATE, purge = DELETE, read = SELECT) and the views' state: key maps, the group
-- tables of aggregates kept by deltas, top-N margins, composed views' pieces' rows and keys, range
-- parameters (maintained with DELETE, UPDATE and INSERT, rebuilt with TRUNCATE and INSERT): the
-- ones that exist now ...
DO $$
DECLARE
    t record;
BEGIN
    FOR t IN SELECT c.relname FROM pg_class AS c
             WHERE c.relnamespace = 'mvlog'::regnamespace AND c.relkind = 'r'
               AND (c.relname LIKE 'mlog$%' OR c.relname LIKE 'keys$%' OR c.relname LIKE 'groups$%'
                    OR c.relname LIKE 'top$%' OR c.relname LIKE 'inner$%' OR c.relname LIKE 'outer$%'
                    OR c.relname LIKE 'param$%')
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON mvlog.%I TO mvlog_refresh', t.relname);
    END LOOP;
END
$$;
-- ... and the ones `mvlog apply` creates later.
ALTER DEFAULT PRIVILEGES IN SCHEMA mvlog GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON TABLES TO mvlog_refresh;
