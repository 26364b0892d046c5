"""Rows a refresh's snapshot cannot see but its windows must hold: the log rows that logical
decoding wrote *after* the snapshot S was taken, of transactions S sees.

A trigger writes a log row in its writer's transaction, so S sees a transaction's rows exactly
when it sees the transaction. The capture writes them after the commit; a refresh waits for it
and stamps them (:meth:`mvlog.postgres.logs.Logs.stamp`), but S cannot see rows committed after
it. Every statement run at S that reads such a log reads it as the log plus these rows, as
literals: :meth:`LateRows.resolve` puts that union in place of the log table.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from sqlglot import exp

from mvlog.model import LogInfo
from mvlog.sql.generate.changes import log_rows, read_logs_as
from mvlog.sql.parse.sqltree import DIALECT


def _array_text(values: Sequence[str | None]) -> str:
    """A PostgreSQL array literal of text values."""
    def element(value: str | None) -> str:
        if value is None:
            return "NULL"
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return "{" + ",".join(element(v) for v in values) + "}"


class LateRows:
    """The late rows of a refresh, per log: (key text values..., dmltype, old_new, xact_time)."""

    def __init__(self, stamp: datetime):
        self.stamp = stamp
        self.rows: dict[str, tuple[LogInfo, list[tuple]]] = {}

    @classmethod
    def stand_in(cls, logs: Sequence[LogInfo]) -> LateRows:
        """One row of NULL keys per log: ``apply`` plans the statements a refresh runs with late
        rows in these logs, so the refresh runs no statement shape that was not validated."""
        late = cls(datetime(2000, 1, 1, tzinfo=UTC))
        for log in logs:
            late.add(log, [(*[None] * len(log.key_columns), "I", "N", None)])
        return late

    def add(self, log: LogInfo, rows: list[tuple]) -> None:
        if rows:
            self.rows.setdefault(log.log_name, (log, []))[1].extend(rows)

    def extend(self, other: LateRows) -> None:
        """Add the late rows of ``other`` (of the same stamp)."""
        for log, rows in other.rows.values():
            self.add(log, rows)

    def __bool__(self) -> bool:
        return bool(self.rows)

    def __len__(self) -> int:
        """How many late rows, over every log."""
        return sum(len(rows) for _, rows in self.rows.values())

    def resolve(self, statement: str) -> str:
        """``statement`` with each log that has late rows read as the log plus them."""
        names = [name for name in self.rows if name in statement]
        if not names:
            return statement
        return read_logs_as(statement, {name: self._union(*self.rows[name]) for name in names})

    def _union(self, log: LogInfo, rows: list[tuple]) -> exp.Query:
        """``SELECT <keys>, <meta> FROM log UNION ALL SELECT … FROM unnest(<one text array per column>)``."""
        width = len(log.key_columns)

        texts = [[*row[:width + 2], row[width + 2].isoformat() if row[width + 2] is not None else None]
                 for row in rows]
        names = [f"c{i}" for i in range(width + 3)]
        arrays = [exp.cast(exp.Literal.string(_array_text([t[i] for t in texts])), "text[]") for i in range(width + 3)]
        late = exp.select(
            *[exp.alias_(exp.cast(exp.column(names[i]), exp.DataType.build(log.key_types[i], dialect=DIALECT,
                                                                            udt=True)),
                         log.key_columns[i], quoted=True) for i in range(width)],
            exp.alias_(exp.cast(exp.Literal.string(self.stamp.isoformat()), "timestamptz"), "snaptime$$", quoted=True),
            exp.alias_(exp.column(names[width]), "dmltype$$", quoted=True),
            exp.alias_(exp.column(names[width + 1]), "old_new$$", quoted=True),
            exp.alias_(exp.cast(exp.column(names[width + 2]), "timestamptz"), "xact_time$$", quoted=True),
        ).from_(exp.Table(this=exp.Anonymous(this="unnest", expressions=arrays),
                          alias=exp.TableAlias(this=exp.to_identifier("l"),
                                               columns=[exp.to_identifier(n) for n in names])))
        return exp.union(log_rows(log), late, distinct=False)
