-- mvlog catalog, version 1.
-- Installed by `mvlog apply` in one transaction; every statement is idempotent.

CREATE SCHEMA IF NOT EXISTS mvlog;
REVOKE ALL ON SCHEMA mvlog FROM PUBLIC;

CREATE TABLE IF NOT EXISTS mvlog.schema_version (
    version      integer PRIMARY KEY,
    installed_at timestamptz NOT NULL DEFAULT now()
);

-- One row per materialized view log (CREATE MATERIALIZED VIEW LOG ON table WITH PRIMARY KEY).
CREATE TABLE IF NOT EXISTS mvlog.logs (
    table_schema text        NOT NULL,
    table_name   text        NOT NULL,
    table_oid    oid         NOT NULL,
    log_name     text        NOT NULL UNIQUE,      -- table in schema mvlog
    key_columns  text[]      NOT NULL,
    key_types    text[]      NOT NULL,
    last_stamp   timestamptz,                       -- the newest snaptime$$ a refresh stamped
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (table_schema, table_name)
);

-- One row per registered materialized view (a Delta table in the warehouse).
CREATE TABLE IF NOT EXISTS mvlog.views (
    name            text        PRIMARY KEY,
    query           text        NOT NULL,
    definition_hash text        NOT NULL,
    location        text        NOT NULL,
    refresh_method  text        NOT NULL CHECK (refresh_method IN ('fast', 'complete', 'force')),
    view_class      text        NOT NULL,
    fast_reason     text,                           -- why fast refresh is impossible, if it is
    refresh_group   text,
    last_snaptime   timestamptz,                    -- last_V: the stamp S its last refresh consumed up to
    last_refresh_at timestamptz,
    last_method     text,
    needs_complete  text,                           -- why the next refresh must be complete, if it must
    row_count       bigint,                         -- rows in the Delta table after the last refresh
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- Which logs each view consumes. A log cannot be dropped while a view depends on it.
CREATE TABLE IF NOT EXISTS mvlog.view_logs (
    view_name    text NOT NULL REFERENCES mvlog.views (name) ON DELETE CASCADE,
    table_schema text NOT NULL,
    table_name   text NOT NULL,
    PRIMARY KEY (view_name, table_schema, table_name),
    FOREIGN KEY (table_schema, table_name) REFERENCES mvlog.logs (table_schema, table_name)
);

-- Every refresh, successful or not.
CREATE TABLE IF NOT EXISTS mvlog.refresh_history (
    id            bigserial   PRIMARY KEY,
    view_name     text        NOT NULL,
    started_at    timestamptz NOT NULL,
    finished_at   timestamptz,
    method        text,                             -- fast | complete
    reason        text,                             -- why this method
    snaptime      timestamptz,                      -- S
    keys_read     bigint,
    rows_inserted bigint,
    rows_updated  bigint,
    rows_deleted  bigint,
    status        text        NOT NULL CHECK (status IN ('running', 'succeeded', 'failed')),
    error         text
);
CREATE INDEX IF NOT EXISTS refresh_history_view_idx ON mvlog.refresh_history (view_name, started_at DESC);

INSERT INTO mvlog.schema_version (version) VALUES (1) ON CONFLICT DO NOTHING;
