"""What the database says of its relations and of a query, through a cursor: the tables a pattern
matches, a table's key and columns, a view's definition, why a table cannot have a log, a
relation's columns, a query's output columns, types and estimated cost, and whether PostgreSQL accepts
statements (planned, never run). A part of :class:`~mvlog.postgres.source.Source`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg2
import psycopg2.extensions
from psycopg2 import sql

from mvlog.errors import ConfigError
from mvlog.model import Column, TableInfo
from mvlog.sql.parse.expansion import PgView

# Run first in a transaction of a fast refresh's statements (its read, its state's upkeep, its checks
# at the stamp: ~20 KB of SQL over a window's few rows, often costed high), of an inspection, and by
# every describe in its own savepoint (describe_query, wherever it runs): JIT compiled q58's read for
# 10.5 s before a run of 1.8 s at SF 1, and the 107 TPC-DS views' describes for 467.7 s against
# 18.8 s (README, "run without JIT"; sessions 44 and 67).
# A complete refresh's reads keep the server's setting (JIT took q31's 6.9-8.0 s to 5.9-6.7 s).
NO_JIT = "SET LOCAL jit = off"
# A fast refresh's statements join a view's tables with its window's changed keys; TPC-DS q72 joins
# eleven. Past join_collapse_limit and from_collapse_limit (8) PostgreSQL keeps the joins in the order
# written, the changed keys last, and past geqo_threshold (12) searches by a genetic algorithm: its
# estimate of q72's join was 501 rows for 1.37M, so each branch of its key map's update built the
# whole join and then kept the rows of the changed keys (33.6 s at SF 1; 6.1 s with these, of it 0.56 s
# planning; 23.1 s with the limits alone, the genetic search's plan). Session 68.
WIDE_JOINS = ("SET LOCAL join_collapse_limit = 16", "SET LOCAL from_collapse_limit = 16",
              "SET LOCAL geqo_threshold = 17")
# What a fast refresh's transactions run first: its read's, its record's, its checks at the stamp.
FAST_SETTINGS = (NO_JIT, *WIDE_JOINS)

Cursor = psycopg2.extensions.cursor


def fetch_row(cur: Cursor) -> tuple[Any, ...]:
    """The row of a statement that always returns one (an aggregate or function call without
    FROM, a lookup of a row known to exist)."""
    row = cur.fetchone()
    assert row is not None, "the statement returned no row"
    return row


@contextmanager
def savepoint(cur: Cursor, name: str, *, keep: bool = False) -> Iterator[None]:
    """Run a block in the savepoint ``name``: what it did is rolled back after it, or (``keep``)
    only when it raises; either way the transaction goes on as before the block."""
    cur.execute(sql.SQL("SAVEPOINT {}").format(sql.Identifier(name)))
    try:
        yield
    except BaseException:
        _end_savepoint(cur, name, rollback=True)
        raise
    _end_savepoint(cur, name, rollback=not keep)


def _end_savepoint(cur: Cursor, name: str, rollback: bool) -> None:
    if rollback:
        cur.execute(sql.SQL("ROLLBACK TO SAVEPOINT {}").format(sql.Identifier(name)))
    cur.execute(sql.SQL("RELEASE SAVEPOINT {}").format(sql.Identifier(name)))


def data_refused(cur: Cursor, statement: str, parameters: dict[str, Any], name: str) -> str | None:
    """Run ``statement`` with ``parameters`` in the savepoint ``name``: PostgreSQL's first line when
    it refused the data (a malformed value: nothing done, the transaction goes on), else None."""
    try:
        with savepoint(cur, name, keep=True):
            cur.execute(statement, parameters)
    except psycopg2.DataError as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None


# What a relation that is not a table is, as a reason it cannot have a log (by pg_class.relkind).
NOT_A_TABLE = {
    "v": "is a view: log the tables it reads (a view query that reads it is expanded to them)",
    "m": "is a materialized view: mvlog cannot log it; log the tables its query reads and make it an mvlog view",
    "f": "is a foreign table: its rows change outside this database, so mvlog cannot log them",
}


class CatalogInspection:
    """The catalog and query lookups of a :class:`~mvlog.postgres.source.Source` (see the module)."""

    def describe_error(self, exc: psycopg2.Error) -> str:
        """PostgreSQL's message for ``exc``, as the source words it (with its secrets redacted)."""
        raise NotImplementedError

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
        with savepoint(cur, "mvlog_viewdef"):  # rolled back, and the search_path with it
            # with only pg_catalog on the path, pg_get_viewdef qualifies every other name
            cur.execute("SELECT set_config('search_path', 'pg_catalog', true)")
            cur.execute("SELECT pg_get_viewdef(%s::oid)", (oid,))
            definition = fetch_row(cur)[0]
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
        """Output columns of a query, without running it: (name, type oid, size, precision, scale).
        Without JIT, whatever the transaction's setting (its LIMIT 0 evaluates no row, yet JIT would
        compile every expression of a costly query for it); the setting goes with the savepoint."""
        text = query.strip().rstrip(";").strip()
        try:
            with savepoint(cur, "mvlog_describe"):
                cur.execute(NO_JIT)
                cur.execute(sql.SQL("SELECT * FROM ({}\n) AS mvlog_q LIMIT 0").format(sql.SQL(text)))
                assert cur.description is not None  # a SELECT always describes its columns
                described = [(d.name, d.type_code, d.internal_size, d.precision, d.scale) for d in cur.description]
        except psycopg2.Error as exc:
            raise ConfigError(self.describe_error(exc)) from None
        return described

    def output_types(self, cur: Cursor, query: str) -> list[str] | None:
        """The SQL type of each output column of a query as PostgreSQL resolves it, modifiers
        included (``numeric(10,2)``), from a temporary view that is rolled back; None if it
        cannot be made (no TEMP privilege)."""
        text = query.strip().rstrip(";").strip()
        try:
            with savepoint(cur, "mvlog_types"):
                cur.execute(sql.SQL("CREATE TEMP VIEW mvlog_types AS {}").format(sql.SQL(text)))
                cur.execute("SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                            "WHERE attrelid = 'mvlog_types'::regclass AND attnum > 0 ORDER BY attnum")
                return [row[0] for row in cur.fetchall()]
        except psycopg2.Error:
            return None

    def estimated_cost(self, cur: Cursor, query: str) -> float | None:
        """PostgreSQL's estimate of what running ``query`` costs (its plan's total cost: EXPLAIN,
        nothing runs), in a savepoint; None if it cannot be planned."""
        try:
            with savepoint(cur, "mvlog_estimate", keep=True):
                cur.execute(sql.SQL("EXPLAIN (FORMAT JSON) {}").format(sql.SQL(query.strip().rstrip(";"))))
                return float(fetch_row(cur)[0][0]["Plan"]["Total Cost"])
        except psycopg2.Error:
            return None

    def check_statements(self, cur: Cursor, statements: Sequence[str], setup: Sequence[str] = ()) -> None:
        """Have PostgreSQL parse and plan each statement (EXPLAIN: none of them runs), after the
        ``setup`` statements, in a savepoint that is rolled back; a ConfigError with
        PostgreSQL's message for the first that fails."""
        try:
            with savepoint(cur, "mvlog_check"):
                for statement in setup:
                    cur.execute(sql.SQL(statement))
                for statement in statements:
                    cur.execute(sql.SQL("EXPLAIN {}").format(sql.SQL(statement)))
        except psycopg2.Error as exc:
            raise ConfigError(self.describe_error(exc)) from None
