"""Which strategy keeps a view: one line per :class:`~mvlog.sql.pieces.shape.ShapeKind`.

A new kind of view (or piece) is a strategy module in this folder and one line here, as a rule is
one function and one line in sqlglot's optimizer. A strategy builds the strategies it is layered
on (:meth:`~mvlog.sql.strategies.strategy.Strategy.build`: a top-N view's full view, a composed
view's pieces, a UNION ALL's branches) and names the state tables it keeps
(:meth:`~mvlog.sql.strategies.strategy.Strategy.state_names`), which ``apply`` creates, the
catalog drops with the view and ``status`` sizes.

| kind | strategy |
|---|---|
| complete only ("other") | :class:`~mvlog.sql.strategies.strategy.Strategy` |
| one table | :class:`~mvlog.sql.strategies.per_row.Simple` |
| inner joins | :class:`~mvlog.sql.strategies.per_row.Join` |
| outer joins, subqueries | :class:`~mvlog.sql.strategies.per_row.OuterJoin` |
| GROUP BY kept by state | :class:`~mvlog.sql.strategies.per_group.AggregateByDeltas` |
| GROUP BY recomputed per group | :class:`~mvlog.sql.strategies.per_group.AggregateRecomputed` |
| GROUP BY over outer joins | :class:`~mvlog.sql.strategies.per_group.OuterAggregate` |
| aggregate without GROUP BY | :class:`~mvlog.sql.strategies.per_group.GlobalAggregate` |
| window functions | :class:`~mvlog.sql.strategies.per_row.Window` |
| UNION ALL, FULL JOIN, GROUPING SETS | :class:`~mvlog.sql.strategies.union.UnionAll` (a strategy per branch) |
| UNION, aggregate over UNION ALL | :class:`~mvlog.sql.strategies.union.UnionDistinct` |
| a scalar subquery compared with rows | :class:`~mvlog.sql.strategies.ranges.Ranges` (the view's strategy under it) |
| pieces that do not merge (aggregates, windows over them, …) | :class:`~mvlog.sql.strategies.composed.ComposedRows` |
| ORDER BY … LIMIT (top-N) | :class:`~mvlog.sql.strategies.topn.TopRows` (the full view's strategy under it) |
"""

from __future__ import annotations

from mvlog.sql.pieces.shape import ShapeKind, ViewShape
from mvlog.sql.strategies.composed import ComposedRows
from mvlog.sql.strategies.per_group import AggregateByDeltas, AggregateRecomputed, GlobalAggregate, OuterAggregate
from mvlog.sql.strategies.per_row import Join, OuterJoin, Simple, Window
from mvlog.sql.strategies.ranges import Ranges
from mvlog.sql.strategies.strategy import Strategy
from mvlog.sql.strategies.topn import TopRows
from mvlog.sql.strategies.union import UnionAll, UnionDistinct

STRATEGIES: dict[ShapeKind, type[Strategy]] = {
    ShapeKind.COMPLETE: Strategy,
    ShapeKind.SIMPLE: Simple,
    ShapeKind.JOIN: Join,
    ShapeKind.OUTER_JOIN: OuterJoin,
    ShapeKind.AGGREGATE_BY_DELTAS: AggregateByDeltas,
    ShapeKind.AGGREGATE_RECOMPUTED: AggregateRecomputed,
    ShapeKind.OUTER_AGGREGATE: OuterAggregate,
    ShapeKind.GLOBAL_AGGREGATE: GlobalAggregate,
    ShapeKind.WINDOW: Window,
    ShapeKind.UNION_ALL: UnionAll,
    ShapeKind.UNION_DISTINCT: UnionDistinct,
    ShapeKind.RANGES: Ranges,
    ShapeKind.COMPOSED: ComposedRows,
    ShapeKind.TOP_N: TopRows,
}


def strategy_of(shape: ViewShape) -> Strategy:
    """The strategy that keeps a view of ``shape`` (and, under it, what it is layered on)."""
    return STRATEGIES[shape.kind].build(shape, strategy_of)


def state_names(view: str) -> list[str]:
    """The names of every state table any strategy may keep for the view ``view`` (each also as the
    prefix of its branches' and pieces' tables, ``<name>_b<i>``, ``<name>_p<i>``): what the catalog
    drops with the view, whatever the view's kind was, and sizes for ``status``."""
    return list(dict.fromkeys(name for strategy in STRATEGIES.values() for name in strategy.state_names(view)))
