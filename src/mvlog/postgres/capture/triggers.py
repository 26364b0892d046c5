"""Capture by triggers (``capture: trigger``, the default): four statement-level AFTER triggers
with transition tables write the changed keys into the log in the writer's own transaction
(``sql/log_triggers.sql``, bodies in ``sql/log_trigger_bodies.sql``). A partitioned table's
members carry the same triggers (``mvlog.cover_partitions``, ``sql/005_partitions.sql``).
"""

from __future__ import annotations

import re

from psycopg2 import sql

from mvlog.model import MVLOG_SCHEMA, LogInfo, TableInfo
from mvlog.postgres.capture import Capture
from mvlog.postgres.catalog import log_registry
from mvlog.postgres.source import Cursor, fetch_row, log_identifier, read_sql, table_identifier

# The SET clause of every log trigger function (sql/log_triggers.sql).
TRIGGER_FUNCTION_CONFIG = ("search_path=pg_catalog, pg_temp",)
EVENTS = ("insert", "update", "delete", "truncate")


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


def drop_triggers(cur: Cursor, table: sql.Composable, events: tuple[str, ...] = EVENTS) -> None:
    """Take mvlog's log triggers (of ``events``: all four by default) off ``table`` (a quoted name),
    if it has them."""
    for event in events:
        cur.execute(sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(sql.Identifier(f"mvlog${event}"), table))


def _drop_functions(cur: Cursor, log: LogInfo, events: tuple[str, ...]) -> None:
    """Drop the log's trigger functions of ``events``, if they exist."""
    for event in events:
        cur.execute(sql.SQL("DROP FUNCTION IF EXISTS {}()").format(
            sql.Identifier(MVLOG_SCHEMA, f"{log.log_name}${event}")))


class TriggerCapture(Capture):
    """The log's triggers on its table (and on every member of a partitioned table)."""

    kind = "trigger"

    def install(self, cur: Cursor, table: TableInfo, log: LogInfo) -> None:
        cur.execute(self._ddl(cur, table, log))

    def current(self, cur: Cursor, table: TableInfo, log: LogInfo) -> bool:
        """Its four triggers and their functions are as rendered now."""
        return self._current(cur, table, log, EVENTS)

    def before_stamp(self) -> None:
        """Nothing: every row is in the log when its writer commits."""

    def install_truncate(self, cur: Cursor, table: TableInfo, log: LogInfo) -> None:
        """The TRUNCATE trigger alone (``sql/log_truncate_trigger.sql``), the others and their
        functions off: what a log captured by logical decoding keeps, since a TRUNCATE aimed at a
        partition is not published."""
        dml = ("insert", "update", "delete")
        drop_triggers(cur, table_identifier(table), dml)
        _drop_functions(cur, log, dml)
        body = self._trigger_bodies(cur, table, log)["truncate"]
        cur.execute(sql.SQL(read_sql("log_truncate_trigger.sql")).format(
            table=table_identifier(table), fn_truncate=sql.Identifier(MVLOG_SCHEMA, f"{log.log_name}$truncate"),
            body_truncate=sql.Literal(body)))

    def truncate_current(self, cur: Cursor, table: TableInfo, log: LogInfo) -> bool:
        """The TRUNCATE trigger and its function alone are on the table, as rendered now."""
        return self._current(cur, table, log, ("truncate",))

    def _current(self, cur: Cursor, table: TableInfo, log: LogInfo, events: tuple[str, ...]) -> bool:
        cur.execute("SELECT array_agg(t.tgname::text ORDER BY t.tgname) FROM pg_trigger t "
                    "WHERE t.tgrelid = %s AND t.tgname LIKE 'mvlog$%%'", (table.oid,))
        if sorted(fetch_row(cur)[0] or ()) != sorted(f"mvlog${event}" for event in events):
            return False
        expected = {f"{log.log_name}${name}": body for name, body in self._trigger_bodies(cur, table, log).items()
                    if name in events}
        cur.execute(
            "SELECT proname, prosrc, proconfig FROM pg_proc "
            "WHERE pronamespace = 'mvlog'::regnamespace AND proname = ANY(%s)",
            (list(expected),),
        )
        found = {name: (source, config) for name, source, config in cur.fetchall()}
        return all(found.get(name) == (body, list(TRIGGER_FUNCTION_CONFIG)) for name, body in expected.items())

    def remove(self, cur: Cursor, log: LogInfo) -> None:
        """Its triggers (on the table and on the partitions it covers) and their functions."""
        table = sql.Identifier(log.table_schema, log.table_name)
        cur.execute("SELECT to_regclass(%s)::oid = %s", (table.as_string(cur), log.table_oid))
        if fetch_row(cur)[0]:
            drop_triggers(cur, table)
        for schema, name in log_registry.covered_partitions(cur, log.table_oid):
            drop_triggers(cur, sql.Identifier(schema, name))
        _drop_functions(cur, log, EVENTS)

    def _trigger_bodies(self, cur: Cursor, table: TableInfo, log: LogInfo) -> dict[str, str]:
        """The rendered PL/pgSQL bodies of the log's trigger functions, by event."""

        def prefixed(alias: str) -> sql.Composed:
            return sql.SQL(", ").join(sql.Identifier(alias, c.name) for c in table.key)

        parts = {
            "log": log_identifier(log),
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

    def _ddl(self, cur: Cursor, table: TableInfo, log: LogInfo) -> sql.Composed:
        bodies = self._trigger_bodies(cur, table, log)
        return sql.SQL(read_sql("log_triggers.sql")).format(
            table=table_identifier(table),
            **{f"fn_{name}": sql.Identifier(MVLOG_SCHEMA, f"{log.log_name}${name}") for name in bodies},
            **{f"body_{name}": sql.Literal(body) for name, body in bodies.items()},
        )
