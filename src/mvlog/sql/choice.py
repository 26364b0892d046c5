"""Which shape a view has and which strategy keeps it: the one place, after the classifier
(:mod:`mvlog.sql.analysis`), that looks at a view's class.

| shape | strategy |
|---|---|
| complete only ("other") | :class:`~mvlog.sql.strategy.Strategy` |
| one table | :class:`~mvlog.sql.per_row.Simple` |
| inner joins | :class:`~mvlog.sql.per_row.Join` |
| outer joins, subqueries | :class:`~mvlog.sql.per_row.OuterJoin` |
| GROUP BY kept by state | :class:`~mvlog.sql.per_group.AggregateByDeltas` |
| GROUP BY recomputed per group | :class:`~mvlog.sql.per_group.AggregateRecomputed` |
| GROUP BY over outer joins | :class:`~mvlog.sql.per_group.OuterAggregate` |
| aggregate without GROUP BY | :class:`~mvlog.sql.per_group.GlobalAggregate` |
| window functions | :class:`~mvlog.sql.per_row.Window` |
| UNION ALL, FULL JOIN, GROUPING SETS | :class:`~mvlog.sql.union.UnionAll` (a strategy per branch) |
| UNION, aggregate over UNION ALL | :class:`~mvlog.sql.union.UnionDistinct` |
| pieces that do not merge (aggregates, windows over them, …) | :class:`~mvlog.sql.composed.ComposedRows` |
| a scalar subquery compared with rows | :class:`~mvlog.sql.ranges.Ranges` (the view's strategy under it) |
| ORDER BY … LIMIT (top-N) | :class:`~mvlog.sql.topn.TopRows` (the full view's strategy under it) |
"""

from __future__ import annotations

import dataclasses

from mvlog.model import LogInfo
from mvlog.sql import composed, keying, ranges, topn
from mvlog.sql.analysis import Analysis, ViewClass
from mvlog.sql.per_group import AggregateByDeltas, AggregateRecomputed, GlobalAggregate, OuterAggregate
from mvlog.sql.per_row import Join, OuterJoin, Simple, Window
from mvlog.sql.shape import Ranged, ViewShape, downgrade
from mvlog.sql.strategy import Strategy
from mvlog.sql.union import UnionAll, UnionDistinct


def strategy_of(shape: ViewShape) -> Strategy:
    """The strategy that keeps a view of ``shape``."""
    if not shape.fast_possible:
        return Strategy(shape)
    if shape.top is not None:
        return topn.TopRows(shape, strategy_of(topn.full_shape(shape)))
    if shape.composed is not None:
        return composed.ComposedRows(shape, [strategy_of(piece.inner) for piece in shape.composed.pieces])
    if shape.ranges:
        own = {log for r in shape.ranges for log in r.own_logs}
        return ranges.Ranges(shape, strategy_of(dataclasses.replace(
            shape, ranges=(), logs=tuple(log for log in shape.logs if log not in own))))
    if shape.branches:
        branches = [strategy_of(branch) for branch in shape.branches]
        return (UnionDistinct if shape.distinct or shape.over_union else UnionAll)(shape, branches)
    if shape.view_class is ViewClass.SIMPLE:
        return Simple(shape)
    if shape.partition_exprs:
        return Window(shape)
    if shape.global_aggregate:
        return GlobalAggregate(shape)
    if shape.view_class is ViewClass.AGGREGATE:
        if shape.outer:
            return OuterAggregate(shape)
        return AggregateByDeltas(shape) if shape.deltas is not None else AggregateRecomputed(shape)
    return OuterJoin(shape) if shape.outer else Join(shape)


def shape_view(name: str, analysis: Analysis, logs_by_alias: dict[str, LogInfo]) -> ViewShape:
    """Join the analysis of a view with its logs (``logs_by_alias``: FROM alias -> log), by the
    builder of its shape (:mod:`mvlog.sql.keying`)."""
    logs = tuple(dict.fromkeys(logs_by_alias[ref.alias] for ref in analysis.read_tables))
    if analysis.view_class is ViewClass.OTHER or analysis.reasons:
        return keying.complete_only(name, analysis, logs)
    if analysis.ranges:
        shape = shape_view(name, dataclasses.replace(analysis, ranges=[]), logs_by_alias)
        if not shape.fast_possible:
            return shape
        return dataclasses.replace(shape, logs=tuple(dict.fromkeys(shape.logs + logs)), ranges=tuple(
            Ranged(logs_by_alias[r.alias], r.alias, r.value, r.subquery,
                   tuple(dict.fromkeys(log for t in r.tables if (log := logs_by_alias[t.alias]) not in shape.logs)))
            for r in analysis.ranges))
    if analysis.parameters and (analysis.view_class is not ViewClass.AGGREGATE or keying.has_full_join(analysis)):
        return downgrade(keying.complete_only(name, analysis, logs), analysis.query,
                         "an uncorrelated subquery is kept only in the HAVING of an aggregate over one table or "
                         "inner joins")
    if analysis.parameters:
        return with_parameters(keying.keyed(name, analysis, logs_by_alias, logs, aggregate=True), analysis,
                               tuple(dict.fromkeys(logs_by_alias[ref.alias] for ref in analysis.parameters)))
    if analysis.view_class is ViewClass.UNION and analysis.distinct:
        return keying.union_distinct(name, analysis, logs_by_alias, logs, shape_view)
    if analysis.over_union:
        return keying.over_union(name, analysis, logs_by_alias, logs, shape_view)
    if analysis.view_class is ViewClass.UNION:
        return keying.union_all(name, analysis, logs_by_alias, logs, shape_view)
    if keying.has_full_join(analysis):
        return keying.full_join(name, analysis, logs_by_alias, logs, shape_view)
    if analysis.view_class is ViewClass.SIMPLE:
        return keying.simple(name, analysis, logs_by_alias, logs)
    if analysis.view_class is ViewClass.WINDOW:
        return keying.window(name, analysis, logs_by_alias, logs)
    return keying.keyed(name, analysis, logs_by_alias, logs, aggregate=analysis.view_class is ViewClass.AGGREGATE)


def with_parameters(shape: ViewShape, analysis: Analysis, parameter_logs: tuple[LogInfo, ...]) -> ViewShape:
    """An aggregate whose HAVING compares its groups with parameters (uncorrelated scalar
    subqueries): kept by deltas, every group evaluated again from its state when a parameter's
    tables change; an aggregate not kept by deltas would have to read every group's rows again,
    which costs what a complete refresh does."""
    if not shape.fast_possible:
        return shape
    return parameters_kept(dataclasses.replace(shape, parameter_logs=parameter_logs), analysis.query)


def parameters_kept(shape: ViewShape, query: str) -> ViewShape:
    """``shape``, or complete-only if it has parameters but is not kept by deltas (also once apply
    found its sums inexact: :meth:`mvlog.pipeline.apply.Registrar._exact`)."""
    if shape.parameter_logs and shape.deltas is None:
        return downgrade(shape, query, f"an uncorrelated subquery in HAVING is kept only for aggregates kept by "
                                       f"deltas (count, sum, avg, min, max, count(DISTINCT)), and here "
                                       f"{shape.recompute_reason}")
    return shape
