-- mvlog catalog, version 7: what each refresh's window held, so that `refresh: force` can predict
-- what its next refresh will cost either way (src/mvlog/cost.py). window_keys: the distinct keys the
-- window of a fast refresh of a force view changed, over its tables (NULL when not counted). The
-- seconds are finished_at - started_at; the rows a complete refresh left are rows_inserted.

ALTER TABLE mvlog.refresh_history ADD COLUMN IF NOT EXISTS window_keys bigint;

INSERT INTO mvlog.schema_version (version) VALUES (7) ON CONFLICT DO NOTHING;
