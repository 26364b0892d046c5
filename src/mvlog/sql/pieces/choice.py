"""Which shape a view has: the one place, after the classifier (:mod:`mvlog.sql.analyze.analysis`),
that looks at a view's class to pick the builder of its shape (:mod:`mvlog.sql.pieces.keying`).
What keeps a shape is its :class:`~mvlog.sql.pieces.shape.ShapeKind`, mapped to a strategy by
:mod:`mvlog.sql.strategies.registry`.
"""

from __future__ import annotations

import dataclasses

from mvlog.model import LogInfo
from mvlog.sql.analyze.analysis import Analysis, ViewClass
from mvlog.sql.pieces import keying, unions
from mvlog.sql.pieces.shape import Ranged, ViewShape, downgrade


def shape_view(name: str, analysis: Analysis, logs_by_alias: dict[str, LogInfo]) -> ViewShape:
    """Join the analysis of a view with its logs (``logs_by_alias``: FROM alias -> log), by the
    builder of its shape (:mod:`mvlog.sql.pieces.keying`)."""
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
        return unions.union_distinct(name, analysis, logs_by_alias, logs, shape_view)
    if analysis.over_union:
        return unions.over_union(name, analysis, logs_by_alias, logs, shape_view)
    if analysis.view_class is ViewClass.UNION:
        return unions.union_all(name, analysis, logs_by_alias, logs, shape_view)
    if keying.has_full_join(analysis):
        return unions.full_join(name, analysis, logs_by_alias, logs, shape_view)
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
