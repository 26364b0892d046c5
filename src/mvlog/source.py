"""PostgreSQL access: connections, the mvlog catalog, logs, stamping and purging.

Everything mvlog says to PostgreSQL goes through :class:`Source`. Identifiers and
values are composed with :mod:`psycopg2.sql`, never pasted into strings.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Iterator, Sequence

import psycopg2
import psycopg2.extensions
from psycopg2 import sql

from mvlog.errors import ConfigError, SourceError

SENTINEL = "4000-01-01 00:00:00+00"
SCHEMA_VERSION = 2  # the newest sql/NNN_*.sql catalog version (002 gained mvlog.analyze)
LOCK_NAMESPACE = 0x6D766C67  # "mvlg": first key of mvlog's two-int advisory locks
TRIGGER_FUNCTION_CONFIG = ("search_path=pg_catalog, pg_temp",)  # the SET clause of every log trigger function (sql/log.sql)
SNAPSHOT_ID = re.compile(r"^[0-9A-F]+-[0-9A-F]+(-[0-9]+)?$")


def sql_dir() -> Path:
    """The directory of mvlog's .sql files (packaged, or the repository's ``sql/``)."""
    packaged = resources.files("mvlog") / "sql"
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[2] / "sql"


def read_sql(name: str) -> str:
    return (sql_dir() / name).read_text(encoding="utf-8")


def trigger_bodies() -> dict[str, str]:
    """The sections of ``log_trigger_bodies.sql`` by name."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in read_sql("log_trigger_bodies.sql").splitlines():
        match = re.match(r"^-- @(\w+)\s*$", line)
        if match:
            current = sections.setdefault(match.group(1), [])
        elif current is not None and not line.startswith("--"):
            current.append(line)
    return {name: "\n".join(lines).strip() + "\n" for name, lines in sections.items()}


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # format_type(), e.g. "numeric(12,2)"


@dataclass(frozen=True)
class TableInfo:
    """A base table as the catalog describes it."""

    schema: str
    name: str
    oid: int
    columns: tuple[Column, ...]
    key: tuple[Column, ...]  # primary-key columns in key order; empty if none

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"

    @property
    def identifier(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.name)


@dataclass(frozen=True)
class LogInfo:
    """A registered materialized view log."""

    table_schema: str
    table_name: str
    log_name: str
    key_columns: tuple[str, ...]
    key_types: tuple[str, ...]
    table_oid: int

    @property
    def qualified_table(self) -> str:
        return f"{self.table_schema}.{self.table_name}"

    @property
    def identifier(self) -> sql.Identifier:
        return sql.Identifier("mvlog", self.log_name)

    @classmethod
    def for_table(cls, table: "TableInfo", log_name: str) -> "LogInfo":
        """The log ``log_name`` of ``table``, keyed by the table's primary key."""
        return cls(table.schema, table.name, log_name, tuple(c.name for c in table.key),
                   tuple(c.type for c in table.key), table.oid)


@dataclass(frozen=True)
class ColumnStats:
    """PostgreSQL's statistics of one base-table column (pg_stats, pg_class)."""

    histogram: tuple[str, ...]  # equal-population bucket bounds, ascending, in text form
    rows: float  # the table's estimated rows
    distinct: float  # estimated distinct values


def log_name_for(table: TableInfo) -> str:
    """A readable, unique, ASCII log table name: mlog$_<table>_<oid>."""
    stem = re.sub(r"[^a-z0-9_]+", "_", table.name.lower()).strip("_")[:36] or "t"
    return f"mlog$_{stem}_{table.oid}"


class Source:
    """The PostgreSQL side of mvlog; owns one connection (opened on first use)."""

    def __init__(self, dsn: str, secrets: Sequence[str] = ()):
        self.dsn = dsn
        self.secrets = [s for s in secrets if s]
        self._conn: psycopg2.extensions.connection | None = None

    # -- connections --------------------------------------------------------------

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text

    def _describe(self, exc: psycopg2.Error) -> str:
        message = (getattr(exc, "pgerror", None) or str(exc) or exc.__class__.__name__).strip()
        lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
        first = lines[0] if lines else message
        first = re.sub(r"^(ERROR|FATAL):\s+", "", first)
        # libpq's "connection to server at ... failed: FATAL:  reason" -> keep the reason
        first = re.sub(r'^connection to server at "([^"]*)" \(([^)]*)\), port (\d+) failed: (FATAL:\s+)?',
                       r"\1:\3: ", first)
        first = re.sub(r'^connection to server at "([^"]*)", port (\d+) failed: (FATAL:\s+)?', r"\1:\2: ", first)
        return self.redact(first.rstrip("."))

    def connect(self, **kwargs: object) -> psycopg2.extensions.connection:
        """A new connection; any failure becomes one clear SourceError."""
        try:
            conn = psycopg2.connect(self.dsn, connect_timeout=10, application_name="mvlog", **kwargs)
        except psycopg2.ProgrammingError as exc:  # an unparsable DSN
            raise ConfigError(f"source.dsn is not a valid PostgreSQL connection string: {self._describe(exc)}") from None
        except psycopg2.Error as exc:
            raise SourceError(f"cannot connect to PostgreSQL: {self._describe(exc)}") from None
        return conn

    @property
    def conn(self) -> psycopg2.extensions.connection:
        if self._conn is None or self._conn.closed:
            self._conn = self.connect()
        return self._conn

    def close(self) -> None:
        if self._conn is not None and not self._conn.closed:
            self._conn.close()
        self._conn = None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[psycopg2.extensions.cursor]:
        """A cursor in one transaction of the main connection; errors roll back."""
        conn = self.conn
        try:
            with conn.cursor() as cur:
                yield cur
            conn.commit()
        except psycopg2.Error as exc:
            conn.rollback()
            raise SourceError(f"PostgreSQL: {self._describe(exc)}") from None
        except BaseException:
            if not conn.closed:
                conn.rollback()
            raise

    def query(self, statement: sql.Composable | str, params: Sequence | dict | None = None) -> list[tuple]:
        with self.transaction() as cur:
            cur.execute(statement, params)
            return cur.fetchall() if cur.description else []

    # -- catalog --------------------------------------------------------------------

    def is_installed(self) -> bool:
        return bool(self.query("SELECT to_regclass('mvlog.views') IS NOT NULL")[0][0])

    def check_schema(self) -> None:
        """Refuse to work on a catalog that is missing or older than this mvlog."""
        from mvlog.errors import UsageError

        if not self.is_installed():
            raise UsageError("mvlog is not installed in this database yet; run 'mvlog apply' first")
        version = self.query("SELECT max(version) FROM mvlog.schema_version")[0][0] or 0
        if version < SCHEMA_VERSION:
            raise UsageError(f"the mvlog catalog in this database is version {version}, this mvlog needs "
                             f"{SCHEMA_VERSION}; run 'mvlog apply' to upgrade it")

    def install_schema(self, cur: psycopg2.extensions.cursor) -> bool:
        """Create or upgrade the mvlog schema (inside the caller's transaction).

        Returns whether DDL capture (event triggers, superuser only) is installed.
        """
        cur.execute(read_sql("001_schema.sql"))
        cur.execute(read_sql("002_ddl_capture.sql"))
        cur.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        if cur.fetchone()[0]:
            cur.execute(read_sql("003_event_triggers.sql"))
            return True
        cur.execute("SELECT count(*) = 2 FROM pg_event_trigger WHERE evtname IN ('mvlog_capture_ddl', 'mvlog_capture_drop')")
        return bool(cur.fetchone()[0])

    def resolve_table(self, cur: psycopg2.extensions.cursor, schema: str | None, name: str) -> TableInfo | None:
        """Look a table up as PostgreSQL would (search_path when unqualified)."""
        ident = sql.Identifier(schema, name) if schema else sql.Identifier(name)
        cur.execute(sql.SQL("SELECT to_regclass({})::oid").format(sql.Literal(ident.as_string(cur))))
        oid = cur.fetchone()[0]
        if oid is None:
            return None
        cur.execute(
            """
            SELECT n.nspname, c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.oid = %s
            """,
            (oid,),
        )
        nspname, relname, relkind = cur.fetchone()
        if relkind not in ("r", "p"):
            raise ConfigError(f"{nspname}.{relname} is not a table (a log needs a table)")
        cur.execute(
            """
            SELECT a.attname, format_type(a.atttypid, a.atttypmod),
                   array_position(i.indkey::int2[], a.attnum)
            FROM pg_attribute a
            LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
            WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
            ORDER BY a.attnum
            """,
            (oid,),
        )
        rows = cur.fetchall()
        columns = tuple(Column(r[0], r[1]) for r in rows)
        key = tuple(Column(r[0], r[1]) for r in sorted((r for r in rows if r[2] is not None), key=lambda r: r[2]))
        return TableInfo(nspname, relname, oid, columns, key)

    def describe_query(self, cur: psycopg2.extensions.cursor, query: str) -> list[tuple]:
        """Output columns of a query, without running it: (name, type oid, size, precision, scale)."""
        cur.execute("SAVEPOINT mvlog_describe")
        try:
            text = query.strip().rstrip(";").strip()
            cur.execute(sql.SQL("SELECT * FROM ({}\n) AS mvlog_q LIMIT 0").format(sql.SQL(text)))
            columns = [(d.name, d.type_code, d.internal_size, d.precision, d.scale) for d in cur.description]
        except psycopg2.Error as exc:
            cur.execute("ROLLBACK TO SAVEPOINT mvlog_describe")
            raise ConfigError(self._describe(exc)) from None
        cur.execute("RELEASE SAVEPOINT mvlog_describe")
        return columns

    # -- logs -------------------------------------------------------------------------

    def logs(self) -> dict[str, LogInfo]:
        """Registered logs by qualified table name."""
        rows = self.query(
            "SELECT table_schema, table_name, log_name, key_columns, key_types, table_oid FROM mvlog.logs"
        )
        return {f"{r[0]}.{r[1]}": LogInfo(r[0], r[1], r[2], tuple(r[3]), tuple(r[4]), int(r[5])) for r in rows}

    def ensure_log(self, cur: psycopg2.extensions.cursor, table: TableInfo) -> tuple[LogInfo, bool]:
        """CREATE MATERIALIZED VIEW LOG ON table WITH PRIMARY KEY (idempotent).

        Returns the log and whether its DDL ran: False when the log, its four triggers and
        their functions already exist exactly as this version of mvlog renders them (an
        upgrade that changes a trigger body or drops the old snaptime index redoes the DDL).
        """
        if not table.key:
            raise ConfigError(f"table {table.qualified} has no primary key, so it cannot have a materialized view log")
        cur.execute(
            "SELECT log_name, key_columns, key_types FROM mvlog.logs WHERE table_schema = %s AND table_name = %s",
            (table.schema, table.name),
        )
        row = cur.fetchone()
        log = LogInfo.for_table(table, row[0] if row else log_name_for(table))
        if row and (tuple(row[1]), tuple(row[2])) != (log.key_columns, log.key_types):
            # The primary key changed: the old log's rows name keys of another shape.
            cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(log.identifier))
            cur.execute(
                "UPDATE mvlog.views SET needs_complete = 'the primary key of a base table changed' "
                "WHERE name IN (SELECT view_name FROM mvlog.view_logs WHERE table_schema = %s AND table_name = %s)",
                (table.schema, table.name),
            )
        elif row and self._log_ddl_current(cur, table, log):
            return log, False
        cur.execute(self._log_ddl(cur, table, log))
        cur.execute(
            """
            INSERT INTO mvlog.logs (table_schema, table_name, table_oid, log_name, key_columns, key_types)
            VALUES (%s, %s, %s, %s, %s, %s)
            ON CONFLICT (table_schema, table_name) DO UPDATE
            SET table_oid = excluded.table_oid, key_columns = excluded.key_columns, key_types = excluded.key_types
            """,
            (table.schema, table.name, table.oid, log.log_name, list(log.key_columns), list(log.key_types)),
        )
        return log, True

    def _log_ddl_current(self, cur: psycopg2.extensions.cursor, table: TableInfo, log: LogInfo) -> bool:
        """The log table (without an index), its four triggers and their functions are as rendered now."""
        cur.execute(
            """
            SELECT (SELECT count(*) FROM pg_trigger t WHERE t.tgrelid = %(table)s AND t.tgname LIKE 'mvlog$%%') = 4
                   AND to_regclass(%(log)s) IS NOT NULL
                   AND NOT EXISTS (SELECT FROM pg_index i WHERE i.indrelid = to_regclass(%(log)s))
            """,
            {"table": table.oid, "log": log.identifier.as_string(cur)},
        )
        if not cur.fetchone()[0]:
            return False
        expected = {f"{log.log_name}${name}": body for name, body in self._trigger_bodies(cur, table, log).items()}
        cur.execute(
            "SELECT proname, prosrc, proconfig FROM pg_proc WHERE pronamespace = 'mvlog'::regnamespace AND proname = ANY(%s)",
            (list(expected),),
        )
        found = {name: (source, config) for name, source, config in cur.fetchall()}
        return all(found.get(name) == (body, list(TRIGGER_FUNCTION_CONFIG)) for name, body in expected.items())

    def _trigger_bodies(self, cur: psycopg2.extensions.cursor, table: TableInfo, log: LogInfo) -> dict[str, str]:
        """The rendered PL/pgSQL bodies of the log's trigger functions, by event."""

        def prefixed(alias: str) -> sql.Composed:
            return sql.SQL(", ").join(sql.Identifier(alias, c.name) for c in table.key)

        parts = {
            "log": log.identifier,
            "key_cols": sql.SQL(", ").join(sql.Identifier(c.name) for c in table.key),
            "new_keys": prefixed("n"),
            "old_keys": prefixed("o"),
            "old_first_key": sql.Identifier("o", table.key[0].name),
            "new_first_key": sql.Identifier("n", table.key[0].name),
            "either_keys": sql.SQL(", ").join(
                sql.SQL("coalesce({}, {})").format(sql.Identifier("n", c.name), sql.Identifier("o", c.name))
                for c in table.key
            ),
            "keys_equal": sql.SQL(" AND ").join(
                sql.SQL("{} = {}").format(sql.Identifier("n", c.name), sql.Identifier("o", c.name)) for c in table.key
            ),
        }
        return {
            name: sql.SQL(text).format(**{k: v for k, v in parts.items() if "{" + k + "}" in text}).as_string(cur)
            for name, text in trigger_bodies().items()
        }

    def _log_ddl(self, cur: psycopg2.extensions.cursor, table: TableInfo, log: LogInfo) -> sql.Composed:
        bodies = self._trigger_bodies(cur, table, log)
        return sql.SQL(read_sql("log.sql")).format(
            table=table.identifier,
            log=log.identifier,
            log_index=sql.Identifier("mvlog", f"{log.log_name}$snaptime"),
            key_defs=sql.SQL(", ").join(
                sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(c.type)) for c in table.key
            ),
            **{f"fn_{name}": sql.Identifier("mvlog", f"{log.log_name}${name}") for name in bodies},
            **{f"body_{name}": sql.Literal(body) for name, body in bodies.items()},
        )

    def drop_log(self, cur: psycopg2.extensions.cursor, log: LogInfo) -> None:
        """DROP MATERIALIZED VIEW LOG: triggers, trigger functions, log table and registry row."""
        cur.execute("SELECT to_regclass(%s)::oid = %s",
                    (sql.Identifier(log.table_schema, log.table_name).as_string(cur), log.table_oid))
        if cur.fetchone()[0]:
            table = sql.Identifier(log.table_schema, log.table_name)
            for trigger in ("mvlog$insert", "mvlog$update", "mvlog$delete", "mvlog$truncate"):
                cur.execute(sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(sql.Identifier(trigger), table))
        for event in ("insert", "update", "delete", "truncate"):
            cur.execute(sql.SQL("DROP FUNCTION IF EXISTS {}()").format(sql.Identifier("mvlog", f"{log.log_name}${event}")))
        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(log.identifier))
        cur.execute("DELETE FROM mvlog.logs WHERE log_name = %s", (log.log_name,))

    # -- stamping, windows, snapshots ------------------------------------------------

    @contextlib.contextmanager
    def stamp(self, logs: Sequence[LogInfo]) -> Iterator["StampedSnapshot"]:
        """Stamp every sentinel row of these logs with one new S, and hold the snapshot the stamp saw.

        The refresh reads everything at that snapshot, so it sees the base tables exactly as
        the stamped log rows describe them: a transaction that commits after the stamp took
        its snapshot is neither in the window nor in the base rows read (the next refresh
        takes both). Reading base tables at a later snapshot would apply such a transaction
        to some rows of a refresh group and not to others.

        Session advisory locks per log, taken in a fixed order *before* the snapshot and S are
        taken and released after the stamp commits, serialize stamping, so stamps become
        visible in increasing order of S and no stamp commits between a snapshot and its stamp.
        """
        ordered = sorted(logs, key=lambda log: log.table_oid)
        holder = self.connect()
        try:
            holder.set_session(isolation_level="REPEATABLE READ", readonly=True)
            stamper = self.connect()
            try:
                stamper.autocommit = True
                with stamper.cursor() as cur:
                    for log in ordered:
                        cur.execute("SELECT pg_advisory_lock(%s, %s)", (LOCK_NAMESPACE, log.table_oid & 0x7FFFFFFF))
                stamper.autocommit = False
                stamper.set_session(isolation_level="REPEATABLE READ")
                with stamper.cursor() as cur, holder.cursor() as held:
                    cur.execute("SELECT pg_export_snapshot()")  # the stamp's snapshot, taken under the locks
                    held.execute("SET TRANSACTION SNAPSHOT %s", (checked_snapshot_id(cur.fetchone()[0]),))
                    held.execute("SELECT pg_export_snapshot()")  # outlives the stamp's transaction
                    snapshot = checked_snapshot_id(held.fetchone()[0])
                    cur.execute(
                        "SELECT greatest(clock_timestamp(), max(last_stamp) + interval '1 microsecond') "
                        "FROM mvlog.logs WHERE log_name = ANY(%s)",
                        ([log.log_name for log in ordered],),
                    )
                    stamp = cur.fetchone()[0]
                    for log in ordered:
                        cur.execute(
                            sql.SQL('UPDATE {} SET "snaptime$$" = %s WHERE "snaptime$$" = %s').format(log.identifier),
                            (stamp, SENTINEL),
                        )
                    cur.execute("UPDATE mvlog.logs SET last_stamp = %s WHERE log_name = ANY(%s)",
                                (stamp, [log.log_name for log in ordered]))
                stamper.commit()
            finally:
                stamper.close()  # releases the advisory locks
            # Fresh statistics: the planner must know the window holds few keys, or it prefers
            # hash joins over index probes and scans whole base tables (ANALYZE samples, so
            # even a large log costs little).
            with self.transaction() as cur:
                for log in ordered:
                    cur.execute("SELECT mvlog.analyze(%s::regclass)", (log.identifier.as_string(cur),))
            yield StampedSnapshot(stamp, snapshot, holder, self)
        except psycopg2.Error as exc:
            raise SourceError(f"PostgreSQL: {self._describe(exc)}") from None
        finally:
            holder.close()

    @contextlib.contextmanager
    def snapshot_transaction(self, snapshot: str) -> Iterator[psycopg2.extensions.cursor]:
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
            raise SourceError(f"PostgreSQL: {self._describe(exc)}") from None
        finally:
            conn.close()

    def ddl_since(self, table_oids: Sequence[int], after: datetime | None) -> list[tuple]:
        """DDL recorded on these tables after ``after``: (time, command tag, object identity)."""
        return self.query(
            "SELECT logged_at, command_tag, object_identity FROM mvlog.ddl_log "
            "WHERE table_oid = ANY(%s) AND (%s::timestamptz IS NULL OR logged_at > %s) ORDER BY id",
            (list(table_oids), after, after),
        )

    def column_stats(self, log: LogInfo, column: str) -> ColumnStats | None:
        """The planner statistics of one column of a logged table; None before it was analyzed."""
        rows = self.query(
            """
            SELECT s.histogram_bounds::text::text[], c.reltuples, s.n_distinct
            FROM pg_stats s
            JOIN pg_class c ON c.oid = %s
            WHERE s.schemaname = %s AND s.tablename = %s AND s.attname = %s AND NOT s.inherited
            """,
            (log.table_oid, log.table_schema, log.table_name, column),
        )
        if not rows or rows[0][0] is None:
            return None
        histogram, reltuples, n_distinct = rows[0]
        reltuples = max(float(reltuples), 0.0)
        distinct = float(n_distinct) if n_distinct >= 0 else -float(n_distinct) * reltuples
        return ColumnStats(tuple(histogram), reltuples, distinct)

    def pending_rows(self, log: LogInfo, after: datetime | None) -> int:
        """Log rows a consumer at ``after`` has not consumed (stamped later, or not stamped yet)."""
        rows = self.query(
            sql.SQL('SELECT count(*) FROM {} WHERE %s::timestamptz IS NULL OR "snaptime$$" > %s').format(log.identifier),
            (after, after),
        )
        return int(rows[0][0])

    def purge(self, logs: Sequence[LogInfo]) -> dict[str, int]:
        """Delete log rows consumed by every dependent view; returns rows deleted per table."""
        deleted: dict[str, int] = {}
        for log in logs:
            with self.transaction() as cur:
                cur.execute(
                    """
                    SELECT bool_and(v.last_snaptime IS NOT NULL), min(v.last_snaptime), count(*)
                    FROM mvlog.view_logs vl JOIN mvlog.views v ON v.name = vl.view_name
                    WHERE vl.table_schema = %s AND vl.table_name = %s
                    """,
                    (log.table_schema, log.table_name),
                )
                all_refreshed, horizon, dependents = cur.fetchone()
                if dependents == 0:
                    # Nobody consumes this log: stamped rows are of no use to anyone.
                    cur.execute("SELECT last_stamp FROM mvlog.logs WHERE log_name = %s", (log.log_name,))
                    horizon, all_refreshed = cur.fetchone()[0], True
                if not all_refreshed or horizon is None:
                    deleted[log.qualified_table] = 0
                    continue
                cur.execute(sql.SQL('DELETE FROM {} WHERE "snaptime$$" <= %s').format(log.identifier), (horizon,))
                deleted[log.qualified_table] = cur.rowcount
        return deleted


def checked_snapshot_id(snapshot: str) -> str:
    """``snapshot`` if it has the form of a PostgreSQL exported snapshot id (it is pasted into
    JDBC session statements), else SourceError."""
    if not SNAPSHOT_ID.match(snapshot):
        raise SourceError(f"unexpected snapshot id {snapshot!r}")
    return snapshot


@dataclass
class StampedSnapshot:
    """A refresh's stamp S and the exported snapshot it was taken in, held open until the refresh ends.

    At this snapshot the window of a consumer at ``after`` is simply ``snaptime$$ > after``
    (see sqlgen.changed_keys_sql).
    """

    time: datetime
    snapshot: str
    conn: psycopg2.extensions.connection
    source: Source

    def query(self, statement: sql.Composable | str, params: Sequence | dict | None = None) -> list[tuple]:
        """Run a read-only statement at the snapshot."""
        try:
            with self.conn.cursor() as cur:
                cur.execute(statement, params)
                return cur.fetchall() if cur.description else []
        except psycopg2.Error as exc:
            raise SourceError(f"PostgreSQL: {self.source._describe(exc)}") from None

    def _window_has(self, log: LogInfo, after: datetime | None, condition: sql.Composable) -> bool:
        rows = self.query(
            sql.SQL('SELECT EXISTS (SELECT FROM {} WHERE ({}) AND (%s::timestamptz IS NULL OR "snaptime$$" > %s))')
            .format(log.identifier, condition),
            (after, after),
        )
        return bool(rows[0][0])

    def window_has_rows(self, log: LogInfo, after: datetime | None) -> bool:
        """Whether the log holds rows in this refresh's window for a consumer at ``after``."""
        return self._window_has(log, after, sql.SQL("true"))

    def truncated_since(self, log: LogInfo, after: datetime | None) -> bool:
        """Whether the table was truncated in this refresh's window for a consumer at ``after``."""
        return self._window_has(log, after, sql.SQL("\"dmltype$$\" = 'T'"))
