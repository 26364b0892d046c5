-- Event triggers for DDL capture (functions in 002_ddl_capture.sql).
-- Creating event triggers needs a superuser: `mvlog apply` installs this file only when it
-- runs as one, and says so otherwise (views still detect changed columns and keys themselves).

DROP EVENT TRIGGER IF EXISTS mvlog_capture_ddl;
CREATE EVENT TRIGGER mvlog_capture_ddl ON ddl_command_end
    WHEN TAG IN ('ALTER TABLE', 'CREATE INDEX', 'DROP INDEX', 'CREATE TRIGGER', 'DROP TRIGGER', 'COMMENT')
    EXECUTE FUNCTION mvlog.capture_ddl();
DROP EVENT TRIGGER IF EXISTS mvlog_capture_drop;
CREATE EVENT TRIGGER mvlog_capture_drop ON sql_drop EXECUTE FUNCTION mvlog.capture_drop();


-- Partitioned tables (functions in 005_partitions.sql): a partition created, attached, detached or
-- dropped under a logged table keeps the log covering exactly the table's partitions.
DROP EVENT TRIGGER IF EXISTS mvlog_cover_partitions;
CREATE EVENT TRIGGER mvlog_cover_partitions ON ddl_command_end
    WHEN TAG IN ('CREATE TABLE', 'ALTER TABLE')
    EXECUTE FUNCTION mvlog.capture_partitions();
DROP EVENT TRIGGER IF EXISTS mvlog_partition_drop;
CREATE EVENT TRIGGER mvlog_partition_drop ON sql_drop EXECUTE FUNCTION mvlog.capture_partition_drop();
