"""Deadlines on every call mvlog makes to PostgreSQL: a connection that stops answering is
abandoned at its bound, never waited on for ever.

A restart closes sockets, and libpq says so at once. A network partition, a NAT or load balancer
that forgot a connection, a proxy that stopped forwarding, or a server stuck on I/O close
nothing: no error comes, and a call waits for ever. TCP keepalives and ``tcp_user_timeout`` (on
every connection: :func:`libpq_params`) notice a peer that stops acknowledging, but the kernel of
a proxy or a NAT in between goes on acknowledging. So every call that waits for the server is
watched:

- a :class:`BoundedConnection` (every connection a :class:`~mvlog.postgres.source.Source` opens)
  arms the watchdog (:mod:`mvlog.postgres.watchdog`) around each statement, commit and rollback
  with the bound its owner gives (``source.timeouts.statement``, or another where the call is of
  another kind);
- past the deadline the watchdog first asks the server, on a connection of its own, whether the
  call's backend is still computing it (:func:`backend_computing`: active, and not waiting on
  the client): a server that is busy is not a silent one, so the call gets its bound again, until
  ``source.timeouts.long_statement`` in all (a TPC-DS check once ran 49 s, near the statement
  bound of 60 s, with three refreshes beside it). When the server cannot be asked, or the
  backend is idle or waiting on the network, the watchdog *abandons* the connection
  (:mod:`mvlog.postgres.abandoning`): it shuts the socket down, which ends libpq's wait at once,
  and the call raises :class:`Stalled` (transient: the scheduler tries again). Its owner abandons
  its other connections with it (they share the network path, and the work they do together
  cannot finish);
- the server may keep an abandoned connection's backend for ever (a proxy in between keeps its
  socket open), and with it the backend's advisory locks and transaction: the next connection
  this process opens to that server ends those backends (``abandoning.reap``), so that a lock
  held by a connection that will never answer never blocks the next refresh.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import psycopg2
import psycopg2.extensions
import psycopg2.extras

from mvlog.postgres.watchdog import WATCHDOG, Deadline
from mvlog.postgres.watched import Bound, Watchable

if TYPE_CHECKING:
    from mvlog.timeouts import Timeouts

# A backend running a statement, not waiting on its client (ClientRead, ClientWrite: the network).
COMPUTING = ("SELECT state = 'active' AND wait_event_type IS DISTINCT FROM 'Client' FROM pg_stat_activity "
             "WHERE pid = %(pid)s AND coalesce(application_name, '') = %(application)s")


EXTENDED = "source.timeouts.statement"  # the bound whose calls get more while the server computes them


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


class Watched(Watchable):
    """What every connection mvlog opens carries: its state (:class:`~mvlog.postgres.watched.Watchable`)
    and :meth:`watching`, the deadline around one call (a mixin of psycopg2's connection classes)."""

    @contextlib.contextmanager
    def watching(self, what: str = "a statement", bound: Bound | None = None) -> Iterator[None]:
        """Abandon this connection if the block waits on the server longer than ``bound`` (default:
        its owner's, extended while the server computes the call: :class:`Watchdog`); psycopg2's
        error of a call the abandon ended is raised as :class:`Stalled`."""
        if self.abandoned:
            raise Stalled(self.abandoned)
        limit = bound or (self.owner.bound() if self.owner is not None else None)
        if limit is None:
            yield
            return
        # A call of the owner's statement bound gets more while the server computes it; one of its
        # own (a heartbeat, a look at the server) or of another kind (the capture's stream, a ping)
        # is answered at once by a server that answers at all.
        longest = limit
        if bound is None and self.owner is not None and self.extendable and limit.setting == EXTENDED:
            longest = max(limit, self.owner.longest(), key=lambda b: b.seconds)
        arm = WATCHDOG.arm(self, Deadline(what, datetime.now(UTC), limit, longest))
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

    extendable = True

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


def backend_computing(dsn: str, timeouts: Timeouts, application: str, backend: tuple[Any, int, str]) -> bool:
    """Whether ``backend`` (server, pid, application name) is computing a call: asked on a
    connection of its own (``application``), bounded by the connect bound; raises when the
    server cannot be asked."""
    _, pid, name = backend
    params: dict[str, Any] = {**libpq_params(timeouts), "application_name": application}
    look = psycopg2.connect(dsn, connection_factory=BoundedConnection, **params)
    try:
        with look.watching("a look at a long call", bound_of(timeouts, "connect")), look.cursor() as cur:
            cur.execute(COMPUTING, {"pid": pid, "application": name})
            row = cur.fetchone()
        return bool(row and row[0])
    finally:
        look.close()
