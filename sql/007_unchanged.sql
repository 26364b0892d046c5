-- mvlog catalog, version 6: a fleet's refresh costs what changed.
--
-- Before any Spark work, `mvlog refresh` asks mvlog.unchanged_views() which of the views it was
-- asked for have nothing to apply: then it records them fresh without starting Spark or opening
-- their Delta tables (docs/design-notes.md, "Nothing changed, nothing spent").

-- When the refresh that last checked the view against the database (its columns, the DDL of its
-- tables) began. DDL logged after it may change what the view means: such a view is not
-- "unchanged" until a refresh has checked it again. NULL: never checked (not skipped).
ALTER TABLE mvlog.views ADD COLUMN IF NOT EXISTS checked_at timestamptz;
-- The query reads the clock or random numbers (now(), random(), ...), or a PostgreSQL view (whose
-- CREATE OR REPLACE no log records): its result can change while its logs hold nothing, so it is
-- never skipped as unchanged. NULL until apply registers the view again.
ALTER TABLE mvlog.views ADD COLUMN IF NOT EXISTS volatile boolean;

-- A member of the partition tree (or inheritance tree) of logged table `root` that its log does not
-- cover, or a covered one that left the tree (with what is wrong with it), as the calling statement's
-- snapshot sees pg_inherits (pg_partition_tree() would read the newest catalog instead).
CREATE OR REPLACE FUNCTION mvlog.partition_drift(root oid) RETURNS TABLE (partition_name text, what text)
LANGUAGE sql STABLE AS $fn$
WITH RECURSIVE tree(relid) AS (
    SELECT root
    UNION ALL
    SELECT i.inhrelid FROM pg_inherits AS i JOIN tree AS t ON i.inhparent = t.relid
)
SELECT name, what FROM (
    SELECT (SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class AS c
            JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE c.oid = t.relid), 'is not covered by its log'
    FROM tree AS t
    WHERE t.relid <> root
      AND (NOT EXISTS (SELECT FROM mvlog.log_partitions AS p WHERE p.partition_oid = t.relid)
           OR (SELECT count(*) FROM pg_trigger AS g
               WHERE g.tgrelid = t.relid
                 AND g.tgname IN ('mvlog$insert', 'mvlog$update', 'mvlog$delete', 'mvlog$truncate'))
              <> CASE WHEN (SELECT l.capture FROM mvlog.logs AS l WHERE l.table_oid = root) = 'logical'
                      THEN 1 ELSE 4 END  -- logical: the TRUNCATE trigger alone (log_truncate_trigger.sql)
           OR NOT EXISTS (SELECT FROM pg_trigger AS g WHERE g.tgrelid = t.relid AND g.tgname = 'mvlog$truncate'))
    UNION ALL
    SELECT p.partition_name, 'is covered by its log but left the table'
    FROM mvlog.log_partitions AS p
    WHERE p.table_oid = root AND p.partition_oid NOT IN (SELECT t.relid FROM tree AS t)
) AS drift(name, what)
ORDER BY name
$fn$;

-- For each named view: whether a refresh now would have nothing to apply. True only when
--   * it was built and needs no complete refresh, and its query is not volatile;
--   * none of its logs holds a row after its stamp: no change (stamped or not), no TRUNCATE ('T')
--     and no partition dropped or moved unlogged ('P');
--   * no partition of its tables drifted from what the logs cover;
--   * no DDL on its tables (or their partitions) was logged after the refresh that last checked it;
--   * for a log filled by logical decoding, the slot was not lost since its stamp (the caller first
--     lets the capture write everything committed before it asked).
-- A transaction still in flight is invisible here and is taken by a later refresh, as it would be
-- had it committed a moment later: nothing is lost, because an unchanged view keeps its stamp.
CREATE OR REPLACE FUNCTION mvlog.unchanged_views(names text[])
RETURNS TABLE (view_name text, definition_hash text, unchanged boolean)
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    logged record;
    log_names text[] := '{}';
    newest timestamptz[] := '{}';
    drifted boolean[] := '{}';
    found_newest timestamptz;
BEGIN
    FOR logged IN
        SELECT DISTINCT g.log_name, g.table_oid
        FROM mvlog.view_logs AS vl JOIN mvlog.logs AS g USING (table_schema, table_name)
        WHERE vl.view_name = ANY(names)
    LOOP
        EXECUTE format('SELECT max("snaptime$$") FROM mvlog.%I', logged.log_name) INTO found_newest;
        log_names := log_names || logged.log_name;
        newest := newest || found_newest;
        drifted := drifted || EXISTS (SELECT FROM mvlog.partition_drift(logged.table_oid));
    END LOOP;
    RETURN QUERY
    WITH tails AS (SELECT * FROM unnest(log_names, newest, drifted) AS t(log_name, newest, drifted)),
         lost AS (SELECT max(s.replaced_at) AS at FROM mvlog.capture_state AS s)
    SELECT v.name, v.definition_hash,
           v.last_snaptime IS NOT NULL AND v.needs_complete IS NULL AND v.volatile IS FALSE
           AND v.checked_at IS NOT NULL
           AND NOT EXISTS (
               SELECT FROM mvlog.view_logs AS vl
               JOIN mvlog.logs AS g USING (table_schema, table_name)
               JOIN tails AS t ON t.log_name = g.log_name
               WHERE vl.view_name = v.name
                 AND (t.newest > v.last_snaptime OR t.drifted
                      OR (g.capture <> 'trigger' AND (SELECT lost.at FROM lost) > v.last_snaptime)
                      OR EXISTS (SELECT FROM mvlog.ddl_log AS d
                                 WHERE d.logged_at > v.checked_at
                                   AND (d.table_oid = g.table_oid
                                        OR d.table_oid IN (SELECT p.partition_oid FROM mvlog.log_partitions AS p
                                                           WHERE p.table_oid = g.table_oid)))))
    FROM mvlog.views AS v
    WHERE v.name = ANY(names);
END
$fn$;

INSERT INTO mvlog.schema_version (version) VALUES (6) ON CONFLICT DO NOTHING;
