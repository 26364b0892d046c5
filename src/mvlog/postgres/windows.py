"""What a refresh reads of the logs at its stamp's snapshot (:class:`StampedSnapshot`): its
windows, whether rows changed in ways no log records key by key, how far behind a consumer is."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import psycopg2
import psycopg2.extensions
from psycopg2 import sql

from mvlog.model import SENTINEL_TIME, LogInfo, WindowSize
from mvlog.postgres.capture import is_decoded
from mvlog.postgres.capture.lifecycle import LOST_REASON
from mvlog.postgres.catalog.capture_state import REPLACED_SQL
from mvlog.postgres.late import LateRows
from mvlog.postgres.source import ESTIMATED_ROWS, Source, log_identifier
from mvlog.sql.generate.changes import changed_key_count_sql


def pending_sql(logs: Sequence[LogInfo]) -> sql.Composed:
    """How many log rows of ``logs`` are stamped after ``%(after)s`` (or not stamped yet), and the
    start time of the oldest of their transactions: a log row's ``xact_time$$`` is its writer's
    ``transaction_timestamp()``."""
    per_log = sql.SQL(" UNION ALL ").join(
        sql.SQL('SELECT count(*), min("xact_time$$") FROM {} '
                'WHERE %(after)s::timestamptz IS NULL OR "snaptime$$" > %(after)s').format(log_identifier(log))
        for log in logs)
    return sql.SQL("SELECT sum(n), min(m) FROM ({}) AS p(n, m)").format(per_log)


# A member of a logged table's partition tree that its log does not cover, or a covered one that
# left the tree, at the current snapshot (sql/007_unchanged.sql).
UNCOVERED_PARTITION = "SELECT partition_name, what FROM mvlog.partition_drift(%(root)s) LIMIT 1"


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
    late: LateRows = field(default_factory=lambda: LateRows(SENTINEL_TIME))

    def resolve(self, statement: str) -> str:
        """A statement to run at the snapshot, reading each log with the rows the snapshot cannot
        see but this refresh stamped (:mod:`mvlog.postgres.late`)."""
        return self.late.resolve(statement) if self.late else statement

    def query(self, statement: sql.Composable | str, params: Sequence | dict | None = None) -> list[tuple]:
        """Run a read-only statement at the snapshot."""
        try:
            with self.conn.cursor() as cur:
                if self.late:
                    text = statement.as_string(cur) if isinstance(statement, sql.Composable) else statement
                    statement = self.resolve(cur.mogrify(text, params).decode() if params is not None else text)
                    params = None
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
        if is_decoded(log):
            lost = self.query(REPLACED_SQL)[0][0]
            if lost is not None and (after is None or lost > after):
                return LOST_REASON
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
        return window_size(self.query, log, after)


def window_size(query: Callable[..., list[tuple]], log: LogInfo, after: datetime | None) -> WindowSize:
    """How many distinct keys of ``log``'s table changed after ``after`` (rows stamped later, or not
    stamped), and the table's estimated rows, by ``query`` (at a refresh's snapshot, or now)."""
    ((rows,),) = query(ESTIMATED_ROWS, {"oid": log.table_oid})
    ((changed,),) = query(changed_key_count_sql(log, after))
    return WindowSize(log.qualified_table, int(changed), float(rows or 0))
