"""The logs' registry: the rows of ``mvlog.logs``, one per materialized view log.

A row names the log table of a logged table (``mvlog.mlog$…``, :mod:`mvlog.postgres.logs`), its
primary key, its capture state (``trigger``, ``logical``, ``handover``: what the states mean is
:mod:`mvlog.postgres.capture`'s business), the WAL position of its last switch of capture, and its
last stamp; and the partitions each log of a partitioned table covers (``mvlog.log_partitions``,
kept up to date by the functions of ``sql/005_partitions.sql``). Each function runs its statement
in the caller's transaction (or, given a :class:`~mvlog.postgres.source.Source`, in one of its
own): which transaction, which locks and in what order stay the caller's.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

from psycopg2 import sql

from mvlog.model import LogInfo, TableInfo
from mvlog.postgres.source import Cursor, Source, fetch_row


class Registration(NamedTuple):
    """A log's row as ``apply`` compares it with the table it logs."""

    log_name: str
    key_columns: tuple[str, ...]
    key_types: tuple[str, ...]
    capture: str


def registered(source: Source) -> dict[str, LogInfo]:
    """Registered logs by qualified table name."""
    rows = source.query(
        "SELECT table_schema, table_name, log_name, key_columns, key_types, table_oid, capture FROM mvlog.logs"
    )
    return {f"{r[0]}.{r[1]}": LogInfo(r[0], r[1], r[2], tuple(r[3]), tuple(r[4]), int(r[5]), r[6])
            for r in rows}


def tables_where(condition: sql.Composable) -> sql.Composed:
    """A subquery: ``(table_schema, table_name)`` of the logs whose registry rows (as ``l``) meet
    ``condition``; for a statement of another catalog module about the tables logs are on."""
    return sql.SQL("SELECT l.table_schema, l.table_name FROM mvlog.logs AS l WHERE {}").format(condition)


def registration(cur: Cursor, schema: str, name: str) -> Registration | None:
    """The registry row of table ``schema.name``'s log, or None if it has none."""
    cur.execute(
        "SELECT log_name, key_columns, key_types, capture FROM mvlog.logs "
        "WHERE table_schema = %s AND table_name = %s",
        (schema, name),
    )
    row = cur.fetchone()
    return None if row is None else Registration(row[0], tuple(row[1]), tuple(row[2]), row[3])


def register(cur: Cursor, table: TableInfo, log: LogInfo) -> None:
    """Register ``log`` of ``table`` with its key and capture state (``log.capture``), or update
    the row of the table's log (its oid, key and capture; the log table's name stays)."""
    cur.execute(
        """
        INSERT INTO mvlog.logs (table_schema, table_name, table_oid, log_name, key_columns, key_types, capture)
        VALUES (%s, %s, %s, %s, %s, %s, %s)
        ON CONFLICT (table_schema, table_name) DO UPDATE
        SET table_oid = excluded.table_oid, key_columns = excluded.key_columns, key_types = excluded.key_types,
            capture = excluded.capture
        """,
        (table.schema, table.name, table.oid, log.log_name, list(log.key_columns), list(log.key_types),
         log.capture),
    )


def record_switch(cur: Cursor, log_name: str) -> None:
    """Record the WAL insert position of now as where the log's switch of capture commits: the
    capture has to write past it before a hand-over ends."""
    cur.execute("UPDATE mvlog.logs SET switched_lsn = pg_current_wal_insert_lsn() WHERE log_name = %s",
                (log_name,))


def unregister(cur: Cursor, log_name: str) -> None:
    """Delete the log's registry row."""
    cur.execute("DELETE FROM mvlog.logs WHERE log_name = %s", (log_name,))


def new_stamp(cur: Cursor, log_names: Sequence[str]) -> tuple[datetime, dict[str, str]]:
    """A new stamp S for these logs (the clock, but after every one's last stamp), and each log's
    capture state by log table, as the snapshot of ``cur`` sees them."""
    cur.execute("SELECT greatest(clock_timestamp(), max(last_stamp) + interval '1 microsecond'), "
                "       json_object_agg(log_name, capture) "
                "FROM mvlog.logs WHERE log_name = ANY(%s)", (list(log_names),))
    stamp, kinds = fetch_row(cur)
    return stamp, kinds


def set_last_stamp(cur: Cursor, stamp: datetime, log_names: Sequence[str]) -> None:
    """Record ``stamp`` as the last stamp of these logs."""
    cur.execute("UPDATE mvlog.logs SET last_stamp = %s WHERE log_name = ANY(%s)", (stamp, list(log_names)))


def last_stamp(cur: Cursor, log_name: str) -> datetime | None:
    """The log's last stamp (None: never stamped, or the log is not registered)."""
    cur.execute("SELECT last_stamp FROM mvlog.logs WHERE log_name = %s", (log_name,))
    row = cur.fetchone()
    return row[0] if row is not None else None


# -- as the logical capture reads and changes it ---------------------------------------------------


def log_keys(cur: Cursor) -> dict[int, tuple[str, tuple[str, ...]]]:
    """Registered logs by table oid: (log table, key columns)."""
    cur.execute("SELECT table_oid, log_name, key_columns FROM mvlog.logs")
    return {int(oid): (name, tuple(keys)) for oid, name, keys in cur.fetchall()}


def handovers_through(cur: Cursor, written: str) -> list[tuple[str, str, str]]:
    """(schema, table, log table) of the logs in ``handover`` whose switch lies before ``written``."""
    cur.execute("SELECT table_schema, table_name, log_name FROM mvlog.logs "
                "WHERE capture = 'handover' AND switched_lsn <= %s::pg_lsn", (written,))
    return [(schema, table, log_name) for schema, table, log_name in cur.fetchall()]


def end_handover(cur: Cursor, log_name: str) -> None:
    """The log is its triggers' alone from now on."""
    cur.execute("UPDATE mvlog.logs SET capture = 'trigger', switched_lsn = NULL WHERE log_name = %s", (log_name,))


def covered_partitions(cur: Cursor, table_oid: int) -> list[tuple[str, str]]:
    """The (schema, name) of every partition that exists and the log of table ``table_oid`` covers."""
    cur.execute("SELECT n.nspname, c.relname FROM mvlog.log_partitions AS p "
                "JOIN pg_class AS c ON c.oid = p.partition_oid "
                "JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE p.table_oid = %s", (table_oid,))
    return [(schema, name) for schema, name in cur.fetchall()]


def coverage_names(source: Source, table_oid: int) -> list[str]:
    """The qualified names of the partitions the log of table ``table_oid`` covers, sorted; a
    partition dropped since keeps the name it was recorded with."""
    rows = source.query(
        "SELECT coalesce(format('%%I.%%I', n.nspname, c.relname), p.partition_name) "
        "FROM mvlog.log_partitions AS p LEFT JOIN pg_class AS c ON c.oid = p.partition_oid "
        "LEFT JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE p.table_oid = %s ORDER BY 1",
        (table_oid,))
    return [name for (name,) in rows]


def forget_partitions(cur: Cursor, table_oid: int) -> None:
    """Forget the partitions the log of table ``table_oid`` covered (the log is dropped)."""
    cur.execute("DELETE FROM mvlog.log_partitions AS p WHERE p.table_oid = %s", (table_oid,))
