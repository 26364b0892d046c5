"""GROUPING SETS, ROLLUP and CUBE as the UNION ALL of one plain aggregate per grouping set.

``SELECT a, b, sum(x), GROUPING(a, b) FROM t GROUP BY ROLLUP (a, b)`` has the rows of ``SELECT a, b,
sum(x), 0 … GROUP BY a, b UNION ALL SELECT a, NULL, sum(x), 1 … GROUP BY a UNION ALL SELECT NULL,
NULL, sum(x), 3 FROM t``: in each set, a grouping expression the set leaves out is NULL outside
aggregate arguments, and ``GROUPING(…)`` is the bit mask of the arguments left out (PostgreSQL's
rules). A view of that shape is then kept as a UNION ALL of aggregates: per branch by deltas or by
state, its key the branch number (the grouping set) and the branch's group columns.
"""

from __future__ import annotations

import itertools

from sqlglot import exp

from mvlog.sql.parse.restrictions import has_grouping_sets
from mvlog.sql.parse.sqltree import sql_text

Set = tuple[exp.Expr, ...]


def _units(items: list[exp.Expr]) -> list[Set]:
    """ROLLUP/CUBE arguments: ``(a, b)`` is one unit of two expressions."""
    return [tuple(i.expressions) if isinstance(i, exp.Tuple) else
            (i.this,) if isinstance(i, exp.Paren) else (i,) for i in items]


def _element_sets(element: exp.Expr) -> list[Set]:
    """The grouping sets one GROUP BY element stands for."""
    if isinstance(element, exp.Rollup):
        units = _units(element.expressions)
        return [tuple(e for u in units[:n] for e in u) for n in range(len(units), -1, -1)]
    if isinstance(element, exp.Cube):
        units = _units(element.expressions)
        return [tuple(e for u, keep in zip(units, mask) if keep for e in u)
                for mask in itertools.product((True, False), repeat=len(units))]
    if isinstance(element, exp.GroupingSets):
        return [s for item in element.expressions for s in (
            _element_sets(item) if isinstance(item, (exp.Rollup, exp.Cube, exp.GroupingSets))
            else _units([item]))]
    return [(element,)]


def grouping_sets(select: exp.Select) -> list[Set]:
    """The grouping sets of ``select``'s GROUP BY, in PostgreSQL's order (the cross product of
    its elements' sets; an expression repeated within a set counts once)."""
    sets: list[Set] = [()]
    for element in select.args["group"].expressions:
        sets = [a + b for a in sets for b in _element_sets(element)]
    return [tuple({_text(e): e for e in s}.values()) for s in sets]


def _text(node: exp.Expr) -> str:
    return sql_text(node)


def _nulled(node: exp.Expr, left_out: set[str]) -> None:
    """Each expression of ``left_out`` under ``node`` replaced by NULL, except in aggregate arguments."""
    if isinstance(node, exp.AggFunc):
        return
    for child in list(node.iter_expressions()):
        if _text(child) in left_out:
            child.replace(exp.Null())
        else:
            _nulled(child, left_out)


def _for_set(select: exp.Select, grouped: list[exp.Expr], left_out: set[str]) -> exp.Select:
    """The plain aggregate of one grouping set: ``grouped`` its GROUP BY, the expressions
    ``left_out`` (SQL texts) NULL outside aggregates, each GROUPING(…) its bit mask."""
    branch = select.copy()
    texts = {_text(e) for e in grouped}
    for node in list(branch.find_all(exp.Grouping)):
        mask = 0
        for argument in node.expressions:
            mask = (mask << 1) | (_text(argument) not in texts)
        node.replace(exp.Literal.number(mask))
    projections = []
    for projection in branch.expressions:
        if _text(projection) in left_out:  # the output keeps its name
            projection = exp.alias_(exp.Null(), exp.to_identifier(projection.alias_or_name, quoted=True))
        else:
            _nulled(projection, left_out)
        projections.append(projection)
    branch.set("expressions", projections)
    if branch.args.get("having") is not None:
        _nulled(branch.args["having"], left_out)
    branch.set("group", exp.Group(expressions=[e.copy() for e in grouped]) if grouped else None)
    return branch


def as_union(select: exp.Select) -> exp.Query | None:
    """``select`` (grouped by GROUPING SETS, ROLLUP or CUBE) as the UNION ALL of one aggregate per
    grouping set; None if it has no grouping sets, or has what a UNION ALL would change (LIMIT,
    OFFSET, DISTINCT, window functions). ORDER BY is dropped: a view's rows have no order."""
    if not has_grouping_sets(select.args.get("group")):
        return None
    if any(select.args.get(k) for k in ("limit", "offset", "fetch", "distinct")) or select.find(exp.Window):
        return None
    sets = grouping_sets(select)
    if any(isinstance(e, exp.Literal) for s in sets for e in s):
        return None  # GROUP BY ROLLUP (1, 2): positions mean other things in each branch
    every = {_text(e): e for s in sets for e in s}
    base = select.copy()
    base.set("order", None)
    branches = [_for_set(base, list(s), set(every) - {_text(e) for e in s}) for s in sets]
    return exp.union(*branches, distinct=False) if len(branches) > 1 else branches[0]
