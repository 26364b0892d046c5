"""The materialized view logs: their DDL and registry rows, stamping, windows and purging.

A log is a table ``mvlog.mlog$_<table>_<oid>`` filled by triggers on its base table
(``sql/log.sql``) and a row in ``mvlog.logs``. Which views consume a log, and so how
far it may be purged, is the catalog's business (:mod:`mvlog.postgres.catalog`).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

import psycopg2
import psycopg2.extensions
from psycopg2 import sql

from mvlog.errors import ConfigError
from mvlog.model import MVLOG_SCHEMA, SENTINEL, LogInfo, TableInfo, WindowSize, checked_snapshot_id, log_name_for
from mvlog.postgres.source import ESTIMATED_ROWS, Cursor, Source, fetch_row, log_identifier, read_sql, table_identifier
from mvlog.sql.changes import changed_key_count_sql

LOCK_NAMESPACE = 0x6D766C67  # "mvlg": first key of the advisory locks that serialize stamping a log
# The SET clause of every log trigger function (sql/log.sql).
TRIGGER_FUNCTION_CONFIG = ("search_path=pg_catalog, pg_temp",)
EVENTS = ("insert", "update", "delete", "truncate")


def trigger_bodies() -> dict[str, str]:
    """The sections of ``log_trigger_bodies.sql`` by name."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in read_sql("log_trigger_bodies.sql").splitlines():
        match = re.match(r"^-- @(\w+)\s*$", line)
        if match:
            current = sections.setdefault(match.group(1), [])
        elif current is not None and not line.startswith("--"):
            current.append(line)
    return {name: "\n".join(lines).strip() + "\n" for name, lines in sections.items()}


class Logs:
    """The materialized view logs of one database."""

    def __init__(self, source: Source):
        self.source = source

    def registered(self) -> dict[str, LogInfo]:
        """Registered logs by qualified table name."""
        rows = self.source.query(
            "SELECT table_schema, table_name, log_name, key_columns, key_types, table_oid FROM mvlog.logs"
        )
        return {f"{r[0]}.{r[1]}": LogInfo(r[0], r[1], r[2], tuple(r[3]), tuple(r[4]), int(r[5])) for r in rows}

    # -- DDL ----------------------------------------------------------------------------------

    def ensure(self, cur: Cursor, table: TableInfo) -> tuple[LogInfo, str]:
        """CREATE MATERIALIZED VIEW LOG ON table WITH PRIMARY KEY (idempotent).

        Returns the log and what happened: ``"unchanged"`` when the log, its four triggers
        and their functions already exist exactly as this version of mvlog renders them;
        ``"created"`` when its DDL ran (new, or made by an older mvlog); ``"rekeyed"`` when
        the table's primary key changed, so the old log's rows were dropped (its views need
        a complete refresh).
        """
        if not table.key:
            raise ConfigError(f"table {table.qualified} has no primary key, so it cannot have a materialized view log")
        refusal = self.source.log_refusal(cur, table)
        if refusal:
            raise ConfigError(refusal)
        cur.execute(
            "SELECT log_name, key_columns, key_types FROM mvlog.logs WHERE table_schema = %s AND table_name = %s",
            (table.schema, table.name),
        )
        row = cur.fetchone()
        log = LogInfo.for_table(table, row[0] if row else log_name_for(table))
        outcome = "created"
        if row and (tuple(row[1]), tuple(row[2])) != (log.key_columns, log.key_types):
            # The primary key changed: the old log's rows name keys of another shape.
            cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(log_identifier(log)))
            outcome = "rekeyed"
        elif row and self._ddl_current(cur, table, log):
            return log, "unchanged" if not self._cover_partitions(cur, table, "drifted") else "created"
        cur.execute(self._ddl(cur, table, log))
        cur.execute(
            """
            INSERT INTO mvlog.logs (table_schema, table_name, table_oid, log_name, key_columns, key_types)
            VALUES (%s, %s, %s, %s, %s, %s)
            ON CONFLICT (table_schema, table_name) DO UPDATE
            SET table_oid = excluded.table_oid, key_columns = excluded.key_columns, key_types = excluded.key_types
            """,
            (table.schema, table.name, table.oid, log.log_name, list(log.key_columns), list(log.key_types)),
        )
        # A new or rekeyed log's views refresh completely anyway; an existing log whose partitions
        # changed unwatched cannot tell what moved.
        self._cover_partitions(cur, table, "drifted" if row and outcome == "created" else "initial")
        return log, outcome

    @staticmethod
    def _cover_partitions(cur: Cursor, table: TableInfo, how: str) -> int:
        """Put the log's triggers on every partition of ``table`` (and off former ones); how many
        changed (``sql/005_partitions.sql``)."""
        cur.execute("SELECT mvlog.cover_partitions(%s, %s)", (table.oid, how))
        return fetch_row(cur)[0]

    def _ddl_current(self, cur: Cursor, table: TableInfo, log: LogInfo) -> bool:
        """The log table (without an index), its four triggers and their functions are as rendered now."""
        cur.execute(
            """
            SELECT (SELECT count(*) FROM pg_trigger t WHERE t.tgrelid = %(table)s AND t.tgname LIKE 'mvlog$%%') = 4
                   AND to_regclass(%(log)s) IS NOT NULL
                   AND NOT EXISTS (SELECT FROM pg_index i WHERE i.indrelid = to_regclass(%(log)s))
            """,
            {"table": table.oid, "log": log_identifier(log).as_string(cur)},
        )
        if not fetch_row(cur)[0]:
            return False
        expected = {f"{log.log_name}${name}": body for name, body in self._trigger_bodies(cur, table, log).items()}
        cur.execute(
            "SELECT proname, prosrc, proconfig FROM pg_proc "
            "WHERE pronamespace = 'mvlog'::regnamespace AND proname = ANY(%s)",
            (list(expected),),
        )
        found = {name: (source, config) for name, source, config in cur.fetchall()}
        return all(found.get(name) == (body, list(TRIGGER_FUNCTION_CONFIG)) for name, body in expected.items())

    def _trigger_bodies(self, cur: Cursor, table: TableInfo, log: LogInfo) -> dict[str, str]:
        """The rendered PL/pgSQL bodies of the log's trigger functions, by event."""

        def prefixed(alias: str) -> sql.Composed:
            return sql.SQL(", ").join(sql.Identifier(alias, c.name) for c in table.key)

        parts = {
            "log": log_identifier(log),
            "key_cols": sql.SQL(", ").join(sql.Identifier(c.name) for c in table.key),
            "new_keys": prefixed("n"),
            "old_keys": prefixed("o"),
            "old_first_key": sql.Identifier("o", table.key[0].name),
            "new_first_key": sql.Identifier("n", table.key[0].name),
            "either_keys": sql.SQL(", ").join(
                sql.SQL("coalesce({}, {})").format(sql.Identifier("n", c.name), sql.Identifier("o", c.name))
                for c in table.key
            ),
            "keys_equal": sql.SQL(" AND ").join(
                sql.SQL("{} = {}").format(sql.Identifier("n", c.name), sql.Identifier("o", c.name)) for c in table.key
            ),
        }
        return {
            name: sql.SQL(text).format(**{k: v for k, v in parts.items() if "{" + k + "}" in text}).as_string(cur)
            for name, text in trigger_bodies().items()
        }

    def _ddl(self, cur: Cursor, table: TableInfo, log: LogInfo) -> sql.Composed:
        bodies = self._trigger_bodies(cur, table, log)
        return sql.SQL(read_sql("log.sql")).format(
            table=table_identifier(table),
            log=log_identifier(log),
            log_index=sql.Identifier(MVLOG_SCHEMA, f"{log.log_name}$snaptime"),
            key_defs=sql.SQL(", ").join(
                sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(c.type)) for c in table.key
            ),
            **{f"fn_{name}": sql.Identifier(MVLOG_SCHEMA, f"{log.log_name}${name}") for name in bodies},
            **{f"body_{name}": sql.Literal(body) for name, body in bodies.items()},
        )

    def drop(self, cur: Cursor, log: LogInfo) -> None:
        """DROP MATERIALIZED VIEW LOG: triggers, trigger functions, log table and registry row."""
        table = sql.Identifier(log.table_schema, log.table_name)
        cur.execute("SELECT to_regclass(%s)::oid = %s", (table.as_string(cur), log.table_oid))
        if fetch_row(cur)[0]:
            for event in EVENTS:
                cur.execute(sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(sql.Identifier(f"mvlog${event}"), table))
        cur.execute("DELETE FROM mvlog.log_partitions AS p WHERE p.table_oid = %s RETURNING p.partition_oid",
                    (log.table_oid,))
        partitions = [oid for (oid,) in cur.fetchall()]
        cur.execute("SELECT n.nspname, c.relname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace "
                    "WHERE c.oid = ANY(%s::oid[])", (partitions,))
        for schema, name in cur.fetchall():
            for event in EVENTS:
                cur.execute(sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(
                    sql.Identifier(f"mvlog${event}"), sql.Identifier(schema, name)))
        for event in EVENTS:
            cur.execute(sql.SQL("DROP FUNCTION IF EXISTS {}()").format(
                sql.Identifier(MVLOG_SCHEMA, f"{log.log_name}${event}")))
        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(log_identifier(log)))
        cur.execute("DELETE FROM mvlog.logs WHERE log_name = %s", (log.log_name,))

    def coverage(self, log: LogInfo) -> tuple[list[str], str | None]:
        """The partitions the log of a partitioned table covers (qualified names; none for a plain
        table), and the first partition it should cover and does not, or covers and should not."""
        rows = self.source.query(
            "SELECT coalesce(format('%%I.%%I', n.nspname, c.relname), p.partition_name) "
            "FROM mvlog.log_partitions AS p LEFT JOIN pg_class AS c ON c.oid = p.partition_oid "
            "LEFT JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE p.table_oid = %s ORDER BY 1",
            (log.table_oid,))
        drift = self.source.query(UNCOVERED_PARTITION, {"root": log.table_oid})
        return [name for (name,) in rows], (f"partition {drift[0][0]} {drift[0][1]}" if drift else None)

    # -- stamping, windows, purging --------------------------------------------------------

    @contextlib.contextmanager
    def stamp(self, logs: Sequence[LogInfo]) -> Iterator[StampedSnapshot]:
        """Stamp every sentinel row of these logs with one new S, and hold the snapshot the stamp saw.

        The refresh reads everything at that snapshot, so it sees the base tables exactly as
        the stamped log rows describe them: a transaction that commits after the stamp took
        its snapshot is neither in the window nor in the base rows read (the next refresh
        takes both). Reading base tables at a later snapshot would apply such a transaction
        to some rows of a refresh group and not to others.

        Session advisory locks per log, taken in a fixed order *before* the snapshot and S are
        taken and released after the stamp commits, serialize stamping, so stamps become
        visible in increasing order of S and no stamp commits between a snapshot and its stamp.
        """
        source = self.source
        ordered = sorted(logs, key=lambda log: log.table_oid)
        names = [log.log_name for log in ordered]
        holder = source.connect()
        try:
            holder.set_session(isolation_level="REPEATABLE READ", readonly=True)
            stamper = source.connect()
            try:
                stamper.autocommit = True
                with stamper.cursor() as cur:
                    for log in ordered:
                        cur.execute("SELECT pg_advisory_lock(%s, %s)", (LOCK_NAMESPACE, log.table_oid & 0x7FFFFFFF))
                stamper.autocommit = False
                stamper.set_session(isolation_level="REPEATABLE READ")
                with stamper.cursor() as cur, holder.cursor() as held:
                    cur.execute("SELECT pg_export_snapshot()")  # the stamp's snapshot, taken under the locks
                    held.execute("SET TRANSACTION SNAPSHOT %s", (checked_snapshot_id(fetch_row(cur)[0]),))
                    held.execute("SELECT pg_export_snapshot()")  # outlives the stamp's transaction
                    snapshot = checked_snapshot_id(fetch_row(held)[0])
                    cur.execute(
                        "SELECT greatest(clock_timestamp(), max(last_stamp) + interval '1 microsecond') "
                        "FROM mvlog.logs WHERE log_name = ANY(%s)", (names,),
                    )
                    stamp = fetch_row(cur)[0]
                    for log in ordered:
                        cur.execute(
                            sql.SQL('UPDATE {} SET "snaptime$$" = %s WHERE "snaptime$$" = %s')
                            .format(log_identifier(log)),
                            (stamp, SENTINEL),
                        )
                    cur.execute("UPDATE mvlog.logs SET last_stamp = %s WHERE log_name = ANY(%s)", (stamp, names))
                stamper.commit()
            finally:
                stamper.close()  # releases the advisory locks
            # Fresh statistics: the planner must know the window holds few keys, or it prefers
            # hash joins over index probes and scans whole base tables (ANALYZE samples, so
            # even a large log costs little).
            with source.transaction() as cur:
                for log in ordered:
                    cur.execute("SELECT mvlog.analyze(%s::regclass)", (log_identifier(log).as_string(cur),))
            yield StampedSnapshot(stamp, snapshot, holder, source)
        except psycopg2.Error as exc:
            raise source.error(exc) from None
        finally:
            holder.close()

    def pending(self, logs: Sequence[LogInfo], after: datetime | None) -> Pending:
        """What a consumer at ``after`` has not applied of ``logs`` (rows stamped later, or not
        stamped yet): how many log rows, and when the oldest of their transactions started; one
        scan of each log."""
        if not logs:
            return Pending(0, None)
        rows, oldest = self.source.query(pending_sql(logs), {"after": after})[0]
        return Pending(int(rows or 0), oldest)

    def purge(self, logs: Sequence[LogInfo],
              horizon: Callable[[Cursor, LogInfo], datetime | None]) -> dict[str, int]:
        """Delete the log rows every consumer has consumed: those stamped up to ``horizon(cur, log)``
        (the catalog knows the consumers; None: keep every row). Returns rows deleted per table."""
        deleted: dict[str, int] = {}
        for log in logs:
            with self.source.transaction() as cur:
                until = horizon(cur, log)
                if until is None:
                    deleted[log.qualified_table] = 0
                    continue
                cur.execute(sql.SQL('DELETE FROM {} WHERE "snaptime$$" <= %s').format(log_identifier(log)), (until,))
                deleted[log.qualified_table] = cur.rowcount
        return deleted


def pending_sql(logs: Sequence[LogInfo]) -> sql.Composed:
    """How many log rows of ``logs`` are stamped after ``%(after)s`` (or not stamped yet), and the
    start time of the oldest of their transactions: a log row's ``xact_time$$`` is its writer's
    ``transaction_timestamp()``."""
    per_log = sql.SQL(" UNION ALL ").join(
        sql.SQL('SELECT count(*), min("xact_time$$") FROM {} '
                'WHERE %(after)s::timestamptz IS NULL OR "snaptime$$" > %(after)s').format(log_identifier(log))
        for log in logs)
    return sql.SQL("SELECT sum(n), min(m) FROM ({}) AS p(n, m)").format(per_log)


# A member of a logged table's partition tree (or inheritance tree) that its log does not cover, or
# a covered one that left the tree, at the current snapshot: pg_inherits read by a query sees the
# snapshot, where pg_partition_tree() would read the newest catalog.
UNCOVERED_PARTITION = """
WITH RECURSIVE tree(relid) AS (
    SELECT %(root)s::oid
    UNION ALL
    SELECT i.inhrelid FROM pg_inherits AS i JOIN tree AS t ON i.inhparent = t.relid
)
SELECT name, what FROM (
    SELECT (SELECT format('%%I.%%I', n.nspname, c.relname) FROM pg_class AS c
            JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE c.oid = t.relid), 'is not covered by its log'
    FROM tree AS t
    WHERE t.relid <> %(root)s
      AND (NOT EXISTS (SELECT FROM mvlog.log_partitions AS p WHERE p.partition_oid = t.relid)
           OR (SELECT count(*) FROM pg_trigger AS g
               WHERE g.tgrelid = t.relid
                 AND g.tgname IN ('mvlog$insert', 'mvlog$update', 'mvlog$delete', 'mvlog$truncate')) < 4)
    UNION ALL
    SELECT p.partition_name, 'is covered by its log but left the table'
    FROM mvlog.log_partitions AS p
    WHERE p.table_oid = %(root)s AND p.partition_oid NOT IN (SELECT t.relid FROM tree AS t)
) AS drift(name, what)
ORDER BY name
LIMIT 1
"""


@dataclass(frozen=True)
class Pending:
    """A consumer's unapplied changes in some logs: log rows, and the oldest one's transaction start."""

    rows: int
    oldest: datetime | None


@dataclass
class StampedSnapshot:
    """A refresh's stamp S and the exported snapshot it was taken in, held open until the refresh ends.

    At this snapshot the window of a consumer at ``after`` is simply ``snaptime$$ > after``
    (see sqlgen.changed_keys_sql).
    """

    time: datetime
    snapshot: str
    conn: psycopg2.extensions.connection
    source: Source

    def query(self, statement: sql.Composable | str, params: Sequence | dict | None = None) -> list[tuple]:
        """Run a read-only statement at the snapshot."""
        try:
            with self.conn.cursor() as cur:
                cur.execute(statement, params)
                return cur.fetchall() if cur.description else []
        except psycopg2.Error as exc:
            raise self.source.error(exc) from None

    def _window_has(self, log: LogInfo, after: datetime | None, condition: sql.Composable) -> bool:
        rows = self.query(
            sql.SQL('SELECT EXISTS (SELECT FROM {} WHERE ({}) AND (%s::timestamptz IS NULL OR "snaptime$$" > %s))')
            .format(log_identifier(log), condition),
            (after, after),
        )
        return bool(rows[0][0])

    def window_has_rows(self, log: LogInfo, after: datetime | None) -> bool:
        """Whether the log holds rows in this refresh's window for a consumer at ``after``."""
        return self._window_has(log, after, sql.SQL("true"))

    def replaced_since(self, log: LogInfo, after: datetime | None) -> str | None:
        """Why the table's rows changed in this refresh's window (for a consumer at ``after``) in a
        way its log could not record key by key, or None: a TRUNCATE, a partition dropped, or a
        partition tree that no longer matches what the log covers (a partition created, attached
        or detached while mvlog's event triggers were not installed: writes to it went unlogged).
        Read at the stamp's snapshot, so DDL after the stamp is the next refresh's business."""
        if self._window_has(log, after, sql.SQL("\"dmltype$$\" = 'T'")):
            return f"table {log.qualified_table} was truncated"
        if self._window_has(log, after, sql.SQL("\"dmltype$$\" = 'P'")):
            return (f"a partition of {log.qualified_table} was dropped, or its partitions changed while mvlog's "
                    f"event triggers were not installed")
        uncovered = self.query(UNCOVERED_PARTITION, {"root": log.table_oid})
        if uncovered:
            return (f"partition {uncovered[0][0]} of {log.qualified_table} {uncovered[0][1]} "
                    f"(mvlog's event triggers were not there to follow it); run 'mvlog apply'")
        return None

    def oldest_change(self, logs: Sequence[LogInfo], after: datetime | None) -> datetime | None:
        """When the oldest transaction whose changes are in this refresh's window (for a consumer at
        ``after``) started; None if the window is empty."""
        return self.query(pending_sql(logs), {"after": after})[0][1] if logs else None

    def window_size(self, log: LogInfo, after: datetime | None) -> WindowSize:
        """How many distinct keys of the table this window changed, and the table's estimated rows."""
        ((rows,),) = self.query(ESTIMATED_ROWS, {"oid": log.table_oid})
        ((changed,),) = self.query(changed_key_count_sql(log, after))
        return WindowSize(log.qualified_table, int(changed), float(rows or 0))
