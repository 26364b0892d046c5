"""Abandoning a connection that stopped answering, and ending the backends the server kept for
it (its advisory locks and transaction with them) from the next connection this process opens
to that server (:mod:`mvlog.postgres.deadlines`)."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg2
import psycopg2.extensions

if TYPE_CHECKING:
    from mvlog.postgres.watched import Owner, Watchable

REAP_WAIT_MS = 5000  # how long the reaper waits for an abandoned backend to end (its slot, its locks)
REAP_SLACK = 5.0  # seconds of clock and start-up slack when telling an abandoned backend from a new one
REAP_FORGET = 3600.0  # an abandoned backend not found within this is forgotten
_KEPT = ("FROM pg_stat_activity WHERE pid = %(pid)s AND coalesce(application_name, '') = %(application)s "
         "AND backend_start <= now() - make_interval(secs => %(age)s)")
REAP_WAITING = "SELECT pid, pg_terminate_backend(pid, %(wait)s) " + _KEPT
REAP = "SELECT pid, pg_terminate_backend(pid) " + _KEPT


@dataclass(frozen=True)
class _Kept:
    """The backend a server may still keep for a connection this process abandoned."""

    server: tuple[str, str, str]  # host, port, database
    pid: int
    application: str
    opened_at: float  # monotonic: when the connection was opened
    abandoned_at: float


_kept: list[_Kept] = []
_kept_lock = threading.Lock()
_live: weakref.WeakSet[Watchable] = weakref.WeakSet()  # every watched connection open in this process


def _server(conn: Any) -> tuple[str, str, str]:
    info = conn.info
    return (str(info.host), str(info.port), str(info.dbname))


def register(conn: Watchable, owner: Owner) -> None:
    """Make ``conn`` (just opened) one of ``owner``'s, and one that :func:`abandon_all` reaches."""
    info = conn.info  # type: ignore[attr-defined]
    conn.backend = (_server(conn), int(info.backend_pid), str(info.parameter_status("application_name") or ""))
    conn.owner = owner
    with _kept_lock:
        _live.add(conn)


def abandon(conn: Watchable, reason: str, cascade: bool = True) -> None:
    """Give ``conn`` up: shut its socket down (a call waiting on it ends at once, and every later
    one raises :class:`Stalled` with ``reason``), remember its backend for :func:`reap`, and (with
    ``cascade``) have its owner abandon its other connections."""
    with _kept_lock:
        if conn.abandoned:
            return
        conn.abandoned = reason
    if conn.backend is not None:
        with _kept_lock:
            _kept.append(_Kept(*conn.backend, conn.opened_at, time.monotonic()))
    with conn.fd_lock, contextlib.suppress(psycopg2.Error, OSError, ValueError):
        if not getattr(conn, "closed", 1):
            sock = socket.socket(fileno=os.dup(conn.fileno()))  # type: ignore[attr-defined]
            try:
                sock.shutdown(socket.SHUT_RDWR)
            finally:
                sock.close()
    if cascade and conn.owner is not None:
        conn.owner.abandon(reason)


def abandon_all(reason: str) -> None:
    """Abandon every connection open in this process (a scheduler stopping while a call waits)."""
    with _kept_lock:
        live = list(_live)
    for conn in live:
        abandon(conn, reason)


def kept_backends(conn: Any) -> bool:
    """Whether this process abandoned connections to ``conn``'s server whose backends may live on."""
    with _kept_lock:
        return bool(_kept) and any(kept.server == _server(conn) for kept in _kept)


def reap(conn: psycopg2.extensions.connection) -> list[int]:
    """End the backends the server still keeps for connections this process abandoned (their locks
    and transactions with them), from ``conn`` (just opened to the same server); the pids ended.
    A backend is ended only if it has the abandoned connection's application name and started no
    later than that connection opened (a new backend that got the same pid is left alone)."""
    server = _server(conn)
    now = time.monotonic()
    with _kept_lock:
        mine = [kept for kept in _kept if kept.server == server]
        _kept[:] = [kept for kept in _kept if kept.server != server and now - kept.abandoned_at < REAP_FORGET]
    ended: list[int] = []
    if not mine:
        return ended
    waits = conn.server_version >= 140000  # pg_terminate_backend(pid, timeout): waits until it has ended
    try:
        with conn.cursor() as cur:
            for kept in mine:
                cur.execute(REAP_WAITING if waits else REAP,
                            {"wait": REAP_WAIT_MS, "pid": kept.pid, "application": kept.application,
                             "age": max(0.0, now - kept.opened_at - REAP_SLACK)})
                ended += [pid for pid, done in cur.fetchall() if done]
        conn.commit()
    except psycopg2.Error:
        with contextlib.suppress(psycopg2.Error):
            conn.rollback()  # not allowed to end them (another role's): the server ends them in its time
    return ended
