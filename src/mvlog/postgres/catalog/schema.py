"""The ``mvlog`` schema itself: installing or upgrading it (``sql/NNN_*.sql``), and refusing to
work on one that is missing or older than this mvlog (``mvlog.schema_version``).

Part of :class:`~mvlog.postgres.catalog.Catalog`.
"""

from __future__ import annotations

from mvlog.errors import UsageError
from mvlog.postgres.source import Cursor, Source, fetch_row, read_sql

SCHEMA_VERSION = 6  # the newest sql/NNN_*.sql catalog version (007: views found unchanged before Spark)


class CatalogSchema:
    """The installed catalog of one database: whether it is there, its version, its DDL."""

    source: Source

    def is_installed(self) -> bool:
        return bool(self.source.query("SELECT to_regclass('mvlog.views') IS NOT NULL")[0][0])

    def check(self) -> None:
        """Refuse to work on a catalog that is missing or older than this mvlog."""
        if not self.is_installed():
            raise UsageError("mvlog is not installed in this database yet; run 'mvlog apply' first")
        version = self.source.query("SELECT max(version) FROM mvlog.schema_version")[0][0] or 0
        if version < SCHEMA_VERSION:
            raise UsageError(f"the mvlog catalog in this database is version {version}, this mvlog needs "
                             f"{SCHEMA_VERSION}; run 'mvlog apply' to upgrade it")

    def install(self, cur: Cursor) -> bool:
        """Create or upgrade the mvlog schema (inside the caller's transaction).

        Returns whether DDL capture (event triggers, superuser only) is installed.
        """
        cur.execute(read_sql("001_schema.sql"))
        cur.execute(read_sql("002_ddl_capture.sql"))
        cur.execute(read_sql("004_history_versions.sql"))
        cur.execute(read_sql("005_partitions.sql"))
        cur.execute(read_sql("006_logical_capture.sql"))
        cur.execute(read_sql("007_unchanged.sql"))
        cur.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        if fetch_row(cur)[0]:
            cur.execute(read_sql("003_event_triggers.sql"))
            return True
        cur.execute("SELECT count(*) = 4 FROM pg_event_trigger WHERE evtname IN "
                    "('mvlog_capture_ddl', 'mvlog_capture_drop', 'mvlog_cover_partitions', 'mvlog_partition_drop')")
        return bool(fetch_row(cur)[0])
