"""PostgreSQL access: connections, transactions, table lookup, query description, statistics.

The one place that speaks psycopg2: :mod:`mvlog.postgres.catalog` (mvlog's own tables) and
:mod:`mvlog.postgres.logs` (the materialized view logs) talk to PostgreSQL through a
:class:`Source`. Identifiers and values are composed with :mod:`psycopg2.sql`, never
pasted into strings.
"""

from __future__ import annotations

import contextlib
import fnmatch
import re
from collections.abc import Iterator, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.errors
import psycopg2.extensions
from psycopg2 import sql

from mvlog.errors import ConfigError, SourceError, redact
from mvlog.model import MVLOG_SCHEMA, Column, ColumnStats, LogInfo, TableInfo, checked_snapshot_id
from mvlog.postgres.liveness import is_transient, server_gone, snapshot_gone
from mvlog.sql.expansion import PgView

Cursor = psycopg2.extensions.cursor

# The planner's estimate of a table's rows (%(oid)s); a partitioned table's are its leaves' rows.
ESTIMATED_ROWS = ("SELECT coalesce(sum(greatest(m.reltuples, 0)), 0) FROM pg_class AS m WHERE m.relkind = 'r' "
                  "AND (m.oid = %(oid)s OR m.oid IN (SELECT t.relid FROM pg_partition_tree(%(oid)s) AS t))")

# What a relation that is not a table is, as a reason it cannot have a log (by pg_class.relkind).
NOT_A_TABLE = {
    "v": "is a view: log the tables it reads (a view query that reads it is expanded to them)",
    "m": "is a materialized view: mvlog cannot log it; log the tables its query reads and make it an mvlog view",
    "f": "is a foreign table: its rows change outside this database, so mvlog cannot log them",
}


def fetch_row(cur: Cursor) -> tuple[Any, ...]:
    """The row of a statement that always returns one (an aggregate or function call without
    FROM, a lookup of a row known to exist)."""
    row = cur.fetchone()
    assert row is not None, "the statement returned no row"
    return row


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


def table_identifier(table: TableInfo) -> sql.Identifier:
    return sql.Identifier(table.schema, table.name)


def log_identifier(log: LogInfo) -> sql.Identifier:
    """The log table ``mvlog.<log_name>``."""
    return sql.Identifier(MVLOG_SCHEMA, log.log_name)


class Source:
    """The PostgreSQL side of mvlog; owns one connection (opened on first use)."""

    def __init__(self, dsn: str, secrets: Sequence[str] = ()):
        self.dsn = dsn
        self.secrets = [s for s in secrets if s]
        self._conn: psycopg2.extensions.connection | None = None

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
        if snapshot_gone(exc):
            return SourceError(f"{prefix}: the refresh's snapshot is gone: the connection that held it was lost "
                               f"({self.describe_error(exc)})", transient=True)
        return SourceError(f"{prefix}: {self.describe_error(exc)}", transient=is_transient(exc))

    def connect(self, **kwargs: object) -> psycopg2.extensions.connection:
        """A new connection; any failure becomes one clear SourceError."""
        try:
            # libpq keywords (Any: to the stubs, a dict of objects might fill connect's factory parameters)
            params: dict[str, Any] = {"connect_timeout": 10, "application_name": "mvlog", **kwargs}
            conn = psycopg2.connect(self.dsn, **params)
        except psycopg2.ProgrammingError as exc:  # an unparsable DSN
            raise ConfigError(f"source.dsn is not a valid PostgreSQL connection string: "
                              f"{self.describe_error(exc)}") from None
        except psycopg2.Error as exc:
            raise self.error(exc, "cannot connect to PostgreSQL") from None
        return conn

    @property
    def conn(self) -> psycopg2.extensions.connection:
        """The main connection, opened again when the server has closed it (a long-lived process
        outlives server restarts: the scheduler, the capture)."""
        if self._conn is not None and server_gone(self._conn):
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
        """A cursor on the main connection whose transaction is always rolled back: for checks
        that must change nothing (psycopg2 errors pass through, for the caller to word)."""
        conn = self.conn
        try:
            with conn.cursor() as cur:
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
    def snapshot_transaction(self, snapshot: str) -> Iterator[Cursor]:
        """A read-write REPEATABLE READ transaction that sees the exported ``snapshot``; commits on success."""
        checked_snapshot_id(snapshot)
        conn = self.connect()
        try:
            conn.set_session(isolation_level="REPEATABLE READ")
            with conn.cursor() as cur:
                cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot,))
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

    # -- tables and queries ------------------------------------------------------------

    def tables_matching(self, cur: Cursor, schema: str, pattern: str) -> list[str]:
        """Names of the tables (not partitions) in ``schema`` matching the shell-style ``pattern``."""
        cur.execute("SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = %s)", (schema,))  # as matched below
        if not fetch_row(cur)[0]:
            raise ConfigError(f"schema {schema} does not exist")
        cur.execute(
            """
            SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY c.relname
            """,
            (schema,),
        )
        return [name for (name,) in cur.fetchall() if fnmatch.fnmatchcase(name, pattern)]

    def relation_on_path(self, cur: Cursor, name: str) -> str | None:
        """The qualified name of the relation (table, view, …) an unqualified ``name`` resolves to
        on the search path, or None."""
        cur.execute(sql.SQL("SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class AS c "
                            "JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE c.oid = to_regclass({})")
                    .format(sql.Literal(sql.Identifier(name).as_string(cur))))
        row = cur.fetchone()
        return None if row is None else str(row[0])

    def resolve_table(self, cur: Cursor, schema: str | None, name: str) -> TableInfo | None:
        """Look a table up as PostgreSQL would (search_path when unqualified)."""
        ident = sql.Identifier(schema, name) if schema else sql.Identifier(name)
        cur.execute(sql.SQL("SELECT to_regclass({})::oid").format(sql.Literal(ident.as_string(cur))))
        oid = fetch_row(cur)[0]
        if oid is None:
            return None
        cur.execute(
            """
            SELECT n.nspname, c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.oid = %s
            """,
            (oid,),
        )
        nspname, relname, relkind = fetch_row(cur)
        if relkind not in ("r", "p"):
            raise ConfigError(f"{nspname}.{relname} {NOT_A_TABLE.get(relkind, 'is not a table (a log needs a table)')}")
        cur.execute(
            """
            SELECT a.attname, format_type(a.atttypid, a.atttypmod),
                   array_position(i.indkey::int2[], a.attnum), a.attnotnull
            FROM pg_attribute a
            LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
            WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
            ORDER BY a.attnum
            """,
            (oid,),
        )
        rows = cur.fetchall()
        columns = tuple(Column(r[0], r[1], r[3]) for r in rows)
        key = tuple(Column(r[0], r[1]) for r in sorted((r for r in rows if r[2] is not None), key=lambda r: r[2]))
        return TableInfo(nspname, relname, oid, columns, key)

    def view_definition(self, cur: Cursor, schema: str | None, name: str) -> PgView | None:
        """The definition of the plain view a query's ``schema.name`` (search_path when
        unqualified) resolves to, every name in it schema-qualified; None if it is not a view."""
        ident = sql.Identifier(schema, name) if schema else sql.Identifier(name)
        cur.execute(
            sql.SQL("""
            SELECT c.oid, format('%I.%I', n.nspname, c.relname),
                   coalesce('security_barrier=true' = ANY(c.reloptions), false)
            FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
            WHERE c.oid = to_regclass({}) AND c.relkind = 'v'
            """).format(sql.Literal(ident.as_string(cur))))
        row = cur.fetchone()
        if row is None:
            return None
        oid, qualified, barrier = row
        cur.execute("SAVEPOINT mvlog_viewdef")
        try:  # with only pg_catalog on the path, pg_get_viewdef qualifies every other name
            cur.execute("SELECT set_config('search_path', 'pg_catalog', true)")
            cur.execute("SELECT pg_get_viewdef(%s::oid)", (oid,))
            definition = fetch_row(cur)[0]
        finally:
            cur.execute("ROLLBACK TO SAVEPOINT mvlog_viewdef")  # and the search_path with it
            cur.execute("RELEASE SAVEPOINT mvlog_viewdef")
        return PgView(qualified, definition, barrier)

    def log_refusal(self, cur: Cursor, table: TableInfo) -> str | None:
        """Why a log on ``table`` could not record every write to its rows, or None: a partition
        (a write through its parent fires the parent's statement triggers only), or a table in an
        INHERITS hierarchy (the same, between parent and children). (A partitioned table with a
        primary key cannot have foreign partitions.)"""
        cur.execute(
            """
            SELECT c.relkind, c.relispartition,
                   CASE WHEN c.relispartition THEN pg_partition_root(c.oid)::regclass::text  -- the root to log
                        ELSE (SELECT i.inhparent::regclass::text FROM pg_inherits AS i WHERE i.inhrelid = c.oid LIMIT 1)
                   END,
                   EXISTS (SELECT FROM pg_inherits AS i WHERE i.inhparent = c.oid)
            FROM pg_class AS c WHERE c.oid = %s
            """,
            (table.oid,),
        )
        relkind, partition, parent, has_children = fetch_row(cur)
        if partition:
            return (f"table {table.qualified} is a partition of {parent}: declare the log on {parent} "
                    f"(a log on a partitioned table covers every partition)")
        if parent or (has_children and relkind == "r"):
            relation = f"inherits from {parent}" if parent else "has INHERITS children"
            return (f"table {table.qualified} {relation}: a write through one table of an inheritance "
                    f"hierarchy fires only that table's triggers, so mvlog cannot log it exactly "
                    f"(declarative partitioning is supported)")
        return None

    def relation_columns(self, cur: Cursor, relation: str) -> list[str] | None:
        """The column names of ``relation`` (a qualified, quoted name) in order; None if it does not exist."""
        cur.execute("SELECT array_agg(attname::text ORDER BY attnum) FROM pg_attribute "
                    "WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped", (relation,))
        return fetch_row(cur)[0]

    def describe_query(self, cur: Cursor, query: str) -> list[tuple]:
        """Output columns of a query, without running it: (name, type oid, size, precision, scale)."""
        cur.execute("SAVEPOINT mvlog_describe")
        try:
            text = query.strip().rstrip(";").strip()
            cur.execute(sql.SQL("SELECT * FROM ({}\n) AS mvlog_q LIMIT 0").format(sql.SQL(text)))
            assert cur.description is not None  # a SELECT always describes its columns
            columns = [(d.name, d.type_code, d.internal_size, d.precision, d.scale) for d in cur.description]
        except psycopg2.Error as exc:
            cur.execute("ROLLBACK TO SAVEPOINT mvlog_describe")
            raise ConfigError(self.describe_error(exc)) from None
        cur.execute("RELEASE SAVEPOINT mvlog_describe")
        return columns

    def output_types(self, cur: Cursor, query: str) -> list[str] | None:
        """The SQL type of each output column of a query as PostgreSQL resolves it, modifiers
        included (``numeric(10,2)``), from a temporary view that is rolled back; None if it
        cannot be made (no TEMP privilege)."""
        cur.execute("SAVEPOINT mvlog_types")
        try:
            text = query.strip().rstrip(";").strip()
            cur.execute(sql.SQL("CREATE TEMP VIEW mvlog_types AS {}").format(sql.SQL(text)))
            cur.execute("SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                        "WHERE attrelid = 'mvlog_types'::regclass AND attnum > 0 ORDER BY attnum")
            return [row[0] for row in cur.fetchall()]
        except psycopg2.Error:
            return None
        finally:
            cur.execute("ROLLBACK TO SAVEPOINT mvlog_types")
            cur.execute("RELEASE SAVEPOINT mvlog_types")

    def check_statements(self, cur: Cursor, statements: Sequence[str], setup: Sequence[str] = ()) -> None:
        """Have PostgreSQL parse and plan each statement (EXPLAIN: none of them runs), after the
        ``setup`` statements, in a savepoint that is rolled back; a ConfigError with
        PostgreSQL's message for the first that fails."""
        cur.execute("SAVEPOINT mvlog_check")
        try:
            for statement in setup:
                cur.execute(sql.SQL(statement))
            for statement in statements:
                cur.execute(sql.SQL("EXPLAIN {}").format(sql.SQL(statement)))
        except psycopg2.Error as exc:
            raise ConfigError(self.describe_error(exc)) from None
        finally:
            cur.execute("ROLLBACK TO SAVEPOINT mvlog_check")
            cur.execute("RELEASE SAVEPOINT mvlog_check")

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
