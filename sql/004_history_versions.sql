-- mvlog catalog, version 3: the Delta version each refresh left the view at, and its lag.
-- A refresh records the version of its commit; one that had nothing to write records the version
-- it left in place. `mvlog history` shows it, and reading a view "as of" a source time picks the
-- version of the newest refresh whose stamp is at or before that time.
-- oldest_change: when the oldest transaction the refresh applied started; finished_at minus it is
-- how stale the view had become by the time the refresh made that change visible (its lag).

ALTER TABLE mvlog.refresh_history ADD COLUMN IF NOT EXISTS delta_version bigint;
ALTER TABLE mvlog.refresh_history ADD COLUMN IF NOT EXISTS oldest_change timestamptz;
CREATE INDEX IF NOT EXISTS refresh_history_stamp_idx ON mvlog.refresh_history (view_name, snaptime)
    WHERE status = 'succeeded';

INSERT INTO mvlog.schema_version (version) VALUES (3) ON CONFLICT DO NOTHING;
