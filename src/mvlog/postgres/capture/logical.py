"""Capture by logical decoding (``capture: logical``): the table's primary-key columns are
published by mvlog's publication, and the capture step
(:class:`~mvlog.postgres.capture.decoding.Decoding`) decodes the database's replication slot and
writes the keys into the same log. The one trigger left is on TRUNCATE (on the table and its
partitions): a TRUNCATE aimed at a partition is not published through the partition root.
"""

from __future__ import annotations

from psycopg2 import sql

from mvlog.model import LogInfo, TableInfo
from mvlog.postgres.capture import Capture
from mvlog.postgres.capture.prerequisites import replica_identity_refusal
from mvlog.postgres.capture.triggers import TriggerCapture
from mvlog.postgres.source import Cursor, fetch_row, table_identifier

PUBLICATION = "mvlog"


def ensure_publication(cur: Cursor) -> None:
    """mvlog's publication (empty at first): every partition's writes published as its root's."""
    cur.execute("SELECT EXISTS (SELECT FROM pg_publication WHERE pubname = %s)", (PUBLICATION,))
    if not fetch_row(cur)[0]:
        cur.execute(sql.SQL("CREATE PUBLICATION {} WITH (publish_via_partition_root = true)")
                    .format(sql.Identifier(PUBLICATION)))


def published_columns(cur: Cursor, schema: str, name: str) -> list[str] | None:
    """The columns mvlog's publication publishes of a table; None if it does not publish it."""
    cur.execute("SELECT attnames::text[] FROM pg_publication_tables "
                "WHERE pubname = %s AND schemaname = %s AND tablename = %s", (PUBLICATION, schema, name))
    row = cur.fetchone()
    return list(row[0]) if row else None


def unpublish(cur: Cursor, schema: str, name: str) -> None:
    """Take a table out of mvlog's publication, if it is in it."""
    if published_columns(cur, schema, name) is not None:
        cur.execute(sql.SQL("ALTER PUBLICATION {} DROP TABLE {}")
                    .format(sql.Identifier(PUBLICATION), sql.Identifier(schema, name)))


class LogicalCapture(Capture):
    """The table's primary key in mvlog's publication; of its triggers only the TRUNCATE one."""

    kind = "logical"

    def install(self, cur: Cursor, table: TableInfo, log: LogInfo) -> None:
        ensure_publication(cur)
        keys = [c.name for c in table.key]
        columns = published_columns(cur, table.schema, table.name)
        if columns is not None and sorted(columns) != sorted(keys):
            unpublish(cur, table.schema, table.name)
            columns = None
        if columns is None:
            cur.execute(sql.SQL("ALTER PUBLICATION {} ADD TABLE {} ({})").format(
                sql.Identifier(PUBLICATION), table_identifier(table),
                sql.SQL(", ").join(sql.Identifier(k) for k in keys)))
        # In the same transaction: a writer waits for it (DROP TRIGGER locks the table against
        # writes), so each write is logged by the triggers before, or decoded after, never neither.
        TriggerCapture().install_truncate(cur, table, log)

    def refusal(self, cur: Cursor, table: TableInfo) -> str | None:
        return replica_identity_refusal(cur, table.oid, table.qualified)

    def current(self, cur: Cursor, table: TableInfo, log: LogInfo) -> bool:
        columns = published_columns(cur, table.schema, table.name)
        if columns is None or sorted(columns) != sorted(c.name for c in table.key):
            return False
        return TriggerCapture().truncate_current(cur, table, log)

    def remove(self, cur: Cursor, log: LogInfo) -> None:
        cur.execute("SELECT to_regclass(%s)::oid = %s",
                    (sql.Identifier(log.table_schema, log.table_name).as_string(cur), log.table_oid))
        if fetch_row(cur)[0]:
            unpublish(cur, log.table_schema, log.table_name)
