"""The analysis of queries made of several SELECTs: set operations (each branch a view of its own),
an aggregate over a UNION ALL (each branch a SELECT DISTINCT of its groups) and window functions
over a query (a partition recomputed whole). Each analyses its parts with the one-SELECT analysis
it is handed (:func:`mvlog.sql.analyze.analysis.analyze` hands its own)."""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from mvlog.sql.analyze.classes import Analysis, ViewClass, base_table_refs
from mvlog.sql.parse.restrictions import NotKeyable, group_expressions
from mvlog.sql.parse.sqltree import (
    identifier_name,
    join_side,
    own_aggregates,
    own_windows,
    partition_by,
    sql_text,
    window_parts,
)
from mvlog.sql.rewrite.normalize import set_operation_branches

# the analysis of one SELECT (query text, its tree, the NOT NULL columns if known)
AnalyzeSelect = Callable[[str, exp.Select, "set[tuple[str, str]] | None"], Analysis]


def analyze_set_operation(query: str, tree: exp.SetOperation, not_null: set[tuple[str, str]] | None,
                          analyze_select: AnalyzeSelect) -> Analysis:
    """UNION ALL: each branch is a view of its own (a hidden branch number joins the view key).
    UNION: a DISTINCT over the UNION ALL of its branches; each branch is made SELECT DISTINCT
    (its output rows are its key) and an affected row is recomputed from every branch."""
    tables = base_table_refs(tree)
    distinct = isinstance(tree, exp.Union) and bool(tree.args.get("distinct"))
    branches = set_operation_branches(tree, distinct)
    if branches is None:
        within = [type(t).__name__.upper() for t in tree.find_all(exp.SetOperation) if not isinstance(t, exp.Union)]
        why = (f"set operations ({within[0]}) are not incrementally maintainable" if within else
               "a UNION (distinct) inside a UNION ALL is not incrementally maintainable: write UNION throughout, "
               "or UNION ALL")
        return Analysis(query, tree, ViewClass.OTHER, tables, [why])
    what = "UNION branch" if distinct else "UNION ALL branch"
    reasons = []
    if tree.args.get("limit") or tree.args.get("offset"):
        reasons.append("LIMIT/OFFSET is not incrementally maintainable")
    analyses = []
    for i, branch in enumerate(branches, 1):
        if not isinstance(branch, exp.Select):
            reasons.append(f"{what} {i} is not a SELECT")
            continue
        analysis = analyze_select(sql_text(branch), branch.copy(), not_null)
        if distinct and analysis.fast_possible and analysis.view_class not in (ViewClass.SIMPLE, ViewClass.JOIN):
            reasons.append(f"{what} {i}: a UNION of aggregates or window functions is not incrementally "
                           f"maintainable (UNION ALL is)")
        elif distinct and analysis.fast_possible:
            rows = branch.copy()
            rows.set("distinct", exp.Distinct())
            analysis = analyze_select(sql_text(rows), rows, not_null)
        reasons += [f"{what} {i}: {reason}" for reason in analysis.reasons]
        analyses.append(analysis)
    return Analysis(query, tree, ViewClass.OTHER if reasons else ViewClass.UNION, tables, reasons,
                    [] if reasons else analyses, distinct=distinct)


def plain_distinct(query: exp.Expr) -> bool:
    """A SELECT DISTINCT (not DISTINCT ON) that is not itself an aggregate."""
    if not isinstance(query, exp.Select):
        return False
    distinct = query.args.get("distinct")
    return (distinct is not None and distinct.args.get("on") is None and not query.args.get("group")
            and not own_aggregates(query) and not own_windows(query))


def analyze_over_union(query: str, tree: exp.Select, source: exp.Subquery, not_null: set[tuple[str, str]],
                       analyze_select: AnalyzeSelect) -> Analysis:
    """An aggregate over a UNION ALL (``SELECT g, sum(v) FROM (… UNION ALL …) s GROUP BY g``), a
    UNION or a SELECT DISTINCT (one branch): each branch with the outer WHERE and the groups moved
    into it (its outputs in place of ``s``'s columns) is a ``SELECT DISTINCT`` of the groups its
    rows fall in, keyed and key-mapped on its own; an affected group is recomputed by the whole
    query. Exact because a row of the derived table is in the group its source rows' outputs give,
    whether or not a DISTINCT keeps it: a group changes only where a changed row was or is."""
    tables = base_table_refs(tree)
    branches = set_operation_branches(source.this, distinct=True)
    alias = identifier_name(source.args["alias"].this) if source.args.get("alias") else None
    if branches is None or alias is None or not (
            tree.args.get("distinct") or tree.args.get("group") or own_aggregates(tree)):
        return Analysis(query, tree, ViewClass.OTHER, tables, [
            "FROM items other than tables (subqueries, functions, VALUES) are not incrementally maintainable, but for "
            "an aggregate over a UNION ALL"])
    reasons = []
    if any(tree.args.get(k) for k in ("limit", "offset", "fetch", "with_")) or own_windows(tree):
        reasons.append("only GROUP BY, HAVING and WHERE over a UNION ALL are incrementally maintainable")
    def outer(node: exp.Expr | None) -> bool:  # in the aggregate's own query, not in the UNION ALL
        while node is not None and node is not source:
            node = node.parent
        return node is None

    if any(s is not tree and outer(s) for s in tree.find_all(exp.Select)) or (
            tree.args.get("distinct") is not None and tree.args["distinct"].args.get("on") is not None):
        reasons.append("subqueries and DISTINCT ON over a UNION ALL are not incrementally maintainable")
    if any(not c.table or identifier_name(c.args["table"]) != alias for c in tree.find_all(exp.Column) if outer(c)):
        reasons.append(f"every column over a UNION ALL must be one of {alias}'s")
    try:
        groups = group_expressions(tree)
    except NotKeyable as exc:
        groups, reasons = [], reasons + [str(exc)]
    if not groups and not reasons:
        reasons.append("a global aggregate over a UNION ALL is not incrementally maintainable")
    if reasons:
        return Analysis(query, tree, ViewClass.OTHER, tables, reasons)
    names = [s.alias_or_name for s in branches[0].selects] if isinstance(branches[0], exp.Select) else []
    units = []
    for i, branch in enumerate(branches, 1):
        if (not isinstance(branch, exp.Select) or len(branch.selects) != len(names) or own_windows(branch)
                or own_aggregates(branch) or any(branch.args.get(k) for k in ("group", "having", "limit"))
                or (branch.args.get("distinct") and not plain_distinct(branch))):
            reasons.append(f"UNION ALL branch {i}: only filters, projections and joins under an aggregate are "
                           f"incrementally maintainable")
            continue
        outputs = {n: (p.this if isinstance(p, exp.Alias) else p) for n, p in zip(names, branch.selects)}

        def moved(node: exp.Expr, outputs: dict = outputs) -> exp.Expr:
            return node.copy().transform(
                lambda c: outputs[identifier_name(c.this)].copy() if isinstance(c, exp.Column) else c)

        unit = branch.copy()
        unit.set("expressions", [moved(g) for g in groups])
        unit.set("distinct", exp.Distinct())
        if tree.args.get("where"):
            unit.where(moved(tree.args["where"].this), copy=False)
        analysis = analyze_select(sql_text(unit), unit, not_null)
        reasons += [f"UNION ALL branch {i}: {reason}" for reason in analysis.reasons]
        units.append(analysis)
    return Analysis(query, tree, ViewClass.OTHER if reasons else ViewClass.AGGREGATE, tables, reasons,
                    [] if reasons else units, over_union=not reasons)


def analyze_window(query: str, tree: exp.Select, not_null: set[tuple[str, str]] | None,
                   analyze_select: AnalyzeSelect) -> Analysis:
    """Window functions sharing a PARTITION BY over a simple, inner- or outer-join query,
    optionally filtered and projected by an outer query: a partition is recomputed whole."""
    outer, inner = window_parts(tree)
    reasons = []
    if outer is not None and (
            any(outer.args.get(k) for k in ("group", "having", "distinct", "limit", "offset", "fetch", "with_"))
            or any(n.find_ancestor(exp.Select) is outer for n in outer.find_all(exp.AggFunc))
            or any(s.find_ancestor(exp.Select) is outer and s is not inner for s in outer.find_all(exp.Select))):
        reasons.append("only filters and projections over a query with window functions are incrementally maintainable")
    if not partition_by(inner):
        reasons.append("window functions without a PARTITION BY that they all share are not incrementally "
                       "maintainable: every row would depend on every row")
    base = inner.copy()
    for window in own_windows(base):
        window.replace(exp.Null())
    analysis = analyze_select(sql_text(base), base, not_null)
    reasons += analysis.reasons
    if analysis.view_class not in (ViewClass.SIMPLE, ViewClass.JOIN) and not analysis.reasons:
        reasons.append("window functions over an aggregate are not incrementally maintainable")
    if analysis.semi_joins or any(join_side(j) in ("FULL", "CROSS") for j in inner.args.get("joins") or []):
        reasons.append("window functions over a FULL JOIN, comma joins or subqueries are not incrementally "
                       "maintainable")
    if reasons:
        return Analysis(query, tree, ViewClass.OTHER, base_table_refs(tree), reasons)
    return Analysis(query, tree, ViewClass.WINDOW, analysis.tables)
