"""The registry of views, and the one module that names its tables in SQL: the views and the
logs each reads (registering views, the typed state a refresh starts from and records, status
rows, the purge horizon), the DDL recorded on their tables, the views found unchanged before
Spark starts, and the schema itself (installing or upgrading ``sql/NNN_*.sql``, refusing one
older than this mvlog); with the advisory locks that keep two refreshes of one view apart.

:class:`Catalog` is the package's face: this registry, with the schema (:class:`CatalogSchema`)
and the refresh history (:class:`~mvlog.postgres.catalog.history.RefreshHistory`, the one module
naming its table) as its parts; and the verify results (:mod:`~mvlog.postgres.catalog.verify_results`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from psycopg2 import sql

from mvlog.errors import UsageError
from mvlog.model import FleetCost, LogInfo, RefreshMethod
from mvlog.postgres.catalog import log_registry, verify_results
from mvlog.postgres.catalog.history import RefreshHistory
from mvlog.postgres.catalog.rows import HistoryRow, LogStatusRow, ViewRegistration, ViewState, ViewStatusRow
from mvlog.postgres.locks import take_view_locks_for_transaction, view_locks
from mvlog.postgres.source import Cursor, Source, fetch_row, log_identifier, read_sql
from mvlog.sql.generate.keymap import drop_table_sql
from mvlog.sql.strategies.registry import state_names

UNCHANGED_REASON = "nothing changed since the last refresh"  # a refresh that applied nothing and started no Spark

SCHEMA_VERSION = 9  # the newest sql/NNN_*.sql catalog version (010: each refresh's phases)


def state_tables(cur: Cursor, views: Sequence[str], sized: bool = False) -> dict[str, dict[str, int]]:
    """Per view, its state tables in schema mvlog (those :func:`state_names` names, and their
    ``_b<i>``/``_p<i>`` tables), each with its bytes if ``sized`` (else 0)."""
    names = {view: state_names(view) for view in views}
    patterns = [n.replace("\\", "\\\\").replace("_", r"\_").replace("%", r"\%") + r"\_%" for found in names.values()
                for n in found]
    cur.execute(sql.SQL("SELECT c.relname, {} FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE n.nspname = 'mvlog' AND c.relkind = 'r' AND (c.relname = ANY(%s) OR c.relname "
                        "LIKE ANY(%s)) ORDER BY c.relname").format(
        sql.SQL("pg_total_relation_size(c.oid)" if sized else "0")),
        ([n for found in names.values() for n in found], patterns))
    tables: dict[str, dict[str, int]] = {view: {} for view in views}
    for table, size in cur.fetchall():
        for view, found in names.items():
            if any(table == n or table.startswith(n + "_") for n in found):
                tables[view][table] = int(size or 0)
                break
    return tables


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
        cur.execute(read_sql("008_refresh_costs.sql"))
        cur.execute(read_sql("009_verify_results.sql"))
        cur.execute(read_sql("010_refresh_phases.sql"))
        cur.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        if fetch_row(cur)[0]:
            cur.execute(read_sql("003_event_triggers.sql"))
            return True
        cur.execute("SELECT count(*) = 4 FROM pg_event_trigger WHERE evtname IN "
                    "('mvlog_capture_ddl', 'mvlog_capture_drop', 'mvlog_cover_partitions', 'mvlog_partition_drop')")
        return bool(fetch_row(cur)[0])


class Catalog(CatalogSchema, RefreshHistory):
    """The ``mvlog`` schema of one database."""

    def __init__(self, source: Source):
        self.source = source

    # -- registering views ------------------------------------------------------------------

    def definition_hashes(self, cur: Cursor) -> dict[str, str]:
        """Registered views and the hash of the query each was registered with."""
        cur.execute("SELECT name, definition_hash FROM mvlog.views")
        return dict(cur.fetchall())

    def register(self, cur: Cursor, view: ViewRegistration) -> None:
        """Register (or update) a view and the logs it reads. A changed query needs a complete refresh."""
        cur.execute(
            """
            INSERT INTO mvlog.views (name, query, definition_hash, location, refresh_method, view_class,
                                     fast_reason, refresh_group, volatile, needs_complete)
            VALUES (%(name)s, %(query)s, %(hash)s, %(location)s, %(method)s, %(class)s, %(reason)s, %(group)s,
                    %(volatile)s, 'the view is new')
            ON CONFLICT (name) DO UPDATE SET
                query = excluded.query, definition_hash = excluded.definition_hash, location = excluded.location,
                refresh_method = excluded.refresh_method, view_class = excluded.view_class,
                fast_reason = excluded.fast_reason, refresh_group = excluded.refresh_group,
                volatile = excluded.volatile,
                needs_complete = CASE WHEN mvlog.views.definition_hash <> excluded.definition_hash
                                      THEN 'the query changed' ELSE mvlog.views.needs_complete END,
                updated_at = CASE WHEN mvlog.views.definition_hash <> excluded.definition_hash
                                       OR mvlog.views.refresh_method <> excluded.refresh_method
                                       OR mvlog.views.refresh_group IS DISTINCT FROM excluded.refresh_group
                                  THEN now() ELSE mvlog.views.updated_at END
            """,
            {
                "name": view.name, "query": view.query, "hash": view.definition_hash, "location": view.location,
                "method": view.refresh.value, "class": view.view_class, "reason": view.fast_reason,
                "group": view.group, "volatile": view.volatile,
            },
        )
        cur.execute("DELETE FROM mvlog.view_logs WHERE view_name = %s", (view.name,))
        for log in view.logs:
            cur.execute(
                "INSERT INTO mvlog.view_logs (view_name, table_schema, table_name) VALUES (%s, %s, %s)",
                (view.name, log.table_schema, log.table_name),
            )

    def drop_keymap(self, cur: Cursor, view: str, keep: Collection[str] = ()) -> None:
        """Drop a view's state: every table a strategy keeps for it
        (:func:`~mvlog.sql.strategies.registry.state_names`), its branches' and pieces' too
        (``<name>_b<i>``, ``<name>_p<i>``): their columns may no longer fit, or the view is gone.
        Tables named in ``keep`` stay (a refresh role may refill them, not drop and make them)."""
        for table in state_tables(cur, [view])[view]:
            if table not in keep:
                cur.execute(drop_table_sql(table))

    def state_sizes(self, names: Sequence[str]) -> dict[str, tuple[int, int]]:
        """Per view, how many tables of state mvlog keeps for it in PostgreSQL and their bytes (key
        maps, group tables, a composed view's pieces' rows and keys, a top-N view's first rows …),
        in one round trip."""
        with self.source.transaction() as cur:
            tables = state_tables(cur, names, sized=True)
        return {name: (len(found), sum(found.values())) for name, found in tables.items()}

    def unregister(self, cur: Cursor, name: str) -> str | None:
        """Forget a view (it stops pinning its logs) and drop its key map; returns its location,
        or None if no such view is registered."""
        cur.execute("DELETE FROM mvlog.views WHERE name = %s RETURNING location", (name,))
        row = cur.fetchone()
        if row is not None:
            self.drop_keymap(cur, name)
        return row[0] if row else None

    def dependents(self, cur: Cursor, log: LogInfo) -> list[str]:
        """The registered views that read ``log``, by name."""
        cur.execute("SELECT view_name FROM mvlog.view_logs WHERE table_schema = %s AND table_name = %s "
                    "ORDER BY view_name", (log.table_schema, log.table_name))
        return [r[0] for r in cur.fetchall()]

    def mark_needs_complete(self, cur: Cursor, log: LogInfo, reason: str) -> None:
        """Every view reading ``log`` needs a complete refresh next, for ``reason``."""
        mark_readers_needs_complete(cur, reason, sql.SQL("l.log_name = %s"), (log.log_name,))

    # -- a view's state ---------------------------------------------------------------------------

    def view_state(self, name: str) -> ViewState:
        rows = self.source.query(
            "SELECT last_snaptime, needs_complete, row_count, definition_hash, output_signature, last_refresh_at, "
            "clock_timestamp() FROM mvlog.views WHERE name = %s", (name,)
        )
        if not rows:
            raise UsageError(f"view {name} is not registered yet; run 'mvlog apply' first")
        return ViewState(*rows[0])

    def recorded_stamp(self, cur: Cursor, name: str) -> tuple[datetime | None, str | None] | None:
        """The view's last stamp and why it needs a complete refresh (None: not one), as ``cur``'s
        transaction sees them (verify reads them in its exported snapshot); None if not registered."""
        cur.execute("SELECT last_snaptime, needs_complete FROM mvlog.views WHERE name = %s", (name,))
        row = cur.fetchone()
        return None if row is None else (row[0], row[1])

    def unbuilt_views(self) -> set[str]:
        """Views never refreshed, or marked for a complete refresh."""
        rows = self.source.query("SELECT name FROM mvlog.views "
                                 "WHERE last_snaptime IS NULL OR needs_complete IS NOT NULL")
        return {name for (name,) in rows}

    def locations(self) -> dict[str, tuple[str, bool]]:
        """Registered views: (location, whether it was ever built there); none before install."""
        if not self.is_installed():
            return {}
        rows = self.source.query("SELECT name, location, last_snaptime IS NOT NULL FROM mvlog.views")
        return {name: (location, built) for name, location, built in rows}

    def is_registered(self, name: str) -> bool:
        return bool(self.source.query("SELECT 1 FROM mvlog.views WHERE name = %s", (name,)))

    def record_refresh(self, cur: Cursor, name: str, stamp: datetime, method: RefreshMethod, row_count: int,
                       signature: str | None, checked_at: datetime | None = None) -> None:
        """last_V = S, and what the refresh left (``signature``: the columns of a complete refresh;
        ``checked_at``: when the refresh began checking the view against the database)."""
        cur.execute(
            """
            UPDATE mvlog.views SET last_snaptime = %s, last_refresh_at = clock_timestamp(), last_method = %s,
                   needs_complete = NULL, row_count = %s, output_signature = coalesce(%s, output_signature),
                   checked_at = %s
            WHERE name = %s
            """,
            (stamp, method.value, row_count, signature, checked_at, name),
        )

    def unchanged_views(self, names: Sequence[str]) -> dict[str, str]:
        """Of the registered views ``names``, those a refresh now would have nothing to apply to,
        each with the definition hash it was registered with: one round trip
        (``mvlog.unchanged_views``, ``sql/007_unchanged.sql``)."""
        rows = self.source.query("SELECT view_name, definition_hash, unchanged FROM mvlog.unchanged_views(%s)",
                                 (list(names),))
        return {name: digest for name, digest, unchanged in rows if unchanged}

    def record_unchanged(self, units: Sequence[Sequence[str]]) -> dict[str, tuple[datetime, int | None]]:
        """Record views found unchanged as refreshed: a succeeded history row (method ``fresh``, 0
        keys, the stamp they still reflect and the Delta version that still holds them) and their
        last refresh time; their stamp stays, so nothing committed since can be skipped. A unit
        (views refreshed together) another process is refreshing is left out: its refresh records
        it. Returns each recorded view's stamp and row count."""
        with self.source.transaction() as cur:
            names = [name for unit in units if take_view_locks_for_transaction(cur, unit) for name in unit]
            cur.execute("UPDATE mvlog.views SET last_refresh_at = clock_timestamp() "
                        "WHERE name = ANY(%s) AND last_snaptime IS NOT NULL "
                        "RETURNING name, last_snaptime, row_count", (names,))
            rows = cur.fetchall()
            self.record_fresh(cur, [(name, stamp) for name, stamp, _ in rows], UNCHANGED_REASON)
        return {name: (stamp, row_count) for name, stamp, row_count in rows}

    def ddl_since(self, table_oids: Sequence[int], after: datetime | None) -> list[tuple]:
        """DDL recorded on these tables after ``after``: (time, command tag, object identity)."""
        return self.source.query(
            "SELECT logged_at, command_tag, object_identity FROM mvlog.ddl_log "
            "WHERE table_oid = ANY(%s) AND (%s::timestamptz IS NULL OR logged_at > %s) ORDER BY id",
            (list(table_oids), after, after),
        )

    def lock_views(self, names: Sequence[str], wait: float = 0.0) -> contextlib.AbstractContextManager[None]:
        """Session advisory locks that keep two refreshes of one view from running at once: all of
        ``names`` or none (see :func:`mvlog.postgres.locks.view_locks`)."""
        return view_locks(self.source, names, wait)

    def purge_horizon(self, cur: Cursor, log: LogInfo) -> datetime | None:
        """The stamp up to which every view reading ``log`` has consumed it (None: some view has
        never refreshed, so nothing may go). A log nobody reads may go up to its last stamp."""
        cur.execute(
            """
            SELECT bool_and(v.last_snaptime IS NOT NULL), min(v.last_snaptime), count(*)
            FROM mvlog.view_logs vl JOIN mvlog.views v ON v.name = vl.view_name
            WHERE vl.table_schema = %s AND vl.table_name = %s
            """,
            (log.table_schema, log.table_name),
        )
        all_refreshed, horizon, dependents = fetch_row(cur)
        if dependents == 0:  # the log may have been dropped since it was listed: then nothing to purge
            return log_registry.last_stamp(cur, log.log_name)
        return horizon if all_refreshed else None

    # -- history ----------------------------------------------------------------------------------

    def fleet_costs(self, name: str) -> list[FleetCost]:
        """What every registered view but ``name`` costs to refresh (:meth:`RefreshHistory.costs_of`)."""
        return list(self.costs_of(sql.SQL("SELECT name, view_class FROM mvlog.views WHERE name <> %(name)s"),
                                  {"name": name}).values())

    def view_costs(self, names: Sequence[str]) -> dict[str, FleetCost]:
        """What each of the named registered views costs to refresh, by name (:meth:`RefreshHistory.costs_of`)."""
        return self.costs_of(sql.SQL("SELECT name, view_class FROM mvlog.views WHERE name = ANY(%(names)s)"),
                             {"names": list(names)})

    def history(self, name: str, limit: int = 20) -> list[HistoryRow]:
        """The most recent refreshes of a view, newest first."""
        if not self.is_registered(name):
            raise UsageError(f"view {name} is not registered; run 'mvlog apply' first")
        return self.recent_refreshes(name, limit)

    # -- verify results ---------------------------------------------------------------------------

    def record_verify(self, result: dict[str, Any]) -> None:
        """Record a view's verify result (``VerifyResult.to_json()``), verified now."""
        with self.source.transaction() as cur:
            verify_results.record(cur, result)

    def last_verify(self, names: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The newest verify result of each of ``names`` verified at least once (its JSON and
        ``verified_at``), by view name."""
        return verify_results.last_results(self.source, names)

    # -- status -----------------------------------------------------------------------------------

    def view_status_rows(self) -> list[ViewStatusRow]:
        rows = self.source.query(
            """
            SELECT v.name, v.location, v.refresh_method, v.view_class, v.fast_reason, v.last_refresh_at,
                   v.last_method, v.last_snaptime, v.needs_complete, v.row_count, v.refresh_group,
                   coalesce(array_agg(vl.table_schema || '.' || vl.table_name)
                            FILTER (WHERE vl.view_name IS NOT NULL), '{}')
            FROM mvlog.views v LEFT JOIN mvlog.view_logs vl ON vl.view_name = v.name
            GROUP BY v.name ORDER BY v.name
            """
        )
        return [ViewStatusRow(*row[:-1] + (tuple(row[-1]),)) for row in rows]

    def log_status(self, log: LogInfo) -> LogStatusRow:
        rows, size, oldest, pinned_by = self.source.query(
            sql.SQL(
                """
                SELECT (SELECT count(*) FROM {log}), pg_total_relation_size(%(reg)s),
                       (SELECT min("xact_time$$") FROM {log} l WHERE "snaptime$$" > coalesce(
                           (SELECT min(v.last_snaptime) FROM mvlog.view_logs vl
                            JOIN mvlog.views v ON v.name = vl.view_name
                            WHERE vl.table_schema = %(schema)s AND vl.table_name = %(table)s), '-infinity')),
                       (SELECT array_agg(v.name ORDER BY v.name) FROM mvlog.view_logs vl JOIN mvlog.views v
                          ON v.name = vl.view_name WHERE vl.table_schema = %(schema)s AND vl.table_name = %(table)s
                          AND v.last_snaptime IS NULL)
                """
            ).format(log=log_identifier(log)),
            {"reg": log_identifier(log).as_string(self.source.conn), "schema": log.table_schema,
             "table": log.table_name},
        )[0]
        return LogStatusRow(rows, size, oldest, tuple(pinned_by or ()))


def mark_readers_needs_complete(cur: Cursor, reason: str, logs: sql.Composable, params: tuple = ()) -> None:
    """Every view reading a log that ``logs`` picks needs a complete refresh next, for ``reason``:
    ``logs`` is a condition on the logs' registry rows (as ``l``, see
    :func:`.log_registry.tables_where`) with ``params`` (:data:`mvlog.postgres.capture.DECODED_LOGS`:
    the logs logical decoding fills)."""
    cur.execute(sql.SQL("UPDATE mvlog.views SET needs_complete = %s WHERE name IN (SELECT v.view_name "
                        "FROM mvlog.view_logs AS v WHERE (v.table_schema, v.table_name) IN ({}))").format(
                            log_registry.tables_where(logs)), (reason, *params))
