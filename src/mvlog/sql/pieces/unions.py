"""Shaping set operations (UNION ALL, UNION, an aggregate over a UNION ALL) and FULL JOIN views:
shapes of their parts, each shaped by :func:`mvlog.sql.pieces.choice.shape_view` (``shape_branch``)
and keeping a key map of its own."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from sqlglot import exp

from mvlog.model import LogInfo
from mvlog.sql.analyze.analysis import Analysis, ViewClass, group_expressions
from mvlog.sql.parse.sqltree import full_join_parts, parsed, sql_text, union_of
from mvlog.sql.pieces.keying import group_key_columns
from mvlog.sql.pieces.shape import (
    BRANCH_COLUMN,
    ROW_KEY_COLUMN,
    ViewShape,
    add_hidden,
    col,
    downgrade,
    groups_name,
    keymap_name,
)

ShapeBranch = Callable[[str, Analysis, dict[str, LogInfo]], ViewShape]  # shapes a branch (choice.shape_view)


def union_all(name: str, analysis: Analysis, logs_by_alias: dict[str, LogInfo], logs: tuple[LogInfo, ...],
              shape_branch: ShapeBranch) -> ViewShape:
    """UNION ALL of keyable branches."""
    branches = analysis.branches
    return _shape_union(name, analysis.query, branches,
                        [{ref.alias: logs_by_alias[ref.display] for ref in b.tables} for b in branches], logs,
                        shape_branch)


def _shape_union(name: str, query: str, analyses: list[Analysis], logs_by_alias: list[dict[str, LogInfo]],
                 logs: tuple[LogInfo, ...], shape_branch: ShapeBranch, full_join: bool = False) -> ViewShape:
    """UNION ALL: every branch keyed on its own (``logs_by_alias[i]``: branch i's tables' logs);
    the view key is (branch number, the branch's key as row text)."""
    what = "FULL JOIN part" if full_join else "UNION ALL branch"
    branches, selects = [], []
    for i, (branch, by_alias) in enumerate(zip(analyses, logs_by_alias), 1):
        shape = shape_branch(name, branch, by_alias)
        if shape.branches:
            return downgrade(shape, query, f"{what} {i}: a FULL JOIN inside a UNION ALL branch is not "
                                           f"incrementally maintainable")
        if not shape.fast_possible:
            return downgrade(shape, query, f"{what} {i}: {'; '.join(shape.fast_reasons)}")
        # A branch keeps its own key map (and group table: an aggregate kept by state).
        keymap = keymap_name(name, i) if shape.keymap else None
        deltas = dataclasses.replace(shape.deltas, groups=groups_name(keymap)) if shape.deltas and keymap else None
        shape = dataclasses.replace(shape, keymap=keymap, deltas=deltas)
        select = branch.tree.copy()
        assert isinstance(select, exp.Select)  # every branch (of a UNION ALL, or a FULL JOIN's part) is a SELECT
        key = exp.Anonymous(this="ROW", expressions=[parsed(e) for e in shape.key_exprs])
        add_hidden(select, exp.Literal.number(i), BRANCH_COLUMN)
        add_hidden(select, exp.cast(key, exp.DataType.build("text")), ROW_KEY_COLUMN)
        branches.append(shape)
        selects.append(select)
    union = union_of(selects, distinct=False)
    return ViewShape(name, ViewClass.JOIN if full_join else ViewClass.UNION, (), logs,
                     (BRANCH_COLUMN, ROW_KEY_COLUMN), (BRANCH_COLUMN, ROW_KEY_COLUMN), sql_text(union),
                     branches=tuple(branches), branch_selects=tuple(sql_text(s) for s in selects),
                     full_join=full_join)


def union_distinct(name: str, analysis: Analysis, logs_by_alias: dict[str, LogInfo],
                   logs: tuple[LogInfo, ...], shape_branch: ShapeBranch) -> ViewShape:
    """UNION: a DISTINCT over the UNION ALL of its branches, each a ``SELECT DISTINCT`` keyed by its
    output rows and key-mapped on its own (base rows -> output row). The view key is the output
    row; an affected row is recomputed from every branch, and goes when no branch yields it."""
    branches = _branch_shapes(name, analysis, logs_by_alias, "UNION branch", len(analysis.branches[0].tree.selects),
                              shape_branch)
    if isinstance(branches, str):
        return downgrade(ViewShape(name, ViewClass.OTHER, (), logs, (), (), ""), analysis.query, branches)
    if branches[0].hidden_columns:
        return downgrade(branches[0], analysis.query, "UNION: give every output expression of the first branch a "
                                                      "name (AS …)")
    return ViewShape(name, ViewClass.UNION, (), logs, branches[0].key_columns, (), sql_text(analysis.tree),
                     branches=tuple(branches), branch_selects=tuple(sql_text(b.tree)
                                                                    for b in analysis.branches), distinct=True)


def _branch_shapes(name: str, analysis: Analysis, logs_by_alias: dict[str, LogInfo], what: str,
                   width: int, shape_branch: ShapeBranch) -> list[ViewShape] | str:
    """Each of ``analysis.branches`` (a SELECT DISTINCT of ``width`` outputs) shaped with its own
    key map, or why one cannot be."""
    shapes = []
    for i, branch in enumerate(analysis.branches, 1):
        shape = shape_branch(name, branch, {ref.alias: logs_by_alias[ref.display] for ref in branch.tables})
        if not shape.fast_possible:
            return f"{what} {i}: {'; '.join(shape.fast_reasons)}"
        if len(shape.key_exprs) != width:
            return f"{what} {i} outputs one expression twice: not incrementally maintainable yet"
        shapes.append(dataclasses.replace(shape, keymap=keymap_name(name, i), deltas=None))
    return shapes


def over_union(name: str, analysis: Analysis, logs_by_alias: dict[str, LogInfo],
               logs: tuple[LogInfo, ...], shape_branch: ShapeBranch) -> ViewShape:
    """An aggregate over a UNION ALL: keyed by its groups like any aggregate; its branches (each a
    SELECT DISTINCT of the groups of its rows) find the affected groups, which the whole query,
    restricted to them, recomputes."""
    select = analysis.tree.copy()
    assert isinstance(select, exp.Select)  # the aggregate (analysis._analyze_over_union)
    groups = group_expressions(select)
    branches = _branch_shapes(name, analysis, logs_by_alias, "UNION ALL branch", len(groups), shape_branch)
    if isinstance(branches, str):
        return downgrade(ViewShape(name, ViewClass.OTHER, (), logs, (), (), ""), analysis.query, branches)
    key_columns, hidden = group_key_columns(select, groups)
    return ViewShape(name, ViewClass.AGGREGATE, (), logs, tuple(key_columns), tuple(hidden),
                     sql_text(select), key_exprs=tuple(sql_text(g) for g in groups),
                     branches=tuple(branches), over_union=True)


def full_join(name: str, analysis: Analysis, logs_by_alias: dict[str, LogInfo],
              logs: tuple[LogInfo, ...], shape_branch: ShapeBranch) -> ViewShape:
    """``P FULL JOIN b ON c …`` (``P``: the first table ``a`` and the tables inner-joined to it): its
    rows that hold a row of ``a`` are those of ``P LEFT JOIN b ON c …`` (root ``a``), the others
    those of ``P RIGHT JOIN b ON c … WHERE <a's key> IS NULL`` (root ``b``: the ``b`` rows without a
    partner). The two parts never share a row, so the view is their UNION ALL, each part
    refreshed as an outer-join view of its own."""
    first = analysis.tables[0]
    a_key = col(logs_by_alias[first.alias].key_columns[0], first.alias)
    select = analysis.tree
    assert isinstance(select, exp.Select)  # a join or aggregate view (see shape_view)
    parts = [dataclasses.replace(analysis, query=sql_text(tree), tree=tree)
             for tree in full_join_parts(select, a_key)]
    return _shape_union(name, analysis.query, parts, [logs_by_alias] * 2, logs, shape_branch, full_join=True)
