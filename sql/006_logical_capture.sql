-- mvlog catalog, version 5: capture by logical decoding (capture: logical).
--
-- A log is filled either by its table's triggers (capture 'trigger', log.sql) or by mvlog's capture
-- step, which decodes the database's replication slot (pgoutput, publication mvlog) and writes
-- the same rows into the same log table, each tagged with its source transaction ("xid$$") and
-- that transaction's commit position ("lsn$$"). A refresh stamps a logically captured row only
-- when its source transaction is visible in the refresh's snapshot (docs/design-notes.md,
-- "Capture by logical decoding").

-- trigger: the triggers write the log; logical: the capture step does; handover: the triggers
-- do, but the capture may still write rows of transactions that committed while the log was
-- logical (until the capture has passed switched_lsn and those rows can be stamped as trigger rows).
ALTER TABLE mvlog.logs ADD COLUMN IF NOT EXISTS capture text NOT NULL DEFAULT 'trigger';
ALTER TABLE mvlog.logs ADD COLUMN IF NOT EXISTS switched_lsn pg_lsn;  -- where the last switch committed
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_constraint WHERE conname = 'logs_capture_check'
                   AND conrelid = 'mvlog.logs'::regclass) THEN
        ALTER TABLE mvlog.logs ADD CONSTRAINT logs_capture_check CHECK (capture IN ('trigger', 'logical', 'handover'));
    END IF;
END
$$;

-- The capture of this database: its slot, and how far its rows are written. written_lsn is set
-- in the transaction that writes the last rows of a pass: every transaction that committed
-- before it has its keys in the logs.
CREATE TABLE IF NOT EXISTS mvlog.capture_state (
    slot_name   text        PRIMARY KEY,
    publication text        NOT NULL,
    written_lsn pg_lsn      NOT NULL,
    written_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    keys_written bigint     NOT NULL DEFAULT 0,   -- log rows written by captures since the slot was made
    replaced_at timestamptz,                      -- when a lost slot was last replaced: changes before were lost
    created_at  timestamptz NOT NULL DEFAULT now()
);

INSERT INTO mvlog.schema_version (version) VALUES (5) ON CONFLICT DO NOTHING;
