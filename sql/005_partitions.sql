-- mvlog catalog, version 4: the log of a partitioned table covers every partition.
--
-- PostgreSQL fires a statement trigger only on the table a statement names: an INSERT, UPDATE,
-- DELETE or TRUNCATE aimed at a partition fires the partition's triggers, not the parent's, and
-- one aimed at the parent fires the parent's alone (its transition tables hold the rows of every
-- partition). So the log triggers sit on every member of the partition tree, each writing the
-- parent's primary key into the one log: every write is logged exactly once, whichever member it
-- names. mvlog.log_partitions lists the members a log covers; the event trigger in
-- 003_event_triggers.sql keeps it in step with CREATE TABLE ... PARTITION OF, ATTACH, DETACH and
-- DROP, and a refresh compares it with the partition tree at its snapshot (a member missing from
-- either side means writes may have gone unlogged: the views refresh completely).

CREATE TABLE IF NOT EXISTS mvlog.log_partitions (
    partition_oid  oid  PRIMARY KEY,
    table_oid      oid  NOT NULL,   -- the logged (partitioned) table
    partition_name text NOT NULL    -- schema.name when it was covered
);
CREATE INDEX IF NOT EXISTS log_partitions_table_idx ON mvlog.log_partitions (table_oid);

-- Put the log triggers of the logged table `root` on every member of its partition tree that
-- lacks them, and take them off the members that left it. `how` says what the change means for
-- the data the views saw:
--   'initial'  the log was just created: its views are built by a complete refresh, nothing to log;
--   'exact'    called by the event trigger in the transaction of the DDL: the keys of an attached
--              partition are logged as inserts, those of a detached one as deletes;
--   'drifted'  called by `mvlog apply` for a tree that changed while no event trigger watched it:
--              what moved is unknown, so a 'P' row makes every dependent view refresh completely.
-- Returns how many members it covered or uncovered.
CREATE OR REPLACE FUNCTION mvlog.cover_partitions(root oid, how text) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    log_name  text;
    log_table text;
    keys      text;
    member    record;
    event     text;
    changed   integer := 0;
    logical   boolean;  -- captured by logical decoding: the TRUNCATE trigger alone on every member
BEGIN
    SELECT l.log_name, format('mvlog.%I', l.log_name),
           (SELECT string_agg(quote_ident(k), ', ' ORDER BY o) FROM unnest(l.key_columns) WITH ORDINALITY AS u(k, o)),
           l.capture = 'logical'
      INTO log_name, log_table, keys, logical
      FROM mvlog.logs AS l WHERE l.table_oid = root;
    IF log_table IS NULL THEN
        RETURN 0;
    END IF;

    -- Members that left the tree (DETACH; a dropped one is handled by mvlog.capture_drop).
    FOR member IN
        SELECT p.partition_oid, c.relkind
        FROM mvlog.log_partitions AS p LEFT JOIN pg_class AS c ON c.oid = p.partition_oid
        WHERE p.table_oid = root
          AND p.partition_oid NOT IN (SELECT t.relid FROM pg_partition_tree(root) AS t)
    LOOP
        IF member.relkind IS NOT NULL THEN
            IF how = 'exact' AND member.relkind = 'r' THEN
                EXECUTE format('INSERT INTO %s (%s, "dmltype$$", "old_new$$") SELECT %s, ''D'', ''O'' FROM %s',
                               log_table, keys, keys, member.partition_oid::regclass);
            END IF;
            FOREACH event IN ARRAY ARRAY['insert', 'update', 'delete', 'truncate'] LOOP
                EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', 'mvlog$' || event, member.partition_oid::regclass);
            END LOOP;
        END IF;
        DELETE FROM mvlog.log_partitions WHERE partition_oid = member.partition_oid;
        changed := changed + 1;
    END LOOP;

    -- Members without the log triggers (created, attached, or their triggers dropped).
    FOR member IN
        SELECT t.relid, c.relkind
        FROM pg_partition_tree(root) AS t JOIN pg_class AS c ON c.oid = t.relid
        WHERE t.relid <> root
          AND (NOT EXISTS (SELECT FROM mvlog.log_partitions AS p WHERE p.partition_oid = t.relid)
               OR (SELECT count(*) FROM pg_trigger AS g
                   WHERE g.tgrelid = t.relid AND g.tgname IN ('mvlog$insert', 'mvlog$update', 'mvlog$delete',
                                                              'mvlog$truncate')) <> CASE WHEN logical THEN 1 ELSE 4 END
               OR (logical AND NOT EXISTS (SELECT FROM pg_trigger AS g
                                           WHERE g.tgrelid = t.relid AND g.tgname = 'mvlog$truncate')))
    LOOP
        -- A logically captured table's partitions are published through their root, but a TRUNCATE
        -- aimed at one is not published at all: the TRUNCATE trigger alone.
        EXECUTE format(
            'DROP TRIGGER IF EXISTS "mvlog$insert" ON %1$s; DROP TRIGGER IF EXISTS "mvlog$update" ON %1$s; '
            'DROP TRIGGER IF EXISTS "mvlog$delete" ON %1$s; DROP TRIGGER IF EXISTS "mvlog$truncate" ON %1$s',
            member.relid::regclass);
        IF logical THEN
            EXECUTE format('CREATE TRIGGER "mvlog$truncate" AFTER TRUNCATE ON %1$s FOR EACH STATEMENT '
                           'EXECUTE FUNCTION %2$s()', member.relid::regclass,
                           format('mvlog.%I', log_name || '$truncate'));
        ELSE
        EXECUTE format(
            'CREATE TRIGGER "mvlog$insert" AFTER INSERT ON %1$s REFERENCING NEW TABLE AS mvlog_new '
            'FOR EACH STATEMENT EXECUTE FUNCTION %2$s(); '
            'CREATE TRIGGER "mvlog$update" AFTER UPDATE ON %1$s REFERENCING OLD TABLE AS mvlog_old '
            'NEW TABLE AS mvlog_new FOR EACH STATEMENT EXECUTE FUNCTION %3$s(); '
            'CREATE TRIGGER "mvlog$delete" AFTER DELETE ON %1$s REFERENCING OLD TABLE AS mvlog_old '
            'FOR EACH STATEMENT EXECUTE FUNCTION %4$s(); '
            'CREATE TRIGGER "mvlog$truncate" AFTER TRUNCATE ON %1$s FOR EACH STATEMENT EXECUTE FUNCTION %5$s()',
            member.relid::regclass,
            format('mvlog.%I', log_name || '$insert'), format('mvlog.%I', log_name || '$update'),
            format('mvlog.%I', log_name || '$delete'), format('mvlog.%I', log_name || '$truncate'));
        END IF;
        IF how = 'exact' AND member.relkind = 'r' THEN
            EXECUTE format('INSERT INTO %s (%s, "dmltype$$", "old_new$$") SELECT %s, ''I'', ''N'' FROM %s',
                           log_table, keys, keys, member.relid::regclass);
        END IF;
        INSERT INTO mvlog.log_partitions (partition_oid, table_oid, partition_name)
        VALUES (member.relid, root, (SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class AS c
                                     JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE c.oid = member.relid))
        ON CONFLICT (partition_oid) DO UPDATE SET table_oid = excluded.table_oid,
                                                  partition_name = excluded.partition_name;
        changed := changed + 1;
    END LOOP;

    IF how = 'drifted' AND changed > 0 THEN
        EXECUTE format('INSERT INTO %s ("dmltype$$", "old_new$$") VALUES (''P'', ''O'')', log_table);
    END IF;
    RETURN changed;
END
$fn$;

-- The event trigger's half (ddl_command_end): DDL on a member of a logged table's partition tree
-- (CREATE TABLE ... PARTITION OF, ALTER TABLE ... ATTACH / DETACH PARTITION) brings the log's
-- coverage in step in the DDL's own transaction.
CREATE OR REPLACE FUNCTION mvlog.capture_partitions() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    -- The tree of each table the DDL touched; a detached partition is its own root now, so its
    -- former tree is found by its registration.
    PERFORM mvlog.cover_partitions(r.root, 'exact')
    FROM (SELECT l.table_oid AS root
          FROM pg_event_trigger_ddl_commands() AS c JOIN mvlog.logs AS l ON l.table_oid = pg_partition_root(c.objid)
          WHERE c.classid = 'pg_class'::regclass
          UNION
          SELECT p.table_oid
          FROM pg_event_trigger_ddl_commands() AS c JOIN mvlog.log_partitions AS p ON p.partition_oid = c.objid
          WHERE c.classid = 'pg_class'::regclass) AS r;
END
$fn$;

-- The sql_drop half: a dropped partition's rows cannot be read any more, so its views refresh
-- completely (DETACH it first, then DROP it, to keep them fast).
CREATE OR REPLACE FUNCTION mvlog.capture_partition_drop() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    gone record;
BEGIN
    IF to_regclass('mvlog.log_partitions') IS NULL THEN  -- mvlog's own schema is being dropped
        RETURN;
    END IF;
    FOR gone IN
        SELECT DISTINCT l.log_name
        FROM pg_event_trigger_dropped_objects() AS d
        JOIN mvlog.log_partitions AS p ON p.partition_oid = d.objid
        JOIN mvlog.logs AS l ON l.table_oid = p.table_oid
        WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND to_regclass(format('mvlog.%I', l.log_name)) IS NOT NULL
    LOOP
        EXECUTE format('INSERT INTO mvlog.%I ("dmltype$$", "old_new$$") VALUES (''P'', ''O'')', gone.log_name);
    END LOOP;
    DELETE FROM mvlog.log_partitions
    WHERE partition_oid IN (SELECT d.objid FROM pg_event_trigger_dropped_objects() AS d
                            WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0);
END
$fn$;

REVOKE ALL ON FUNCTION mvlog.cover_partitions(oid, text), mvlog.capture_partitions(),
                       mvlog.capture_partition_drop() FROM PUBLIC;

INSERT INTO mvlog.schema_version (version) VALUES (4) ON CONFLICT DO NOTHING;
