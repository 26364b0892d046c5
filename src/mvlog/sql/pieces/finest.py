"""A grouping-sets aggregate (ROLLUP, CUBE, GROUPING SETS) inside a composed view, as the same
grouping over its finest level: ``SELECT a, b, sum(x) … GROUP BY ROLLUP (a, b)`` as ``SELECT
f.mvlog_fg1 AS a, f.mvlog_fg2 AS b, sum(f.mvlog_fa1) … FROM (SELECT a AS mvlog_fg1, b AS
mvlog_fg2, sum(x) AS mvlog_fa1 … GROUP BY a, b) f GROUP BY ROLLUP (f.mvlog_fg1, f.mvlog_fg2)``.

Kept as a piece of its own, a grouping-sets aggregate is a UNION ALL of one aggregate per grouping
set (:mod:`mvlog.sql.rewrite.groupingsets`), each with its key map and group table over the same
base tables: TPC-DS q67's eight ROLLUP levels each paid a group-table delta and a key-map insert
(0.4-0.8 s each at scale 0.5, BENCHMARKS.md session 57). Split, only the finest level is a piece;
the coarser levels are grouped from its rows by the query on top, which a composed view computes
again on each refresh anyway (:mod:`mvlog.sql.strategies.composed`).

Only aggregates that group again exactly are split: ``sum``, ``count``, ``min`` and ``max``, without
DISTINCT or FILTER, no other function sqlglot does not know (``jsonb_agg`` would be grouped again
over the finest level's rows), and a sum only of ``bigint``, ``numeric``, ``interval`` or ``money``
at the finest level (a sum of floating-point values summed twice would round otherwise than the
query does). A sum or count grouped again is cast back to the finest level's type (``sum`` of
``bigint`` is ``numeric``; ``count`` over no rows is 0, not NULL). ``types_of`` says the finest
level's output types (None: it cannot be described, and nothing is split). An ORDER BY is dropped
(a derived table's rows have no order), and a select with LIMIT, OFFSET or its own WITH is left as
it is. The split select remembers the select it was (:func:`unsplit`), which the decomposer tries
as a piece when the finest level cannot be one.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from mvlog.sql.parse.restrictions import has_grouping_sets
from mvlog.sql.parse.sqltree import DIALECT, sql_text
from mvlog.sql.pieces.shape import ident

TypesOf = Callable[[str], "list[str] | None"]
Inline = Callable[[exp.Expr], exp.Expr]  # a query with the CTEs it reads inlined, to describe it
FINEST, GROUP, AGGREGATE = "mvlog_f", "mvlog_fg", "mvlog_fa"
GROUPS_AGAIN = (exp.Sum, exp.Count, exp.Min, exp.Max)
SUMMED_AGAIN = {"bigint", "numeric", "interval", "money"}  # a sum's types that sum again exactly
UNSPLIT = "mvlog_unsplit"  # the meta key under which a split select keeps the select it was


def _group_expressions(group: exp.Group) -> list[exp.Expr] | None:
    """Every expression ``group`` groups by, once each (None: a position, ``ROLLUP (1, 2)``)."""
    found: dict[str, exp.Expr] = {}
    for node in group.find_all(exp.Expr):
        if isinstance(node, (exp.Group, exp.Rollup, exp.Cube, exp.GroupingSets, exp.Tuple, exp.Paren)):
            continue
        if isinstance(node.parent, (exp.Group, exp.Rollup, exp.Cube, exp.GroupingSets, exp.Tuple, exp.Paren)):
            if isinstance(node, exp.Literal):
                return None
            found.setdefault(sql_text(node), node)
    return list(found.values())


def _own(select: exp.Select, node: exp.Expr) -> bool:
    return node.find_ancestor(exp.Select) is select


def _aggregates(select: exp.Select) -> list[exp.AggFunc] | None:
    """The aggregates ``select`` computes itself (not GROUPING), None if one does not group again exactly."""
    parts = [*select.expressions, select.args.get("having")]
    found = [a for part in parts if part is not None for a in part.find_all(exp.AggFunc)
             if _own(select, a) and not isinstance(a, exp.Grouping)]
    for aggregate in found:
        if (not isinstance(aggregate, GROUPS_AGAIN) or aggregate.find(exp.Distinct)
                or isinstance(aggregate.parent, exp.Filter)):
            return None
    return found


def _output_name(projection: exp.Expr) -> exp.Identifier | None:
    """The name PostgreSQL gives ``projection``'s column (its identifier as written, so that its
    case folds as it did), kept by the split: an aggregate grouped again is a cast, which PostgreSQL
    would name after its type. None for a name it makes up (``?column?``)."""
    if isinstance(projection, exp.Alias):
        return projection.args["alias"].copy()
    if isinstance(projection, exp.Column) and isinstance(projection.this, exp.Identifier):
        return projection.this.copy()
    if isinstance(projection, (*GROUPS_AGAIN, exp.Grouping)):
        return ident(type(projection).key)
    return None


def _splittable(select: exp.Select) -> bool:
    """Whether ``select`` groups by grouping sets and has nothing the split would change."""
    if not has_grouping_sets(select.args.get("group")):
        return False
    if any(select.args.get(k) for k in ("distinct", "windows", "limit", "offset", "fetch", "with_")):
        return False
    parts = [*select.expressions, select.args.get("having")]
    return not any(part is not None and part.find(exp.Subquery, exp.Window, exp.Anonymous) for part in parts)


def split_grouping_sets(select: exp.Select, types_of: TypesOf, inline: Inline) -> exp.Select | None:
    """``select`` (see the module) as the same grouping sets over its finest level, a derived table;
    None when it is not that shape, or something in it does not group again exactly."""
    if not _splittable(select):
        return None
    keys = _group_expressions(select.args["group"])
    aggregates = _aggregates(select)
    if not keys or aggregates is None:
        return None
    names: dict[str, str] = {}
    inner_items = []
    for i, key in enumerate(keys, start=1):
        names[sql_text(key)] = f"{GROUP}{i}"
        inner_items.append(exp.alias_(key.copy(), ident(f"{GROUP}{i}")))
    again: dict[str, exp.AggFunc] = {}
    for aggregate in aggregates:
        text = sql_text(aggregate)
        if text not in again:
            again[text] = aggregate
            names[text] = f"{AGGREGATE}{len(again)}"
            inner_items.append(exp.alias_(aggregate.copy(), ident(names[text])))
    inner = select.copy()
    for arg in ("expressions", "having", "order", "limit", "offset", "group", "with_"):
        inner.set(arg, None)
    inner.set("expressions", inner_items)
    inner.set("group", exp.Group(expressions=[k.copy() for k in keys]))
    types = types_of(sql_text(inline(inner)))
    if types is None or len(types) != len(inner_items):
        return None
    typed = {item.alias: kind for item, kind in zip(inner_items, types)}
    if any(typed[names[text]] not in (SUMMED_AGAIN if isinstance(a, exp.Sum) else {"bigint"})
           for text, a in again.items() if isinstance(a, (exp.Sum, exp.Count))):
        return None

    def column(name: str) -> exp.Column:
        return exp.column(ident(name), table=ident(FINEST))

    def grouped_again(text: str) -> exp.Expr:
        aggregate, name = again[text], names[text]
        if isinstance(aggregate, (exp.Min, exp.Max)):
            return type(aggregate)(this=column(name))
        summed: exp.Expr = exp.Sum(this=column(name))
        if isinstance(aggregate, exp.Count):
            summed = exp.func("coalesce", summed, exp.Literal.number(0))
        return exp.cast(summed, exp.DataType.build(typed[name], dialect=DIALECT))

    def swap(node: exp.Expr) -> exp.Expr:
        if isinstance(node, (exp.Alias, exp.Identifier)):
            return node
        text = sql_text(node)
        if text in again:
            return grouped_again(text)
        return column(names[text]) if text in names else node

    outer = select.copy()
    projections = []
    for projection in select.expressions:
        name = _output_name(projection)
        if name is None:
            return None
        expression = projection.this if isinstance(projection, exp.Alias) else projection
        projections.append(exp.alias_(expression.transform(swap), name))
    outer.set("expressions", projections)
    for arg in ("having", "group"):
        if select.args.get(arg) is not None:
            outer.set(arg, select.args[arg].transform(swap))
    for arg in ("joins", "where", "laterals", "prewhere", "order"):
        outer.set(arg, None)
    outer.set("from_", exp.From(this=exp.Subquery(this=inner, alias=exp.TableAlias(this=ident(FINEST)))))
    parts = [*outer.expressions, outer.args.get("having"), outer.args["group"]]
    if any(c.table != FINEST for part in parts if part is not None for c in part.find_all(exp.Column)):
        return None  # a column neither grouped nor aggregated (grouped by a key it depends on)
    outer.meta[UNSPLIT] = select.copy()
    return outer


def is_split(node: exp.Expr) -> bool:
    """Whether ``node`` is a grouping over a finest level this module split off: not a piece itself
    (kept as one, it would be a UNION ALL of one aggregate per set again), only its finest level."""
    return isinstance(node, exp.Select) and UNSPLIT in node.meta


def finest_level(split: exp.Expr) -> exp.Expr:
    """The finest level a split select (:func:`is_split`) groups again."""
    return split.args["from_"].this.this


def unsplit(split: exp.Expr) -> exp.Expr:
    """The select a split one (:func:`is_split`) was."""
    return split.meta[UNSPLIT].copy()


def split_every_grouping_set(tree: exp.Expr, types_of: TypesOf, inline: Inline) -> exp.Expr:
    """``tree`` with every grouping-sets aggregate it holds over its finest level (innermost first)."""
    for select in reversed(list(tree.find_all(exp.Select))):
        split = split_grouping_sets(select, types_of, inline)
        if split is None:
            continue
        if select is tree:
            tree = split
        else:
            select.replace(split)
    return tree

