-- mvlog catalog, version 8: what each `mvlog verify` found, so that a dashboard can show every
-- view's last verify result (src/mvlog/postgres/catalog/verify_results.py).
-- One row per view verified: the fields of `mvlog verify --json` (docs/json.md); mismatches holds
-- the mismatched keys the result describes (at most 20), as that JSON gives them. snaptime is the
-- stamp of the view's last refresh that verify compared against; seconds, the time verify took.
-- id is an identity, not a bigserial: inserting needs no right on its sequence, so a refresh role
-- set up (sql/roles.sql) before this version can record with the rights the default privileges
-- gave it on the new table — when the role that upgrades the catalog is the one that set them up.
-- Where it is not, verify still answers and says the result was not recorded.

CREATE TABLE IF NOT EXISTS mvlog.verify_history (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    view_name     text        NOT NULL,
    verified_at   timestamptz NOT NULL DEFAULT now(),
    mode          text        NOT NULL CHECK (mode IN ('full', 'sample')),
    status        text        NOT NULL CHECK (status IN ('ok', 'mismatch', 'repaired', 'pending', 'failed')),
    rows_compared bigint      NOT NULL,
    pending_keys  bigint      NOT NULL,
    mismatched    bigint      NOT NULL,
    repaired      bigint      NOT NULL,
    delta_version bigint,                           -- the Delta version compared
    snaptime      timestamptz,                      -- the view's stamp S it was compared at
    reason        text,                             -- why the view was pending, or the error
    seconds       float8,
    mismatches    jsonb       NOT NULL DEFAULT '[]'
);
CREATE INDEX IF NOT EXISTS verify_history_view_idx ON mvlog.verify_history (view_name, id);

INSERT INTO mvlog.schema_version (version) VALUES (8) ON CONFLICT DO NOTHING;
