"""The materialized view logs: their tables and registry rows, stamping, windows and purging.

A log is a table ``mvlog.mlog$_<table>_<oid>`` (``sql/log_table.sql``) and a row in the logs'
registry (:mod:`mvlog.postgres.catalog.log_registry`, which owns its statements). What fills it
is its capture (:mod:`mvlog.postgres.capture`): triggers, or the logical decoding of the
database's replication slot. Everything here reads it the same way whoever filled it. Which
views consume a log, and so how far it may be purged, is the catalog's business
(:mod:`mvlog.postgres.catalog`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime

import psycopg2
import psycopg2.extensions
from psycopg2 import sql

from mvlog.errors import ConfigError, SourceError
from mvlog.faults import checkpoint
from mvlog.model import (
    MVLOG_SCHEMA,
    SENTINEL,
    SENTINEL_TIME,
    LogInfo,
    TableInfo,
    WindowSize,
    checked_snapshot_id,
    log_name_for,
)
from mvlog.postgres.capture import Capture, is_decoded, needs_switch_position, stamped_as, state_after
from mvlog.postgres.capture.decoding import Decoding
from mvlog.postgres.capture.logical import LogicalCapture
from mvlog.postgres.capture.triggers import TriggerCapture
from mvlog.postgres.catalog import log_registry
from mvlog.postgres.late import LateRows
from mvlog.postgres.locks import close_releasing_locks
from mvlog.postgres.source import (
    FAST_SETTINGS,
    Cursor,
    Source,
    fetch_row,
    log_identifier,
    read_sql,
    table_identifier,
)
from mvlog.postgres.windows import UNCOVERED_PARTITION, Pending, StampedSnapshot, pending_sql, window_size

LOCK_NAMESPACE = 0x6D766C67  # "mvlg": first key of the advisory locks that serialize stamping a log
CAPTURE_WAIT = 60.0  # seconds a refresh waits for the logical capture to reach its snapshot
# Rows of a stamp's window that its snapshot cannot see (written by the capture after it), above
# which the stamp is taken again (they are read as literals in every statement of the refresh).
LATE_ROWS_MAX = 1_000
STAMP_ATTEMPTS = 3


class Logs:
    """The materialized view logs of one database."""

    def __init__(self, source: Source):
        self.source = source
        self.decoding = Decoding(source)
        self.logical = LogicalCapture(self.decoding)  # its slot, and the wait for it, as callers see them
        self.captures: dict[str, Capture] = {c.kind: c for c in (TriggerCapture(), self.logical)}

    def _by_capture(self, logs: Sequence[LogInfo]) -> dict[Capture, list[LogInfo]]:
        """``logs`` (in their order) by the capture whose rows a stamp of them deals with."""
        groups: dict[Capture, list[LogInfo]] = {}
        for log in logs:
            groups.setdefault(self.captures[stamped_as(log)], []).append(log)
        return groups

    def registered(self) -> dict[str, LogInfo]:
        """Registered logs by qualified table name."""
        return log_registry.registered(self.source)

    # -- DDL ----------------------------------------------------------------------------------

    def ensure(self, cur: Cursor, table: TableInfo, capture: str = "trigger") -> tuple[LogInfo, str]:
        """CREATE MATERIALIZED VIEW LOG ON table WITH PRIMARY KEY (idempotent), filled by
        ``capture`` (``trigger`` or ``logical``).

        Returns the log and what happened: ``"unchanged"`` when the log and its capture already
        exist exactly as this version of mvlog renders them; ``"created"`` when its DDL ran (new,
        made by an older mvlog, or its capture switched); ``"rekeyed"`` when the table's primary
        key changed, so the old log's rows were dropped (its views need a complete refresh).

        A switch of capture is exact: both happen in this transaction, which locks the table
        against writes (trigger DDL), so every write is logged by the one before or the one after.
        Switching back to triggers leaves the log in ``handover`` until the capture has written
        the transactions that committed before the switch (:func:`~mvlog.postgres.capture.handover.settle`).
        """
        if not table.key:
            raise ConfigError(f"table {table.qualified} has no primary key, so it cannot have a materialized view log")
        method = self.captures[capture]
        refusal = self.source.log_refusal(cur, table) or method.refusal(cur, table)
        if refusal:
            raise ConfigError(refusal)
        row = log_registry.registration(cur, table.schema, table.name)
        log = LogInfo.for_table(table, row.log_name if row else log_name_for(table))
        was = row.capture if row else None
        now = state_after(capture, was)
        log = dataclasses.replace(log, capture=now)
        outcome = "created"
        rekeyed = row is not None and (row.key_columns, row.key_types) != (log.key_columns, log.key_types)
        if row and not rekeyed and was == now and self._table_current(cur, log) and method.current(cur, table, log):
            return log, "unchanged" if not self._cover_partitions(cur, table, "drifted") else "created"
        # Writers lock the table, then (their triggers) the log: lock in the same order, before the
        # log's DDL, or a writer's trigger and this transaction wait for each other.
        cur.execute(sql.SQL("LOCK TABLE {} IN SHARE ROW EXCLUSIVE MODE").format(table_identifier(table)))
        if rekeyed:
            # The primary key changed: the old log's rows name keys of another shape.
            cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(log_identifier(log)))
            outcome = "rekeyed"
        if rekeyed or not self._table_current(cur, log):
            cur.execute(self._table_ddl(table, log))
        log_registry.register(cur, table, log)  # log.capture == now
        method.install(cur, table, log)
        if needs_switch_position(now, was):
            # Transactions that wrote the table before this one took its lock committed before this
            # position: once the capture has written past it, the log is the triggers' alone.
            log_registry.record_switch(cur, log.log_name)
        # A new or rekeyed log's views refresh completely anyway, and a switch of capture changes no
        # partition; an existing log whose partitions changed unwatched cannot tell what moved.
        drifted = row is not None and outcome == "created" and was == now
        self._cover_partitions(cur, table, "drifted" if drifted else "initial")
        return log, outcome

    @staticmethod
    def _cover_partitions(cur: Cursor, table: TableInfo, how: str) -> int:
        """Put the log's triggers on every partition of ``table`` (and off former ones; none for a
        logical log), and list them in its registry; how many changed (``sql/005_partitions.sql``)."""
        cur.execute("SELECT mvlog.cover_partitions(%s, %s)", (table.oid, how))
        return fetch_row(cur)[0]

    @staticmethod
    def _table_current(cur: Cursor, log: LogInfo) -> bool:
        """The log table exists as rendered now: without an index, with the columns of logical rows."""
        cur.execute(
            """
            SELECT to_regclass(%(log)s) IS NOT NULL
                   AND NOT EXISTS (SELECT FROM pg_index i WHERE i.indrelid = to_regclass(%(log)s))
                   AND EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = to_regclass(%(log)s)
                               AND a.attname = 'lsn$$' AND NOT a.attisdropped)
            """,
            {"log": log_identifier(log).as_string(cur)},
        )
        return bool(fetch_row(cur)[0])

    @staticmethod
    def _table_ddl(table: TableInfo, log: LogInfo) -> sql.Composed:
        return sql.SQL(read_sql("log_table.sql")).format(
            log=log_identifier(log),
            log_index=sql.Identifier(MVLOG_SCHEMA, f"{log.log_name}$snaptime"),
            key_defs=sql.SQL(", ").join(
                sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(c.type)) for c in table.key
            ),
        )

    def drop(self, cur: Cursor, log: LogInfo) -> None:
        """DROP MATERIALIZED VIEW LOG: its capture (triggers, or its place in the publication), log
        table and registry row."""
        for capture in self.captures.values():
            capture.remove(cur, log)
        log_registry.forget_partitions(cur, log.table_oid)
        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(log_identifier(log)))
        log_registry.unregister(cur, log.log_name)

    def coverage(self, log: LogInfo) -> tuple[list[str], str | None]:
        """The partitions the log of a partitioned table covers (qualified names; none for a plain
        table), and the first partition it should cover and does not, or covers and should not."""
        covered = log_registry.coverage_names(self.source, log.table_oid)
        drift = self.source.query(UNCOVERED_PARTITION, {"root": log.table_oid})
        return covered, (f"partition {drift[0][0]} {drift[0][1]}" if drift else None)

    # -- stamping, windows, purging --------------------------------------------------------

    @contextlib.contextmanager
    def stamp(self, logs: Sequence[LogInfo], capture_wait: float = CAPTURE_WAIT,
              report: Callable[[str], None] = lambda _: None) -> Iterator[StampedSnapshot]:
        """Stamp every sentinel row of these logs with one new S, and hold the snapshot the stamp saw.

        The refresh reads everything at that snapshot, so it sees the base tables exactly as
        the stamped log rows describe them: a transaction that commits after the stamp took
        its snapshot is neither in the window nor in the base rows read (the next refresh
        takes both). Reading base tables at a later snapshot would apply such a transaction
        to some rows of a refresh group and not to others.

        Session advisory locks per log, taken in a fixed order *before* the snapshot and S are
        taken and released after the stamp commits, serialize stamping, so stamps become
        visible in increasing order of S and no stamp commits between a snapshot and its stamp.

        A log captured by logical decoding gets its rows after their transactions commit, so
        also after the snapshot: its capture's :meth:`~mvlog.postgres.capture.Capture.unseen`
        waits for the capture to pass the snapshot and stamps exactly the rows of the
        transactions it sees. The rows it writes
        after the snapshot are read as literals (:mod:`mvlog.postgres.late`); above
        LATE_ROWS_MAX of them the stamp is taken again (its rows stay stamped: a later S's
        window holds them), and after STAMP_ATTEMPTS the refresh fails in one sentence.
        """
        ordered = sorted(logs, key=lambda log: log.table_oid)
        for attempt in range(1, STAMP_ATTEMPTS + 1):
            holder, stamp, snapshot, late = self._stamp_once(ordered, capture_wait, report)
            if len(late) <= LATE_ROWS_MAX:
                break
            holder.close()  # its rows stay stamped: the next stamp's window holds them, and sees them
            if attempt == STAMP_ATTEMPTS:
                raise SourceError(f"the logical capture wrote more than {LATE_ROWS_MAX:,} rows after each of "
                                  f"{STAMP_ATTEMPTS} stamps' snapshots (a busy writer keeps ahead of it); nothing "
                                  f"was refreshed — run the refresh again, or run 'mvlog capture' beside it")
        try:
            yield StampedSnapshot(stamp, snapshot, holder, self.source, late)
        except psycopg2.Error as exc:
            raise self.source.error(exc) from None
        finally:
            holder.close()

    def _stamp_once(self, ordered: Sequence[LogInfo], capture_wait: float, report: Callable[[str], None]
                    ) -> tuple[psycopg2.extensions.connection, datetime, str, LateRows]:
        """One stamp of :meth:`stamp`: the connection holding its snapshot, S, the snapshot, and
        the rows of transactions S sees that the capture wrote after S (its late rows)."""
        source = self.source
        by_capture = self._by_capture(ordered)
        holder = source.connect()
        try:
            holder.set_session(isolation_level="REPEATABLE READ", readonly=True)
            stamper = source.connect()
            try:
                stamper.autocommit = True
                with stamper.cursor() as cur:
                    lock_stamping(cur, ordered)
                for capture in by_capture:
                    capture.before_stamp()
                checkpoint("before_snapshot")
                stamper.autocommit = False
                stamper.set_session(isolation_level="REPEATABLE READ")
                with stamper.cursor() as cur, holder.cursor() as held:
                    cur.execute("SELECT pg_export_snapshot()")  # the stamp's snapshot, taken under the locks
                    held.execute("SET TRANSACTION SNAPSHOT %s", (checked_snapshot_id(fetch_row(cur)[0]),))
                    held.execute("SELECT pg_export_snapshot()")  # outlives the stamp's transaction
                    snapshot = checked_snapshot_id(fetch_row(held)[0])
                    for setting in FAST_SETTINGS:  # what it runs are a refresh's checks of its windows
                        held.execute(setting)
                    checkpoint("after_snapshot")
                    stamp, kinds = log_registry.new_stamp(cur, [log.log_name for log in ordered])
                    # The captures as registered at the snapshot (an apply may have switched one
                    # since the refresh read its logs).
                    by_capture = self._by_capture(
                        [dataclasses.replace(log, capture=kinds.get(log.log_name, log.capture)) for log in ordered])
                    late = LateRows(stamp)
                    for capture, logs in by_capture.items():
                        late.extend(capture.unseen(cur, logs, capture_wait, stamp, report))
                    for log in ordered:  # the rows written in their writers' transactions
                        cur.execute(
                            sql.SQL('UPDATE {} SET "snaptime$$" = %s WHERE "snaptime$$" = %s AND "xid$$" IS NULL')
                            .format(log_identifier(log)),
                            (stamp, SENTINEL),
                        )
                    # (a capture that stamps apart recorded its logs' last stamp: updating that row
                    # here too would fail this transaction's snapshot)
                    here = [log.log_name for capture, logs in by_capture.items() if not capture.stamps_apart
                            for log in logs]
                    log_registry.set_last_stamp(cur, stamp, here)
                stamper.commit()
            finally:
                close_releasing_locks(stamper)
            # Fresh statistics: the planner must know the window holds few keys, or it prefers
            # hash joins over index probes and scans whole base tables (ANALYZE samples, so
            # even a large log costs little).
            with source.transaction() as cur:
                for log in ordered:
                    cur.execute("SELECT mvlog.analyze(%s::regclass)", (log_identifier(log).as_string(cur),))
            return holder, stamp, snapshot, late
        except psycopg2.Error as exc:
            holder.close()
            raise source.error(exc) from None
        except BaseException:
            holder.close()
            raise


    def unseen(self, at_snapshot: Cursor, logs: Sequence[LogInfo], wait: float = CAPTURE_WAIT) -> LateRows:
        """The unstamped rows of ``logs`` that the snapshot of ``at_snapshot`` cannot see, of
        transactions it sees (for reading windows at a snapshot that is not a refresh's: verify).
        Nothing for logs that only triggers fill."""
        late = LateRows(SENTINEL_TIME)
        for capture, its_logs in self._by_capture(logs).items():
            late.extend(capture.unseen(at_snapshot, its_logs, wait, None, lambda _: None))
        return late

    def settle_capture(self) -> None:
        """After logs changed capture (``apply``, ``drop --log``): a pass of the logical capture (it
        finishes hand-overs to triggers); then, if no log is captured logically any more, the
        capture dropped with every log's stamping lock held (no refresh stamps while its rows
        become trigger rows)."""
        if not self.decoding.exists():
            return
        self.decoding.catch_up()
        logs = sorted(self.registered().values(), key=lambda log: log.table_oid)
        if any(is_decoded(log) for log in logs):
            return
        conn = self.source.connect()
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                lock_stamping(cur, logs)
            self.decoding.drop()
        except psycopg2.Error as exc:
            raise self.source.error(exc) from None
        finally:
            close_releasing_locks(conn)

    def window_sizes(self, logs: Sequence[LogInfo], after: datetime | None) -> list[WindowSize]:
        """Per log, the distinct keys a consumer at ``after`` has not applied yet (stamped later, or
        not stamped), and the table's estimated rows: the next refresh's window, as far as it is known now."""
        return [window_size(self.source.query, log, after) for log in logs]

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


def lock_stamping(cur: Cursor, logs: Sequence[LogInfo]) -> None:
    """Take the session advisory locks that serialize stamping these logs (ordered by table oid:
    every stamper takes them in the same order)."""
    for log in logs:
        cur.execute("SELECT pg_advisory_lock(%s, %s)", (LOCK_NAMESPACE, log.table_oid & 0x7FFFFFFF))
