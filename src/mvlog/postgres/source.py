"""PostgreSQL access: connections, transactions, table lookup, query description, statistics.

The one place that speaks psycopg2: :mod:`mvlog.postgres.catalog` (mvlog's own tables) and
:mod:`mvlog.postgres.logs` (the materialized view logs) talk to PostgreSQL through a
:class:`Source`. Identifiers and values are composed with :mod:`psycopg2.sql`, never
pasted into strings.
"""

from __future__ import annotations

import contextlib
import re
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.errors
import psycopg2.extensions
from psycopg2 import sql

from mvlog.errors import ConfigError, SourceError, redact
from mvlog.model import MVLOG_SCHEMA, ColumnStats, LogInfo, TableInfo, checked_snapshot_id
from mvlog.postgres import abandoning, deadlines
from mvlog.postgres.abandoning import kept_backends, reap
from mvlog.postgres.deadlines import Bound, BoundedConnection, bound_of, libpq_params
from mvlog.postgres.inspection import FAST_SETTINGS, NO_JIT, CatalogInspection, Cursor, fetch_row
from mvlog.postgres.liveness import is_transient, server_gone, snapshot_gone
from mvlog.postgres.watched import Watchable
from mvlog.timeouts import Timeouts

# The planner's estimate of a table's rows (%(oid)s); a partitioned table's are its leaves' rows.
ESTIMATED_ROWS = ("SELECT coalesce(sum(greatest(m.reltuples, 0)), 0) FROM pg_class AS m WHERE m.relkind = 'r' "
                  "AND (m.oid = %(oid)s OR m.oid IN (SELECT t.relid FROM pg_partition_tree(%(oid)s) AS t))")



def sql_dir() -> Path:
    """The directory of mvlog's .sql files (packaged, or the repository's ``sql/``)."""
    packaged = resources.files("mvlog") / "resources" / "sql"
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[3] / "sql"


def read_sql(name: str) -> str:
    return (sql_dir() / name).read_text(encoding="utf-8")


def dsn_password(dsn: str) -> str | None:
    """The password inside a libpq URI or key=value DSN, if any (parsed by libpq itself)."""
    try:
        return psycopg2.extensions.parse_dsn(dsn).get("password") or None
    except Exception:  # unparsable: find it the crude way so it can still be hidden
        match = re.search(r"(?:://[^:/@]*:([^@/]+)@)|(?:password\s*=\s*(\S+))", dsn)
        return (match.group(1) or match.group(2)) if match else None


def dsn_secrets(dsn: str) -> list[str]:
    """Strings of ``dsn`` that must never be printed: its password."""
    password = dsn_password(dsn)
    return [password] if password else []


def _quietly(hook: Callable[[str], None], reason: str) -> None:
    with contextlib.suppress(Exception):
        hook(reason)


def table_identifier(table: TableInfo) -> sql.Identifier:
    return sql.Identifier(table.schema, table.name)


def log_identifier(log: LogInfo) -> sql.Identifier:
    """The log table ``mvlog.<log_name>``."""
    return sql.Identifier(MVLOG_SCHEMA, log.log_name)


class Source(CatalogInspection):
    """The PostgreSQL side of mvlog; owns one connection (opened on first use), and knows every
    other it opened: each call on them is bounded (:mod:`mvlog.postgres.deadlines`), and when one
    stops answering they are all given up together."""

    def __init__(self, dsn: str, secrets: Sequence[str] = (), read_only: bool = False,
                 application_name: str = "mvlog", timeouts: Timeouts | None = None):
        self.dsn = dsn
        self.secrets = [s for s in secrets if s]
        self.read_only = read_only  # every session refuses writes (a dashboard changes nothing)
        self.application_name = application_name
        self.timeouts = timeouts or Timeouts()
        self._conn: psycopg2.extensions.connection | None = None
        self._opened: weakref.WeakSet[deadlines.Watched] = weakref.WeakSet()
        self._bounds = threading.local()  # a thread's bound for calls of another kind (:meth:`bounded`)
        self._on_abandon: list[Callable[[str], None]] = []
        self._lock = threading.Lock()

    # -- errors and connections ------------------------------------------------------

    def describe_error(self, exc: psycopg2.Error) -> str:
        """PostgreSQL's message of ``exc`` as one line, without a secret."""
        message = (getattr(exc, "pgerror", None) or str(exc) or exc.__class__.__name__).strip()
        lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
        first = lines[0] if lines else message
        first = re.sub(r"^(ERROR|FATAL):\s+", "", first)
        # libpq's "connection to server at ... failed: FATAL:  reason" -> keep the reason
        first = re.sub(r'^connection to server at "([^"]*)" \(([^)]*)\), port (\d+) failed: (FATAL:\s+)?',
                       r"\1:\3: ", first)
        first = re.sub(r'^connection to server at "([^"]*)", port (\d+) failed: (FATAL:\s+)?', r"\1:\2: ", first)
        return redact(first.rstrip("."), self.secrets)

    def error(self, exc: psycopg2.Error, prefix: str = "PostgreSQL") -> SourceError:
        """``exc`` as a SourceError; a lost or refused connection (and a serialization failure,
        an administrator's shutdown, a server restarting) is transient: the same call may succeed
        later (:func:`is_transient`)."""
        if isinstance(exc, deadlines.Stalled):
            return SourceError(str(exc), transient=True)
        if snapshot_gone(exc):
            return SourceError(f"{prefix}: the refresh's snapshot is gone: the connection that held it was lost "
                               f"({self.describe_error(exc)})", transient=True)
        message = self.describe_error(exc)
        if message.endswith("timeout expired"):  # libpq's connect_timeout: say which setting it was
            message += f" (no answer within {self.timeouts.connect:g} s, source.timeouts.connect)"
        return SourceError(f"{prefix}: {message}", transient=is_transient(exc))

    def connect(self, **kwargs: object) -> psycopg2.extensions.connection:
        """A new connection, bounded (:mod:`mvlog.postgres.deadlines`: connecting, a silent peer,
        each call); any failure becomes one clear SourceError. The backends of connections this
        process abandoned to the same server are ended first (their locks with them)."""
        try:
            # libpq keywords (Any: to the stubs, a dict of objects might fill connect's factory parameters)
            params: dict[str, Any] = {**libpq_params(self.timeouts), "application_name": self.application_name,
                                      "connection_factory": BoundedConnection, **kwargs}
            if self.read_only:
                options = psycopg2.extensions.parse_dsn(self.dsn).get("options", "")
                params["options"] = f"{options} -c default_transaction_read_only=on".strip()
            conn = psycopg2.connect(self.dsn, **params)
        except psycopg2.ProgrammingError as exc:  # an unparsable DSN
            raise ConfigError(f"source.dsn is not a valid PostgreSQL connection string: "
                              f"{self.describe_error(exc)}") from None
        except psycopg2.Error as exc:
            raise self.error(exc, "cannot connect to PostgreSQL") from None
        if isinstance(conn, deadlines.Watched):
            abandoning.register(conn, self)
            with self._lock:
                self._opened.add(conn)
            if isinstance(conn, BoundedConnection) and kept_backends(conn):
                reap(conn)
        return conn

    # -- deadlines (the Owner of its connections, to mvlog.postgres.deadlines) ---------------

    def bound(self) -> Bound:
        """How long a call of this thread on this source's connections may wait: the bound of
        :meth:`bounded` around it, else ``source.timeouts.statement``."""
        return getattr(self._bounds, "bound", None) or bound_of(self.timeouts, "statement")

    @contextlib.contextmanager
    def bounded(self, name: str, seconds: float | None = None) -> Iterator[None]:
        """Calls of this thread in the block are bounded by ``source.timeouts.<name>`` (plus
        ``seconds`` they are known to wait on purpose: a lock's wait, the capture's), not by the
        statement bound."""
        bound = bound_of(self.timeouts, name)
        if seconds:
            bound = Bound(bound.seconds + seconds, bound.setting)
        previous = getattr(self._bounds, "bound", None)
        self._bounds.bound = bound
        try:
            yield
        finally:
            self._bounds.bound = previous

    def longest(self) -> Bound:
        """How long a call PostgreSQL is still computing may run in all: ``source.timeouts.long_statement``."""
        return bound_of(self.timeouts, "long_statement")

    def computing(self, conn: Watchable) -> bool:
        """Whether ``conn``'s backend is computing its call, asked on a connection of its own (not
        one of this source's, which a stall abandons with them) bounded by the connect bound."""
        return conn.backend is not None and deadlines.backend_computing(
            self.dsn, self.timeouts, f"{self.application_name}-look", conn.backend)

    def abandon(self, reason: str) -> None:
        """Give up every connection this source holds (one of them stopped answering, or the
        process is stopping), and tell those who asked (:meth:`on_abandon`: a refresh interrupts its
        Spark work). The main connection is opened again at its next use."""
        with self._lock:
            opened = list(self._opened)
            hooks = list(self._on_abandon)
        for conn in opened:
            abandoning.abandon(conn, reason, cascade=False)
        for hook in hooks:  # on threads of their own: the watchdog's thread never waits on Spark
            threading.Thread(target=_quietly, args=(hook, reason), name="mvlog-abandoned", daemon=True).start()

    @contextlib.contextmanager
    def on_abandon(self, hook: Callable[[str], None]) -> Iterator[None]:
        """Call ``hook(reason)`` (from another thread) if this source's connections are abandoned
        while the block runs."""
        with self._lock:
            self._on_abandon.append(hook)
        try:
            yield
        finally:
            with self._lock:
                self._on_abandon.remove(hook)

    def ping(self) -> None:
        """A round trip on the main connection, answered within the connect bound (else it is
        abandoned, and the next call opens another)."""
        with self.bounded("connect"):
            self.query("SELECT 1")

    @property
    def conn(self) -> psycopg2.extensions.connection:
        """The main connection, opened again when the server has closed it or it was abandoned
        (a long-lived process outlives server restarts and stalls: the scheduler, the capture)."""
        if self._conn is not None and (getattr(self._conn, "abandoned", None) or server_gone(self._conn)):
            self.close()
        if self._conn is None:
            self._conn = self.connect()
        return self._conn

    def close(self) -> None:
        if self._conn is not None and not self._conn.closed:
            with contextlib.suppress(psycopg2.Error):
                self._conn.close()
        self._conn = None

    def _end(self, conn: psycopg2.extensions.connection) -> None:
        """Roll back ``conn``'s transaction after an error; a connection the error broke is
        forgotten (the next use opens a new one) instead of failing the rollback."""
        if not conn.closed:
            with contextlib.suppress(psycopg2.Error):
                conn.rollback()
        if conn.closed and conn is self._conn:
            self._conn = None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Cursor]:
        """A cursor in one transaction of the main connection; errors roll back."""
        conn = self.conn
        try:
            with conn.cursor() as cur:
                yield cur
            conn.commit()
        except psycopg2.Error as exc:
            self._end(conn)
            raise self.error(exc) from None
        except BaseException:
            self._end(conn)
            raise

    @contextlib.contextmanager
    def inspection(self) -> Iterator[Cursor]:
        """A cursor on the main connection whose transaction is always rolled back, without JIT
        (NO_JIT: its checks are small, and change nothing; psycopg2 errors pass through, for the
        caller)."""
        conn = self.conn
        try:
            with conn.cursor() as cur:
                cur.execute(NO_JIT)
                yield cur
        finally:
            self._end(conn)

    @contextlib.contextmanager
    def translated(self, prefix: str = "PostgreSQL") -> Iterator[None]:
        """PostgreSQL's errors raised in the block as SourceErrors (:meth:`error`)."""
        try:
            yield
        except psycopg2.Error as exc:
            raise self.error(exc, prefix) from None

    @contextlib.contextmanager
    def validation(self, needs: str) -> Iterator[Cursor]:
        """:meth:`inspection` with PostgreSQL's errors worded: a missing right is a SourceError that
        says what the work ``needs``; any other error a ConfigError (the configuration asks for
        something the database refuses)."""
        try:
            with self.inspection() as cur:
                yield cur
        except psycopg2.errors.InsufficientPrivilege as exc:
            raise SourceError(f"PostgreSQL: {self.describe_error(exc)} ({needs})") from None
        except psycopg2.Error as exc:
            raise ConfigError(f"PostgreSQL: {self.describe_error(exc)}") from None

    def query(self, statement: sql.Composable | str, params: Sequence | dict | None = None) -> list[tuple]:
        with self.transaction() as cur:
            cur.execute(statement, params)
            return cur.fetchall() if cur.description else []

    @contextlib.contextmanager
    def snapshot_transaction(self, snapshot: str, fast: bool = False) -> Iterator[Cursor]:
        """A read-write REPEATABLE READ transaction that sees the exported ``snapshot``; commits on
        success (``fast``: a fast refresh's small work, planned as FAST_SETTINGS say)."""
        checked_snapshot_id(snapshot)
        conn = self.connect()
        try:
            conn.set_session(isolation_level="REPEATABLE READ")
            with conn.cursor() as cur:
                cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot,))
                if fast:
                    for setting in FAST_SETTINGS:
                        cur.execute(setting)
                yield cur
            conn.commit()
        except psycopg2.Error as exc:
            raise self.error(exc) from None
        finally:
            conn.close()

    @contextlib.contextmanager
    def exported_snapshot(self) -> Iterator[tuple[str, Cursor]]:
        """A read-only REPEATABLE READ transaction and its exported snapshot id (for Spark's JDBC
        reads to see the same data), held until the block ends."""
        conn = self.connect()
        try:
            conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
            with conn.cursor() as cur:
                cur.execute("SELECT pg_export_snapshot()")
                yield checked_snapshot_id(fetch_row(cur)[0]), cur
        except psycopg2.Error as exc:
            raise self.error(exc) from None
        finally:
            conn.close()

    def column_stats(self, log: LogInfo, column: str) -> ColumnStats | None:
        """The planner statistics of one column of a logged table; None before it was analyzed."""
        rows = self.query(
            f"""
            SELECT s.histogram_bounds::text::text[], ({ESTIMATED_ROWS}), s.n_distinct
            FROM pg_stats s
            JOIN pg_class c ON c.oid = %(oid)s
            WHERE s.schemaname = %(schema)s AND s.tablename = %(name)s AND s.attname = %(column)s
              AND s.inherited = (c.relkind = 'p')  -- a partitioned table has only its partitions' rows
            """,
            {"oid": log.table_oid, "schema": log.table_schema, "name": log.table_name, "column": column},
        )
        if not rows or rows[0][0] is None:
            return None
        histogram, reltuples, n_distinct = rows[0]
        reltuples = max(float(reltuples), 0.0)
        distinct = float(n_distinct) if n_distinct >= 0 else -float(n_distinct) * reltuples
        return ColumnStats(tuple(histogram), reltuples, distinct)
