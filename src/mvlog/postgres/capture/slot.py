"""Creating the replication slot without a silent wait.

PostgreSQL creates a logical slot only once every transaction of the cluster that holds an
xid (in any database) has ended: until then ``pg_create_logical_replication_slot`` waits, and
``lock_timeout`` does not bound it (pgcopydb #819 saw hours). The creation runs on a connection
of its own with ``statement_timeout`` as its bound, while this side asks PostgreSQL every few
seconds what holds it up (``pg_blocking_pids``) and says so: the pid, its database, how long its
transaction has been open and its state. Past the bound the creation is cancelled and one
sentence says who held it; the caller leaves nothing else made.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg2
import psycopg2.errors

from mvlog.errors import SourceError
from mvlog.postgres.catalog import capture_state
from mvlog.postgres.source import Cursor, Source, fetch_row

SLOT_WAIT = 60.0  # seconds a slot creation may wait for open transactions (source.capture_wait's default)
WATCH_INTERVAL = 2.0  # seconds between looks at what a waiting slot creation waits for


def slot_name(cur: Cursor) -> str:
    """The name of the database's replication slot for mvlog: ``mvlog_<database oid>``."""
    cur.execute("SELECT oid FROM pg_database WHERE datname = current_database()")
    return f"mvlog_{fetch_row(cur)[0]}"


# The sessions the creating backend waits for, oldest transaction first.
BLOCKERS_SQL = """
SELECT a.pid, coalesce(a.datname, '-'), extract(epoch FROM clock_timestamp() - a.xact_start)::float8,
       coalesce(a.state, '-')
FROM pg_stat_activity AS a
WHERE a.pid = ANY(pg_blocking_pids(%s))
ORDER BY a.xact_start
"""


def describe_blocker(blocker: tuple[int, str, float | None, str]) -> str:
    """One session as a wait names it: ``pid 4711 (database shop, open 1m30s, idle in transaction)``."""
    pid, database, seconds, state = blocker
    open_for = "" if seconds is None else f", transaction open {_duration(seconds)}"
    return f"pid {pid} (database {database}{open_for}, {state})"


def _duration(seconds: float) -> str:
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes else f"{rest}s"


def create_slot(source: Source, slot: str, timeout: float, report: Callable[[str], None]) -> str:
    """Create logical slot ``slot`` (pgoutput) and return its start position; while PostgreSQL
    waits for open transactions, say which every :data:`WATCH_INTERVAL` seconds (when they change);
    after ``timeout`` seconds give up with a SourceError naming them (no slot is left).

    On PostgreSQL 17+ the slot is a failover slot: with ``synchronized_standby_slots`` on the
    primary and ``sync_replication_slots`` on a standby, a promoted standby has it. Below 17 a
    failover loses it, and the next capture makes it again and marks the views of logical logs
    for a complete refresh (never a silent gap)."""
    creator = source.connect()
    result: dict[str, object] = {}
    try:
        creator.autocommit = True
        with creator.cursor() as cur:
            cur.execute("SELECT pg_backend_pid(), current_setting('server_version_num')::int >= 170000")
            creator_pid, failover = fetch_row(cur)
            cur.execute("SELECT set_config('statement_timeout', %s, false)", (str(max(1, int(timeout * 1000))),))

        def create() -> None:
            try:
                with creator.cursor() as cur:
                    if failover:
                        cur.execute("SELECT lsn::text FROM pg_create_logical_replication_slot(%s, 'pgoutput', "
                                    "false, false, true)", (slot,))
                    else:
                        cur.execute("SELECT lsn::text FROM pg_create_logical_replication_slot(%s, 'pgoutput')",
                                    (slot,))
                    result["lsn"] = fetch_row(cur)[0]
            except psycopg2.Error as exc:
                result["error"] = exc

        worker = threading.Thread(target=create, name="mvlog-create-slot", daemon=True)
        worker.start()
        blockers: list[tuple[int, str, float | None, str]] = []
        said: set[int] = set()
        while True:
            worker.join(WATCH_INTERVAL)
            if not worker.is_alive():
                break
            found = source.query(BLOCKERS_SQL, (creator_pid,))
            blockers = found or blockers  # the last ones seen: the creation may just have been cancelled
            new = [b for b in found if b[0] not in said]
            if new:
                said.update(b[0] for b in new)
                report(f"creating the replication slot waits for open transactions to end: "
                       f"{'; '.join(describe_blocker(b) for b in found)} "
                       f"(PostgreSQL makes a logical slot only when no older transaction of the cluster "
                       f"holds an xid; giving up after {timeout:g} s, source.capture_wait)")
        error = result.get("error")
        if isinstance(error, psycopg2.errors.QueryCanceled):
            held = "; ".join(describe_blocker(b) for b in blockers) or "a transaction that has since ended"
            raise SourceError(f"creating the replication slot of the logical capture waited {timeout:g} s for "
                              f"open transactions ({held}) and gave up; nothing was created — end or commit "
                              f"them (or raise source.capture_wait) and run 'mvlog apply' again") from None
        if isinstance(error, psycopg2.Error):
            raise source.error(error) from None
        return str(result["lsn"])
    finally:
        creator.close()


@dataclass(frozen=True)
class SlotStatus:
    """The slot as ``mvlog status`` and the metrics show it."""

    slot: str
    active: bool
    wal_status: str | None  # reserved, extended, unreserved, lost (PostgreSQL's words)
    retained_bytes: int  # WAL the slot keeps from being removed
    lag_bytes: int  # WAL written since the capture's position
    lag_seconds: float | None  # since the capture last wrote its position
    written_lsn: str
    keys_written: int
    process: dict[str, Any] | None = None  # the backend streaming the slot: pid, application_name, since

    def as_dict(self) -> dict[str, Any]:
        return {"slot": self.slot, "active": self.active, "wal_status": self.wal_status,
                "retained_bytes": self.retained_bytes, "lag_bytes": self.lag_bytes,
                "lag_seconds": self.lag_seconds, "written_lsn": self.written_lsn, "keys_written": self.keys_written,
                "process": self.process}


def slot_status(source: Source) -> list[SlotStatus]:
    """The slot: retained WAL, the capture's lag, PostgreSQL's verdict on it."""
    rows = capture_state.slot_rows(source)
    return [SlotStatus(slot, bool(active), status if status is not None else "lost", int(retained), int(lag),
                       float(seconds) if seconds is not None else None, written, int(keys),
                       {"pid": pid, "application_name": name, "since": since.isoformat() if since else None}
                       if pid is not None else None)
            for slot, active, status, retained, lag, seconds, written, keys, pid, name, since in rows]
