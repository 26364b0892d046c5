"""Top-N views: ``ORDER BY … LIMIT n [OFFSET m]`` kept fast.

The query without its ORDER BY and LIMIT — the *full view* — is kept by the strategy of its own
shape, as any view is; it is never written to Delta. Its first ``offset + limit + margin`` rows, in
the view's order, are kept in PostgreSQL (``mvlog."top$_<view>"``, the *margin table*, with each
row's rank). A fast refresh reads the full view's changed rows (its strategy's fast read) and:

- takes the margin's rows whose key did not change, and the changed rows as they are now;
- ranks them in the view's order. Every row of the full view that is in neither set sorts after
  the margin's last row (the *cut*), because it sorted after it before and did not change; so the
  rows ranked before the cut are exactly the full view's first rows, as many as there are;
- if at least ``offset + limit`` rows rank before the cut, the view's rows are the ones ranked
  ``offset + 1 … offset + limit`` of them, and the margin keeps the rows before the cut (at most
  its capacity); otherwise the changes took more rows out of the top than the margin held below
  it, and the margin is recomputed: the full view's first rows, read at the refresh's snapshot.

A margin that held every row of the full view (it had fewer rows than the capacity) has no cut.
Ties: PostgreSQL returns any of the rows that tie on the ORDER BY; mvlog breaks them by the view
key, ascending — the view is the query with its key columns appended to its ORDER BY (verify
compares with that query). The Delta write replaces the keys of the margin, of the changed rows
and of the new top: a key the view holds is always among them, even after a refresh whose Delta
commit was not recorded (its top came from the same margin and a part of the same changes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime

from sqlglot import exp

from mvlog.model import HIDDEN_PREFIX, PRESENT
from mvlog.sql.generate.changes import key_names, keys_match
from mvlog.sql.generate.keymap import drop_table_sql, qualified, refill_sql, state_table
from mvlog.sql.parse.sqltree import parsed, sql_text, with_ctes
from mvlog.sql.pieces.shape import TopN, ViewShape, col, ident, top_name
from mvlog.sql.pieces.topspec import TopSpec
from mvlog.sql.strategies.strategy import ColumnsOf, Layered, Strategy, StrategyOf

RANK = HIDDEN_PREFIX + "rank"  # the margin table: the row's place in the view's order, from 1
WHOLE = HIDDEN_PREFIX + "whole"  # the margin table: it holds every row of the full view (no cut)
CUT = HIDDEN_PREFIX + "cut"  # candidates: 1 for the old cut (the margin's last row), else 0
ROW = HIDDEN_PREFIX + "r"  # candidates: rank in the view's order

CHANGED, OLD, CANDIDATES, RANKED, CUT_AT, NEW = (HIDDEN_PREFIX + n for n in (
    "changed", "old", "candidates", "ranked", "cut_at", "new"))


def keep_top(shape: ViewShape, spec: TopSpec, order: tuple[tuple[str, bool, bool], ...],
             columns: Sequence[str]) -> ViewShape:
    """The top-N view over the full view ``shape`` (``columns``: its columns as written)."""
    top = TopN(shape.select_sql, order, spec.limit, spec.offset, spec.limit, top_name(shape.name),
               tuple(columns))
    first = _ordered(_full(top), top, shape.key_columns).limit(spec.limit)
    if spec.offset:
        first = first.offset(spec.offset)
    return dataclasses.replace(shape, select_sql=sql_text(first), top=top, range_key=None)


def full_shape(shape: ViewShape) -> ViewShape:
    """The full view of a top-N view: the shape its own strategy keeps."""
    assert shape.top is not None
    return dataclasses.replace(shape, select_sql=shape.top.full_sql, top=None)


# -- SQL ------------------------------------------------------------------------------------------------


def _order_items(top: TopN, keys: Sequence[str], table: str | None = None) -> list[exp.Ordered]:
    items = [exp.Ordered(this=col(name, table), desc=desc, nulls_first=nulls_first)
             for name, desc, nulls_first in top.order]
    return items + [exp.Ordered(this=col(k, table), nulls_first=False) for k in keys]


def _full(top: TopN) -> exp.Select:
    return exp.select(exp.Star()).from_(exp.Subquery(this=parsed(top.full_sql),
                                                     alias=exp.TableAlias(this=ident("f"))))


def _ordered(select: exp.Select, top: TopN, keys: Sequence[str]) -> exp.Select:
    return select.order_by(*_order_items(top, keys), copy=False)


def _table(top: TopN) -> exp.Table:
    return state_table(top.table)


def _columns(top: TopN, table: str | None = None) -> list[exp.Column]:
    return [col(c, table) for c in top.columns]


def _window_rank(top: TopN, keys: Sequence[str], extra: Sequence[exp.Ordered] = ()) -> exp.Expr:
    return exp.Window(this=exp.Anonymous(this="row_number"),
                      order=exp.Order(expressions=[*_order_items(top, keys), *extra]))


def _recomputed(top: TopN, keys: Sequence[str], full: exp.Query | None = None) -> exp.Select:
    """The full view's first rows, ranked, read whole (a complete refresh's, a recompute's) from
    the query, or from ``full`` (the full view's rows now, from its state and its changes)."""
    rows = _full(top) if full is None else exp.select(exp.Star()).from_(
        exp.Subquery(this=full, alias=exp.TableAlias(this=ident("f"))))
    first = _ordered(rows, top, keys).limit(top.capacity)
    return (exp.select(*_columns(top), exp.alias_(_window_rank(top, keys), ident(RANK)),
                       exp.alias_(exp.LT(this=exp.Window(this=exp.Count(this=exp.Star())),
                                         expression=exp.Literal.number(top.capacity)), ident(WHOLE)))
            .from_(exp.Subquery(this=first, alias=exp.TableAlias(this=ident("f")))))


def _now_from_state(top: TopN, keys: Sequence[str], state: exp.Select) -> exp.Query:
    """The full view's rows now: those of its ``state`` (at the last refresh) whose key did not
    change, and the changed rows present now."""
    unchanged = exp.not_(exp.Exists(this=exp.select(exp.Literal.number(1)).from_(exp.Table(this=ident(CHANGED)))
                                     .where(keys_match(keys, CHANGED, "s"))))
    return exp.union(
        exp.select(*_columns(top, "s")).from_(exp.Subquery(this=state, alias=exp.TableAlias(this=ident("s"))))
        .where(unchanged),
        exp.select(*_columns(top)).from_(CHANGED).where(exp.column(ident(PRESENT))), distinct=False)


def _margin_ctes(top: TopN, keys: Sequence[str], changed: str, state: exp.Select | None = None
                 ) -> list[tuple[str, exp.Expr]]:
    """The CTEs of the changed rows, the old margin, the candidates ranked and the new margin
    (NEW: the view's columns, RANK, WHOLE), for a statement to be put under them. A recompute
    reads the full view's ``state`` and the changes if there is one (its group table), else the query."""
    unchanged = exp.not_(exp.Exists(this=exp.select(exp.Literal.number(1)).from_(exp.Table(this=ident(CHANGED)))
                                     .where(keys_match(keys, CHANGED, OLD))))
    old_whole = exp.func("coalesce", exp.Subquery(this=exp.select(exp.func("bool_and", col(WHOLE))).from_(OLD)),
                         exp.true())
    last = exp.Subquery(this=exp.select(exp.func("max", col(RANK))).from_(OLD))
    candidates = exp.union(
        exp.select(*_columns(top, OLD), exp.alias_(exp.Literal.number(0), ident(CUT))).from_(OLD).where(unchanged),
        exp.select(*_columns(top), exp.alias_(exp.Literal.number(0), ident(CUT))).from_(CHANGED)
        .where(exp.column(ident(PRESENT))),
        exp.select(*_columns(top), exp.alias_(exp.Literal.number(1), ident(CUT))).from_(OLD)
        .where(exp.and_(exp.not_(col(WHOLE)), exp.EQ(this=col(RANK), expression=last))),
        distinct=False)
    ranked = exp.select(exp.Star(), exp.alias_(_window_rank(top, keys, [exp.Ordered(this=col(CUT))]), ident(ROW))) \
        .from_(CANDIDATES)
    cut_at = exp.select(exp.alias_(exp.func("min", col(ROW)), ident(ROW))).from_(RANKED).where(
        exp.EQ(this=col(CUT), expression=exp.Literal.number(1)))
    cut = exp.Subquery(this=exp.select(col(ROW)).from_(CUT_AT))
    valid = enough_above_cut(cut, top)
    real = exp.EQ(this=col(CUT), expression=exp.Literal.number(0))
    count_real = exp.Subquery(this=exp.select(exp.Count(this=exp.Star())).from_(RANKED).where(real.copy()))
    kept = (exp.select(*_columns(top), exp.alias_(col(ROW), ident(RANK)),
                       exp.alias_(exp.and_(old_whole, exp.LTE(this=count_real, expression=exp.Literal.number(
                           top.capacity))), ident(WHOLE)))
            .from_(RANKED)
            .where(exp.and_(exp.paren(valid.copy()), real,
                            exp.LTE(this=col(ROW), expression=exp.Literal.number(top.capacity)),
                            exp.or_(exp.Is(this=cut.copy(), expression=exp.Null()),
                                    exp.LT(this=col(ROW), expression=cut.copy())))))
    full = _now_from_state(top, keys, state) if state is not None else None
    recomputed = exp.select(exp.Star()).from_(exp.Subquery(this=_recomputed(top, keys, full), alias=exp.TableAlias(
        this=ident("r")))).where(exp.not_(exp.paren(valid)))
    return [(CHANGED, parsed(changed)), (OLD, exp.select(exp.Star()).from_(_table(top))),
            (CANDIDATES, candidates), (RANKED, ranked), (CUT_AT, cut_at),
            (NEW, exp.union(kept, recomputed, distinct=False))]


def enough_above_cut(cut: exp.Expr, top: TopN) -> exp.Expr:
    """Whether the ranked candidates hold the view's rows: no cut (the margin held the whole full
    view), or at least ``offset + limit`` rows before it; else the margin is read again."""
    return exp.or_(exp.Is(this=cut.copy(), expression=exp.Null()),
                   exp.GT(this=cut.copy(), expression=exp.Literal.number(top.offset + top.limit)))


def _visible(top: TopN) -> exp.Expr:
    return exp.Between(this=col(RANK), low=exp.Literal.number(top.offset + 1),
                       high=exp.Literal.number(top.offset + top.limit))


def read_sql(top: TopN, keys: Sequence[str], changed: str, state: exp.Select | None = None) -> str:
    """The fast read: the keys of the old margin, of the changed rows and of the new top, LEFT
    JOIN the new top's rows (PRESENT)."""
    names = key_names(len(keys))
    as_keys = [exp.alias_(col(k), ident(n)) for k, n in zip(keys, names)]
    affected = exp.union(exp.select(*as_keys).from_(OLD), exp.select(*[col(n) for n in names]).from_(CHANGED),
                         exp.select(*[a.copy() for a in as_keys]).from_(NEW).where(_visible(top)))
    rows = exp.select(*_columns(top), exp.alias_(exp.true(), ident(PRESENT))).from_(NEW).where(_visible(top))
    query = (exp.select(exp.column(exp.Star(), table=ident("k")), exp.column(exp.Star(), table=ident("v")))
             .from_(exp.Subquery(this=affected, alias=exp.TableAlias(this=ident("k"))))
             .join(exp.Subquery(this=rows, alias=exp.TableAlias(this=ident("v"))),
                   on=keys_match(keys, "k", "v"), join_type="left"))
    return sql_text(with_ctes(query, _margin_ctes(top, keys, changed, state)))


def update_sql(top: TopN, keys: Sequence[str], changed: str, state: exp.Select | None = None) -> str:
    """The margin at the refresh's end, in one statement (its CTEs all see the margin as it was)."""
    insert = exp.insert(exp.select(*_columns(top), col(RANK), col(WHOLE)).from_(NEW), _table(top),
                        columns=[*top.columns, RANK, WHOLE])
    ctes = [*_margin_ctes(top, keys, changed, state), (HIDDEN_PREFIX + "gone", exp.Delete(this=_table(top)))]
    return sql_text(with_ctes(insert, ctes))


def rebuild_sql(top: TopN, keys: Sequence[str], current: Sequence[str] | None) -> list[str]:
    """After a complete refresh: the margin from the full view (``current``: the margin table's
    columns now, None if it is missing); a table of other columns is made again."""
    return refill_sql(top.table, _recomputed(top, keys), [*top.columns, RANK, WHOLE], current)


def stand_in_sql(top: TopN, keys: Sequence[str]) -> list[str]:
    """An empty margin table of today's columns, for PostgreSQL to plan the statements against."""
    empty = exp.select(exp.Star()).from_(exp.Subquery(this=_recomputed(top, keys), alias=exp.TableAlias(
        this=ident("m")))).limit(0)
    create = exp.Create(this=_table(top), kind="TABLE", expression=empty)
    return [drop_table_sql(top.table), sql_text(create)]


class TopRows(Layered):
    """A top-N view: its full view kept by ``under``, its first rows from the margin."""

    def __init__(self, shape: ViewShape, full: Strategy):
        super().__init__(shape, full)
        assert shape.top is not None
        self.top: TopN = shape.top

    @classmethod
    def build(cls, shape: ViewShape, strategy_of: StrategyOf) -> Strategy:
        return cls(shape, strategy_of(full_shape(shape)))

    @classmethod
    def state_names(cls, view: str) -> list[str]:
        return [top_name(view)]

    def how(self) -> str:
        top = self.top
        return (f"the query without ORDER BY/LIMIT is kept fast ({self.under.how()}); its first {top.capacity} rows "
                f"(LIMIT {top.limit}, OFFSET {top.offset}, and {top.margin} below) are kept in mvlog.{top.table}, "
                f"merged with the changed rows on each refresh and read again — from "
                f"{'its group state' if self.under.rows_from_state() is not None else 'the query'} — only when "
                f"changes leave fewer than {top.offset + top.limit} above the margin's last row; ties by the view key")

    def read_sql(self, since: datetime | None, null_keys: tuple[bool, ...] = ()) -> str:
        return read_sql(self.top, self.shape.key_columns, self.under.read_sql(since, null_keys),
                        self.under.rows_from_state())

    def state_update(self, since: datetime | None) -> list[str]:
        # The margin's update reads the full view's state as of the last refresh: first. A key
        # that may hold a NULL is read null-safely (exact either way).
        return [update_sql(self.top, self.shape.key_columns, self.under.recorded_read_sql(since),
                           self.under.rows_from_state()),
                *self.under.state_update(since)]

    def state_rebuild(self, columns_of: ColumnsOf) -> list[str]:
        return [*self.under.state_rebuild(columns_of),
                *rebuild_sql(self.top, self.shape.key_columns, columns_of(qualified(self.top.table)))]

    def stand_in_sql(self) -> list[str]:
        return [*self.under.stand_in_sql(), *stand_in_sql(self.top, self.shape.key_columns)]
