"""Range parameters: an uncorrelated scalar subquery compared with one FROM item's rows
(TPC-H Q22: ``c_acctbal > (SELECT avg(c_acctbal) FROM customer WHERE …)``).

The subquery is one value V for every row. When it moves from V0 (at the view's last refresh) to
V1 (now), ``x op V0`` and ``x op V1`` differ — for any comparison — only for rows whose ``x`` lies
between V0 and V1; if one of them is NULL, for every row with a value. So those rows are changes
too: a refresh reads the compared table's log as the log plus them (:func:`moved_rows`), and the
view's own strategy, unchanged, recomputes them as it does any changed row (the key map gives where
they were, the base tables where they are). V0 is kept in ``mvlog."param$_<view>"``, one column
per parameter, written in the record step at the refresh's snapshot, after the state that reads
it. A refresh whose Delta commit was not recorded is taken back before the next one runs
(:meth:`mvlog.pipeline.refresh.Refresher._take_back_unrecorded`), so V0 is always the value the view's
rows were computed with.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime

from sqlglot import exp

from mvlog.model import HIDDEN_PREFIX, LogInfo
from mvlog.sql.generate.changes import base_table, log_rows, read_logs_as
from mvlog.sql.generate.keymap import drop_table_sql, qualified, refill_sql, state_table
from mvlog.sql.parse.sqltree import parsed, sql_text
from mvlog.sql.pieces.shape import Ranged, ViewShape, ident, parameters_name
from mvlog.sql.strategies.strategy import ColumnsOf, Layered, Strategy, StrategyOf


def value_column(i: int) -> str:
    return f"v{i}"


def _table(shape: ViewShape) -> exp.Table:
    return state_table(parameters_name(shape.name))


def _now(ranged: Ranged) -> exp.Expr:
    return exp.Subquery(this=parsed(ranged.subquery))


def _then(shape: ViewShape, i: int) -> exp.Expr:
    return exp.Subquery(this=exp.select(exp.column(value_column(i), quoted=True)).from_(_table(shape)))


VALUES = HIDDEN_PREFIX + "p"  # the moved rows' one-row join: the value then (V0) and now (V1)


def moved_condition(shape: ViewShape, i: int) -> exp.Expr:
    """Rows of parameter ``i``'s table whose comparison may differ between V0 and V1."""
    x = exp.Paren(this=parsed(shape.ranges[i].value))
    v0, v1 = exp.column("v0", table=VALUES, quoted=True), exp.column("v1", table=VALUES, quoted=True)
    between = exp.and_(
        exp.Between(this=x.copy(), low=exp.func("least", v0.copy(), v1.copy()),
                    high=exp.func("greatest", v0.copy(), v1.copy())),
        exp.NullSafeNEQ(this=v0.copy(), expression=v1.copy()))
    one_null = exp.and_(exp.NEQ(this=exp.Paren(this=exp.Is(this=v0.copy(), expression=exp.Null())),
                                expression=exp.Paren(this=exp.Is(this=v1.copy(), expression=exp.Null()))),
                        exp.not_(exp.Is(this=x.copy(), expression=exp.Null())))
    return exp.or_(exp.paren(between), exp.paren(one_null))


def moved_rows(shape: ViewShape, log: LogInfo) -> exp.Query:
    """The log of ``log``'s table as a refresh reads it: its rows, and a row per key that a
    parameter's move may have taken in or out of the view."""
    branches: list[exp.Query] = [log_rows(log)]
    for i, ranged in enumerate(shape.ranges):
        if ranged.log != log:
            continue
        table = base_table(log, ranged.alias)
        values = exp.select(exp.alias_(_then(shape, i), "v0", quoted=True), exp.alias_(_now(ranged), "v1", quoted=True))
        branches.append(exp.select(
            *[exp.alias_(exp.column(c, table=ranged.alias, quoted=True), c, quoted=True) for c in log.key_columns],
            # after any window's start
            exp.alias_(exp.cast(exp.Literal.string("infinity"), "timestamptz"), "snaptime$$", quoted=True),
            exp.alias_(exp.Literal.string("U"), "dmltype$$", quoted=True),
            exp.alias_(exp.Literal.string("N"), "old_new$$", quoted=True),
            exp.alias_(exp.cast(exp.Null(), "timestamptz"), "xact_time$$", quoted=True),
        ).from_(table).join(exp.Subquery(this=values, alias=exp.TableAlias(this=ident(VALUES))), join_type="cross")
            .where(moved_condition(shape, i)))
    return exp.union(*branches, distinct=False)


def resolve(shape: ViewShape, statement: str) -> str:
    """``statement`` with each compared table's log read as :func:`moved_rows` gives it."""
    logs = {r.log.log_name: r.log for r in shape.ranges}
    return read_logs_as(statement, {name: moved_rows(shape, log) for name, log in logs.items()})


def _values(shape: ViewShape) -> exp.Select:
    return exp.select(*[exp.alias_(_now(r), value_column(i), quoted=True) for i, r in enumerate(shape.ranges)])


def update_sql(shape: ViewShape) -> str:
    """The parameters' values now (the record step, after the state that read the old ones)."""
    return sql_text(exp.update(_table(shape), {value_column(i): _now(r) for i, r in enumerate(shape.ranges)}))


def rebuild_sql(shape: ViewShape, current: Sequence[str] | None = None) -> list[str]:
    """After a complete refresh: the table of the values (``current``: its columns now, None if it
    is missing), refilled if it has today's columns, else made again."""
    columns = [value_column(i) for i in range(len(shape.ranges))]
    return refill_sql(parameters_name(shape.name), _values(shape), columns, current)


def drop_sql(view: str) -> str:
    return drop_table_sql(parameters_name(view))


class Ranges(Layered):
    """A view with range parameters: its own strategy (``under``), every statement reading the
    compared tables' logs with the rows a parameter's move put in play."""

    @classmethod
    def build(cls, shape: ViewShape, strategy_of: StrategyOf) -> Strategy:
        # Under it, the view without its range parameters, reading only its own tables' logs.
        own = {log for r in shape.ranges for log in r.own_logs}
        return cls(shape, strategy_of(dataclasses.replace(
            shape, ranges=(), logs=tuple(log for log in shape.logs if log not in own))))

    @classmethod
    def state_names(cls, view: str) -> list[str]:
        return [parameters_name(view)]

    def _resolved(self, statements: list[str]) -> list[str]:
        return [resolve(self.shape, s) for s in statements]

    def how(self) -> str:
        compared = ", ".join(f"{r.value} against ({r.subquery})" for r in self.shape.ranges)
        return (f"{self.under.how()}; when an uncorrelated subquery compared with rows moves, the rows between "
                f"its old and new value are recomputed as changed rows ({compared})")

    def read_sql(self, since: datetime | None, null_keys: tuple[bool, ...] = ()) -> str:
        return resolve(self.shape, self.under.read_sql(since, null_keys))

    def null_key_checks(self, since: datetime | None) -> list[str | None]:
        return [resolve(self.shape, c) if c else None for c in self.under.null_key_checks(since)]

    def state_update(self, since: datetime | None) -> list[str]:
        return [*self._resolved(self.under.state_update(since)), update_sql(self.shape)]

    def state_rebuild(self, columns_of: ColumnsOf) -> list[str]:
        return [*self.under.state_rebuild(columns_of),
                *rebuild_sql(self.shape, columns_of(qualified(parameters_name(self.shape.name))))]

    def stand_in_sql(self) -> list[str]:
        return [*self.under.stand_in_sql(), *rebuild_sql(self.shape)]
