"""Capture by logical decoding (``capture: logical``): the table's primary-key columns are
published by mvlog's publication, and the capture step
(:class:`~mvlog.postgres.capture.decoding.Decoding`) decodes the database's replication slot and
writes the keys into the same log. The one trigger left is on TRUNCATE (on the table and its
partitions): a TRUNCATE aimed at a partition is not published through the partition root.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from psycopg2 import sql

from mvlog.model import SENTINEL, SENTINEL_TIME, LogInfo, TableInfo
from mvlog.postgres.capture import Capture
from mvlog.postgres.capture.pgoutput import lsn_value
from mvlog.postgres.capture.prerequisites import replica_identity_refusal
from mvlog.postgres.capture.triggers import TriggerCapture
from mvlog.postgres.catalog import log_registry
from mvlog.postgres.catalog.capture_state import WRITTEN_SQL
from mvlog.postgres.late import LateRows
from mvlog.postgres.source import Cursor, fetch_row, log_identifier, table_identifier

if TYPE_CHECKING:
    from mvlog.postgres.capture.batch import Pass
    from mvlog.postgres.capture.slot import SlotStatus
    from mvlog.postgres.source import Source


class SlotReader(Protocol):
    """What the logical capture needs of the slot's reader (:class:`~mvlog.postgres.capture.decoding.Decoding`)."""

    source: Source

    def catch_up(self, upto: int | None = None) -> Pass | None: ...

    def reach(self, lsn: int, timeout: float, report: Callable[[str], None] = ...) -> None: ...

    def reach_now(self, timeout: float, report: Callable[[str], None] = ...) -> None: ...

    def exists(self) -> bool: ...

    def ensure(self, timeout: float = ..., report: Callable[[str], None] = ...) -> None: ...

    def replaced_at(self) -> datetime | None: ...

    def status(self) -> list[SlotStatus]: ...

PUBLICATION = "mvlog"


def ensure_publication(cur: Cursor) -> None:
    """mvlog's publication (empty at first): every partition's writes published as its root's."""
    cur.execute("SELECT EXISTS (SELECT FROM pg_publication WHERE pubname = %s)", (PUBLICATION,))
    if not fetch_row(cur)[0]:
        cur.execute(sql.SQL("CREATE PUBLICATION {} WITH (publish_via_partition_root = true)")
                    .format(sql.Identifier(PUBLICATION)))


def published_columns(cur: Cursor, schema: str, name: str) -> list[str] | None:
    """The columns mvlog's publication publishes of a table; None if it does not publish it."""
    cur.execute("SELECT attnames::text[] FROM pg_publication_tables "
                "WHERE pubname = %s AND schemaname = %s AND tablename = %s", (PUBLICATION, schema, name))
    row = cur.fetchone()
    return list(row[0]) if row else None


def unpublish(cur: Cursor, schema: str, name: str) -> None:
    """Take a table out of mvlog's publication, if it is in it."""
    if published_columns(cur, schema, name) is not None:
        cur.execute(sql.SQL("ALTER PUBLICATION {} DROP TABLE {}")
                    .format(sql.Identifier(PUBLICATION), sql.Identifier(schema, name)))


class LogicalCapture(Capture):
    """The table's primary key in mvlog's publication; of its triggers only the TRUNCATE one.
    ``decoding`` is the database's capture step, which a refresh waits for."""

    kind = "logical"
    stamps_apart = True

    def __init__(self, decoding: SlotReader):
        self.decoding = decoding

    # -- the capture as the rest of mvlog sees it: its slot, and a wait for what has committed --

    def exists(self) -> bool:
        """Whether the database has the logical capture (its state row; the slot may be lost)."""
        return self.decoding.exists()

    def ensure(self, timeout: float, report: Callable[[str], None]) -> None:
        """Make the publication, the slot and the capture's state if missing (never a silent wait)."""
        self.decoding.ensure(timeout, report)

    def reach_now(self, timeout: float, report: Callable[[str], None]) -> None:
        """Wait until every transaction committed before now has its keys in the logs."""
        self.decoding.reach_now(timeout, report)

    def replaced_at(self) -> datetime | None:
        """When the slot was last found lost or missing and made again; None if never."""
        return self.decoding.replaced_at()

    def status(self) -> list[SlotStatus]:
        """The slot: retained WAL, the capture's lag, PostgreSQL's verdict on it."""
        return self.decoding.status()

    def install(self, cur: Cursor, table: TableInfo, log: LogInfo) -> None:
        ensure_publication(cur)
        keys = [c.name for c in table.key]
        columns = published_columns(cur, table.schema, table.name)
        if columns is not None and sorted(columns) != sorted(keys):
            unpublish(cur, table.schema, table.name)
            columns = None
        if columns is None:
            cur.execute(sql.SQL("ALTER PUBLICATION {} ADD TABLE {} ({})").format(
                sql.Identifier(PUBLICATION), table_identifier(table),
                sql.SQL(", ").join(sql.Identifier(k) for k in keys)))
        # In the same transaction: a writer waits for it (DROP TRIGGER locks the table against
        # writes), so each write is logged by the triggers before, or decoded after, never neither.
        TriggerCapture().install_truncate(cur, table, log)

    def refusal(self, cur: Cursor, table: TableInfo) -> str | None:
        return replica_identity_refusal(cur, table.oid, table.qualified)

    def current(self, cur: Cursor, table: TableInfo, log: LogInfo) -> bool:
        columns = published_columns(cur, table.schema, table.name)
        if columns is None or sorted(columns) != sorted(c.name for c in table.key):
            return False
        return TriggerCapture().truncate_current(cur, table, log)

    def remove(self, cur: Cursor, log: LogInfo) -> None:
        cur.execute("SELECT to_regclass(%s)::oid = %s",
                    (sql.Identifier(log.table_schema, log.table_name).as_string(cur), log.table_oid))
        if fetch_row(cur)[0]:
            unpublish(cur, log.table_schema, log.table_name)

    def before_stamp(self) -> None:
        self.decoding.catch_up()

    def unseen(self, at_snapshot: Cursor, logs: Sequence[LogInfo], wait: float, stamp: datetime | None,
               report: Callable[[str], None]) -> LateRows:
        """Wait for the capture to pass the snapshot S of ``at_snapshot``; then the decoded
        sentinel rows of the transactions S sees (stamped with ``stamp`` if given, and the logs'
        last stamp recorded, in a transaction of its own): those written after S are returned.

        Exact because: a transaction visible in S committed before S was taken, so its commit
        record lies before L, the WAL insert position read after S. Once the capture has written
        everything that committed before L, every row of such a transaction is in the log (none
        missing); a row is stamped only if its transaction is visible in S (none early — the
        others keep the sentinel for the next refresh).
        """
        decoding = self.decoding
        at_snapshot.execute(sql.SQL("SELECT pg_current_snapshot()::text, ({}), pg_current_wal_insert_lsn()::text")
                            .format(sql.SQL(WRITTEN_SQL)))
        snapshot, written, insert = fetch_row(at_snapshot)
        if written is not None:
            decoding.reach(lsn_value(insert), wait, report)
        late = LateRows(stamp or SENTINEL_TIME)
        params = {"stamp": stamp, "sentinel": SENTINEL, "snapshot": snapshot, "written": written or "0/0"}
        with decoding.source.transaction() as cur:  # a snapshot that sees what the capture wrote
            for log in logs:
                keys = sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(k)) for k in log.key_columns)
                decoded = sql.SQL('"snaptime$$" = %(sentinel)s AND "xid$$" IS NOT NULL '
                                  'AND pg_visible_in_snapshot("xid$$", %(snapshot)s::pg_snapshot)')
                returned = sql.SQL('{}, "dmltype$$", "old_new$$", "xact_time$$", "lsn$$" >= %(written)s::pg_lsn'
                                   ).format(keys)
                statement = (sql.SQL('UPDATE {} SET "snaptime$$" = %(stamp)s WHERE {} RETURNING {}') if stamp
                             else sql.SQL("SELECT {2} FROM {0} WHERE {1}"))
                cur.execute(statement.format(log_identifier(log), decoded, returned), params)
                late.add(log, [r[:-1] for r in cur.fetchall() if r[-1] is not False])
            if stamp is not None:
                log_registry.set_last_stamp(cur, stamp, [log.log_name for log in logs])
        return late
