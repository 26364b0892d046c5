-- The one trigger of a log captured by logical decoding (capture: logical), rendered like
-- log_triggers.sql. PostgreSQL does not publish a TRUNCATE aimed at a partition when the
-- publication publishes through the partition root (CREATE PUBLICATION,
-- publish_via_partition_root), so a statement trigger on TRUNCATE — on the table here, on every
-- partition by mvlog.cover_partitions — writes the 'T' row in the TRUNCATE's own transaction.
-- It fires on TRUNCATE only: writers' INSERT, UPDATE, DELETE, COPY and MERGE pay nothing.

CREATE OR REPLACE FUNCTION {fn_truncate}() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS {body_truncate};

REVOKE ALL ON FUNCTION {fn_truncate}() FROM PUBLIC;

DROP TRIGGER IF EXISTS "mvlog$truncate" ON {table};

CREATE TRIGGER "mvlog$truncate" AFTER TRUNCATE ON {table}
    FOR EACH STATEMENT EXECUTE FUNCTION {fn_truncate}();
