-- mvlog catalog, version 9: where each refresh's seconds went, by phase (prepare, table, read,
-- read_whole, write, reread, record: `mvlog refresh --json`'s "phases", docs/json.md), so that a
-- fast refresh can choose between reading its changed keys' rows and reading its view's whole
-- query by what each cost (src/mvlog/pipeline/readscope.py). NULL for refreshes before this version.

ALTER TABLE mvlog.refresh_history ADD COLUMN IF NOT EXISTS phases jsonb;

INSERT INTO mvlog.schema_version (version) VALUES (9) ON CONFLICT DO NOTHING;
