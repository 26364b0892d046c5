"""Deadlines on every call mvlog makes to PostgreSQL: a connection that stops answering is
abandoned at its bound, never waited on for ever.

A restart closes sockets, and libpq says so at once. A network partition, a NAT or load balancer
that forgot a connection, a proxy that stopped forwarding, or a server stuck on I/O close
nothing: no error comes, and a call waits for ever. TCP keepalives and ``tcp_user_timeout`` (on
every connection: :func:`libpq_params`) notice a peer that stops acknowledging, but the kernel of
a proxy or a NAT in between goes on acknowledging. So every call that waits for the server is
watched:

- a :class:`BoundedConnection` (every connection a :class:`~mvlog.postgres.source.Source` opens)
  arms the :class:`Watchdog` around each statement, commit and rollback with the bound its owner
  gives (``source.timeouts.statement``, or another where the call is of another kind);
- past the deadline the watchdog *abandons* the connection (:func:`abandon`): it shuts the socket
  down, which ends libpq's wait at once, and the call raises :class:`Stalled` (transient: the
  scheduler tries again). Its owner abandons its other connections with it (they share the
  network path, and the work they do together cannot finish);
- the server may keep an abandoned connection's backend for ever (a proxy in between keeps its
  socket open), and with it the backend's advisory locks and transaction: the next connection
  this process opens to that server ends those backends (:func:`reap`), so that a lock held by a
  connection that will never answer never blocks the next refresh.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import math
import os
import socket
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import psycopg2
import psycopg2.extensions
import psycopg2.extras

if TYPE_CHECKING:
    from mvlog.timeouts import Timeouts

REAP_WAIT_MS = 5000  # how long the reaper waits for an abandoned backend to end (its slot, its locks)
REAP_SLACK = 5.0  # seconds of clock and start-up slack when telling an abandoned backend from a new one
REAP_FORGET = 3600.0  # an abandoned backend not found within this is forgotten
_KEPT = ("FROM pg_stat_activity WHERE pid = %(pid)s AND coalesce(application_name, '') = %(application)s "
         "AND backend_start <= now() - make_interval(secs => %(age)s)")
REAP_WAITING = "SELECT pid, pg_terminate_backend(pid, %(wait)s) " + _KEPT
REAP = "SELECT pid, pg_terminate_backend(pid) " + _KEPT


class Bound(NamedTuple):
    """How long a call may wait, and the setting that says so (named in the error)."""

    seconds: float
    setting: str


def bound_of(timeouts: Timeouts, name: str) -> Bound:
    """The bound ``source.timeouts.<name>``."""
    return Bound(float(getattr(timeouts, name)), f"source.timeouts.{name}")


def libpq_params(timeouts: Timeouts) -> dict[str, int]:
    """libpq's keywords for ``timeouts``: the connect bound (connect and login), and a silent peer
    noticed within the keepalive bound (idle a third of it, then four probes a sixth apart; data
    unacknowledged for that long fails too)."""
    keepalive = timeouts.keepalive
    return {"connect_timeout": max(2, math.ceil(timeouts.connect)),  # libpq takes 1 as 2
            "keepalives": 1, "keepalives_idle": max(1, int(keepalive / 3)),
            "keepalives_interval": max(1, int(keepalive / 6)), "keepalives_count": 4,
            "tcp_user_timeout": max(1000, int(keepalive * 1000))}


class Stalled(psycopg2.OperationalError):
    """A call PostgreSQL did not answer within its bound: its connection was abandoned."""


class Owner(Protocol):
    """What a watched connection asks of the :class:`~mvlog.postgres.source.Source` that opened it."""

    def bound(self) -> Bound: ...

    def abandon(self, reason: str) -> None: ...


class Watched:
    """What every connection mvlog opens carries: its owner, whether (and why) it was abandoned,
    and :meth:`watching`, the deadline around one call (a mixin of psycopg2's connection classes)."""

    owner: Owner | None = None
    abandoned: str | None = None
    opened_at: float = 0.0
    backend: tuple[tuple[str, str, str], int, str] | None = None  # server, pid, application name
    fd_lock: threading.Lock

    def watch_init(self) -> None:
        self.opened_at = time.monotonic()
        self.fd_lock = threading.Lock()

    @contextlib.contextmanager
    def watching(self, what: str = "a statement", bound: Bound | None = None) -> Iterator[None]:
        """Abandon this connection if the block waits on the server longer than ``bound`` (default:
        its owner's); psycopg2's error of a call the abandon ended is raised as :class:`Stalled`."""
        if self.abandoned:
            raise Stalled(self.abandoned)
        limit = bound or (self.owner.bound() if self.owner is not None else None)
        if limit is None:
            yield
            return
        sent = datetime.now(UTC)
        reason = (f"PostgreSQL stopped answering: {what} sent at {sent:%H:%M:%S} UTC had no reply within "
                  f"{limit.seconds:g} s ({limit.setting}); its connection was abandoned")
        arm = WATCHDOG.arm(self, limit.seconds, reason)
        try:
            yield
        except psycopg2.Error:
            if self.abandoned:
                raise Stalled(self.abandoned) from None
            raise
        finally:
            WATCHDOG.disarm(arm)


class BoundedCursor(psycopg2.extensions.cursor):
    """A cursor whose every round trip is watched (:meth:`Watched.watching`)."""

    def _watching(self) -> contextlib.AbstractContextManager[None]:
        conn = self.connection
        return conn.watching() if isinstance(conn, Watched) else contextlib.nullcontext()

    def execute(self, query: Any, vars: Any = None) -> None:
        with self._watching():
            return super().execute(query, vars)

    def executemany(self, query: Any, vars_list: Any) -> None:
        with self._watching():
            return super().executemany(query, vars_list)

    def callproc(self, procname: Any, parameters: Any = None) -> Any:
        with self._watching():
            return super().callproc(procname, parameters)

    def copy_expert(self, sql: Any, file: Any, size: int = 8192) -> None:
        with self._watching():
            return super().copy_expert(sql, file, size)


class BoundedConnection(Watched, psycopg2.extensions.connection):
    """psycopg2's connection, watched: statements (through :class:`BoundedCursor`), commit and rollback."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.watch_init()
        self.cursor_factory = BoundedCursor

    def commit(self) -> None:
        with self.watching("a commit"):
            super().commit()

    def rollback(self) -> None:
        with self.watching("a rollback"):
            super().rollback()

    def close(self) -> None:
        with self.fd_lock:  # never while the watchdog holds the socket's descriptor
            super().close()


class BoundedReplicationConnection(Watched, psycopg2.extras.LogicalReplicationConnection):
    """psycopg2's logical replication connection, abandonable: the stream watches its own silence
    (:mod:`mvlog.postgres.capture.stream`) and the start of replication (:meth:`Watched.watching`)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.watch_init()

    def close(self) -> None:
        with self.fd_lock:
            super().close()


@dataclass(order=True)
class _Arm:
    deadline: float
    seq: int
    conn: Watched = field(compare=False)
    reason: str = field(compare=False)
    done: bool = field(default=False, compare=False)


class Watchdog:
    """One thread that abandons connections whose calls passed their deadlines."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[_Arm] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, conn: Watched, seconds: float, reason: str) -> _Arm:
        arm = _Arm(time.monotonic() + seconds, next(self._seq), conn, reason)
        with self._cond:
            heapq.heappush(self._heap, arm)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="mvlog-deadlines", daemon=True)
                self._thread.start()
            elif self._heap[0] is arm:
                self._cond.notify()
        return arm

    def disarm(self, arm: _Arm) -> None:
        with self._cond:
            arm.done = True

    def _run(self) -> None:
        while True:
            expired: list[_Arm] = []
            with self._cond:
                while self._heap and self._heap[0].done:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait(60)
                    continue
                wait = self._heap[0].deadline - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                while self._heap and (self._heap[0].done or self._heap[0].deadline <= time.monotonic()):
                    arm = heapq.heappop(self._heap)
                    if not arm.done:
                        arm.done = True
                        expired.append(arm)
            for arm in expired:
                abandon(arm.conn, arm.reason)


WATCHDOG = Watchdog()


# -- abandoning, and ending the backends the server kept ------------------------------------------


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
_live: weakref.WeakSet[Watched] = weakref.WeakSet()  # every watched connection open in this process


def _server(conn: Any) -> tuple[str, str, str]:
    info = conn.info
    return (str(info.host), str(info.port), str(info.dbname))


def register(conn: Watched, owner: Owner) -> None:
    """Make ``conn`` (just opened) one of ``owner``'s, and one that :func:`abandon_all` reaches."""
    info = conn.info  # type: ignore[attr-defined]
    conn.backend = (_server(conn), int(info.backend_pid), str(info.parameter_status("application_name") or ""))
    conn.owner = owner
    with _kept_lock:
        _live.add(conn)


def abandon(conn: Watched, reason: str, cascade: bool = True) -> None:
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


def reap(conn: BoundedConnection) -> list[int]:
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
