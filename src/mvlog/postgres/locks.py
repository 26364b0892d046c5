"""The advisory locks that keep two refreshes of one view apart: taking one with a bounded
wait, and naming the process that holds one (:func:`view_locks` holds
them for a refresh unit)."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator, Sequence

import psycopg2.errors
import psycopg2.extensions

from mvlog.errors import ConcurrentRefreshError
from mvlog.postgres.deadlines import BoundedConnection, bound_of
from mvlog.postgres.heartbeat import Heartbeat
from mvlog.postgres.source import Cursor, Source, fetch_row

VIEW_LOCK_NAMESPACE = 0x6D767677  # "mvvw": advisory lock held for the whole refresh of a view
# The application_name of the session holding view locks: what another process reports as the holder.
LOCK_HOLDER = f"mvlog pid {os.getpid()} on {socket.gethostname()}"


# The lock session's TCP keepalives, as PostgreSQL sends them: a lock whose holder's host died (no
# FIN, no RST) is released after about 10 + 5 * 3 s instead of the kernel's default two hours, so
# another scheduler can take the view over. (Ignored on a Unix socket, where death is seen at once.)
LOCK_KEEPALIVES = {"tcp_keepalives_idle": "10", "tcp_keepalives_interval": "5", "tcp_keepalives_count": "3"}


def keep_lock_session_alive(cur: Cursor) -> None:
    """Make the server notice a dead holder of this session's locks within seconds."""
    for name, value in LOCK_KEEPALIVES.items():
        cur.execute("SELECT set_config(%s, %s, false)", (name, value))


def close_releasing_locks(conn: psycopg2.extensions.connection) -> None:
    """Close ``conn`` after releasing its session's advisory locks (a view's, the capture's, the
    stamping locks). Closing alone frees them only when the server has ended the session, a
    moment after the client went: a refresh of the same views right after, or the record of
    views found unchanged, found them still held."""
    with contextlib.suppress(psycopg2.Error):
        conn.rollback()  # a transaction an error aborted would refuse the unlock
        with conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock_all()")
    conn.close()


def take_view_lock(cur: Cursor, name: str, wait: float) -> bool:
    """Take a view's lock, waiting up to ``wait`` seconds for its holder; False if it stayed held."""
    if wait <= 0:
        cur.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))", (VIEW_LOCK_NAMESPACE, name))
        return bool(fetch_row(cur)[0])
    cur.execute("SELECT set_config('lock_timeout', %s, false)", (f"{max(int(wait * 1000), 1)}ms",))
    try:
        cur.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (VIEW_LOCK_NAMESPACE, name))
    except psycopg2.errors.LockNotAvailable:
        return False
    finally:
        cur.execute("SELECT set_config('lock_timeout', '0', false)")
    return True


def take_view_locks_for_transaction(cur: Cursor, names: Sequence[str]) -> bool:
    """Take the locks of views ``names`` until ``cur``'s transaction ends, without waiting; False
    if another process holds one (those taken before it stay until the transaction ends). A
    transaction that records views without refreshing them holds their locks: it never updates a
    view's row between a refresh's snapshot and that refresh's record (a serialization failure)."""
    for name in sorted(names):
        cur.execute("SELECT pg_try_advisory_xact_lock(%s, hashtext(%s))", (VIEW_LOCK_NAMESPACE, name))
        if not fetch_row(cur)[0]:
            return False
    return True


def view_lock_holder(cur: Cursor, name: str) -> str:
    """Who holds a view's lock, as its PostgreSQL session says (mvlog names its lock sessions
    after the host and process)."""
    cur.execute(
        """
        SELECT a.application_name, host(a.client_addr), l.pid, a.backend_start
        FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
          AND l.classid::bigint = %s AND l.objid::bigint = hashtext(%s)::bigint & 4294967295
        """,
        (VIEW_LOCK_NAMESPACE, name),
    )
    row = cur.fetchone()
    if row is None:
        return "another process (it has just finished)"
    application, client, backend, since = row
    when = f" since {since:%Y-%m-%d %H:%M:%S %Z}" if since else ""
    if application and application.startswith("mvlog "):
        return application.removeprefix("mvlog ") + when
    return f"PostgreSQL backend {backend}{f' from {client}' if client else ''}{when}"


@contextlib.contextmanager
def view_locks(source: Source, names: Sequence[str], wait: float = 0.0) -> Iterator[None]:
    """Hold the locks of views ``names`` for the block, all of them or none, on a session of their
    own. A view another process holds is waited for, up to ``wait`` seconds in all; then
    :class:`ConcurrentRefreshError` names the holder.

    While the block runs, the lock session is asked for a reply every third of
    ``source.timeouts.keepalive`` (:class:`~mvlog.postgres.heartbeat.Heartbeat`): a session that
    does not answer within it abandons the source's connections, so a refresh whose path to
    PostgreSQL went silent is given up within that bound, even while it waits on Spark."""
    conn = source.connect(application_name=LOCK_HOLDER[:63])  # what another process reports
    conn.autocommit = True
    deadline = time.monotonic() + wait
    try:
        with source.translated(), source.bounded("statement", wait), conn.cursor() as cur:
            keep_lock_session_alive(cur)
            for name in sorted(names):  # one order everywhere: two groups never wait for each other
                if not take_view_lock(cur, name, deadline - time.monotonic()):
                    raise ConcurrentRefreshError(name, view_lock_holder(cur, name))
        if isinstance(conn, BoundedConnection):
            keepalive = bound_of(source.timeouts, "keepalive")
            with Heartbeat(conn, keepalive.seconds / 3, keepalive):
                yield
        else:
            yield
    finally:
        with source.bounded("keepalive"):  # a session that went silent is not waited on for a statement's bound
            close_releasing_locks(conn)
