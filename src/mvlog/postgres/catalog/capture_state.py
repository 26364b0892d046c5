"""The logical capture's state: the rows of ``mvlog.capture_state``, one per replication slot
(one slot per database, :mod:`mvlog.postgres.capture.slot`).

A row holds the slot's publication, how far the capture has written into the logs (every
transaction that committed before ``written_lsn`` has its keys in them), when it wrote that and
how many keys it has written, and when a lost slot was last replaced. Each function runs its
statement in the caller's transaction (or, given a :class:`~mvlog.postgres.source.Source`, in one
of its own): which transaction, and what commits with it, stay the caller's. Positions are WAL
positions as text (``0/16B3748``).
"""

from __future__ import annotations

from datetime import datetime

from mvlog.postgres.source import Cursor, Source, fetch_row

# How far the capture has written into the logs (the one row): a statement of its own, or a
# subquery of one that must read it in the same snapshot as something else.
WRITTEN_SQL = "SELECT written_lsn::text FROM mvlog.capture_state LIMIT 1"
# When a lost slot was last replaced (NULL: never); read at a refresh's snapshot.
REPLACED_SQL = "SELECT max(replaced_at) FROM mvlog.capture_state"


def replaced_at(source: Source) -> datetime | None:
    """When a lost (or missing) slot was last made again; None if never."""
    return source.query(REPLACED_SQL)[0][0]


def exists(source: Source) -> bool:
    """Whether the database has mvlog's capture: the catalog has the table, and it a row."""
    rows = source.query("SELECT to_regclass('mvlog.capture_state') IS NOT NULL "
                        "AND EXISTS (SELECT FROM mvlog.capture_state)")
    return bool(rows[0][0])


def has_state(cur: Cursor, slot: str) -> bool:
    """Whether ``slot`` has its state row."""
    cur.execute("SELECT EXISTS (SELECT FROM mvlog.capture_state WHERE slot_name = %s)", (slot,))
    return bool(fetch_row(cur)[0])


def adopt_slot(cur: Cursor, slot: str, publication: str) -> None:
    """Give an existing slot without a state row one, written up to where the slot has been
    confirmed; a slot that has one keeps it."""
    cur.execute("INSERT INTO mvlog.capture_state (slot_name, publication, written_lsn) "
                "SELECT %s, %s, confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = %s "
                "ON CONFLICT (slot_name) DO NOTHING", (slot, publication, slot))


def start_slot(cur: Cursor, slot: str, publication: str, start: str) -> None:
    """The state of a slot just created at WAL position ``start``: written up to there."""
    cur.execute("INSERT INTO mvlog.capture_state (slot_name, publication, written_lsn) VALUES (%s, %s, %s) "
                "ON CONFLICT (slot_name) DO UPDATE SET written_lsn = excluded.written_lsn, "
                "written_at = clock_timestamp()", (slot, publication, start))


def mark_replaced(cur: Cursor, slot: str) -> None:
    """Record that ``slot`` was lost and replaced now: changes before were not captured."""
    cur.execute("UPDATE mvlog.capture_state SET replaced_at = clock_timestamp() WHERE slot_name = %s", (slot,))


def forget_slot(cur: Cursor, slot: str) -> None:
    """Delete the state row of ``slot`` (the capture is dropped)."""
    cur.execute("DELETE FROM mvlog.capture_state WHERE slot_name = %s", (slot,))


def written(source: Source) -> str | None:
    """How far the capture has written (read in a transaction of its own); None if the database
    has no capture."""
    rows = source.query(WRITTEN_SQL)
    return rows[0][0] if rows else None


def written_now(cur: Cursor) -> str | None:
    """How far the capture has written, as ``cur``'s transaction sees it (:data:`WRITTEN_SQL`);
    None if the database has no capture."""
    cur.execute(WRITTEN_SQL)
    row = cur.fetchone()
    return row[0] if row else None


def written_position(cur: Cursor, slot: str) -> str | None:
    """How far the capture of ``slot`` has written; None if it has no state row."""
    cur.execute("SELECT written_lsn::text FROM mvlog.capture_state WHERE slot_name = %s", (slot,))
    row = cur.fetchone()
    return None if row is None else row[0]


def record_written(cur: Cursor, slot: str, lsn: str, keys: int) -> None:
    """In the transaction of the last log rows written: the capture of ``slot`` has written
    everything that committed before ``lsn`` (a position never moves back), ``keys`` more keys."""
    cur.execute("UPDATE mvlog.capture_state SET written_lsn = greatest(written_lsn, %s::pg_lsn), "
                "written_at = clock_timestamp(), keys_written = keys_written + %s WHERE slot_name = %s",
                (lsn, keys, slot))


def slot_rows(source: Source) -> list[tuple]:
    """Each slot's state beside PostgreSQL's view of it: (slot, active, wal_status — NULL when the
    slot is gone —, WAL bytes it retains, WAL bytes written since the capture's position, seconds
    since the capture wrote it — NULL when nothing was written since —, the position, keys
    written, and the process streaming it — pid, application name, connected since — or NULLs)."""
    return source.query(
        "SELECT s.slot_name, coalesce(r.active, false), r.wal_status, "
        "       coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), r.restart_lsn), 0)::bigint, "
        "       greatest(pg_wal_lsn_diff(pg_current_wal_lsn(), s.written_lsn), 0)::bigint, "
        "       CASE WHEN pg_current_wal_lsn() > s.written_lsn "
        "            THEN extract(epoch FROM clock_timestamp() - s.written_at) END, "
        "       s.written_lsn::text, s.keys_written, r.active_pid, a.application_name, a.backend_start "
        "FROM mvlog.capture_state AS s LEFT JOIN pg_replication_slots AS r ON r.slot_name = s.slot_name "
        "LEFT JOIN pg_stat_activity AS a ON a.pid = r.active_pid")
