"""A correlated scalar aggregate as a join with the aggregate grouped by its correlation —
TPC-H Q20's ``ps_availqty > (SELECT 0.5 * sum(l_quantity) FROM lineitem WHERE l_partkey =
ps_partkey AND l_suppkey = ps_suppkey AND …)`` inside an ``IN`` subquery, which the subquery
lineage cannot key. ``apply`` tries this when a view is otherwise complete-only; the aggregate
becomes a derived table that :mod:`mvlog.sql.strategies.composed` keeps as a fast piece of its own.

The rewrite of a conjunct ``x op (SELECT f(agg…) FROM t WHERE t.a = o.b AND local…)`` of a
SELECT's WHERE into ``x op d.value`` and ``(SELECT t.a AS key_1, f(agg…) AS value FROM t WHERE local…
GROUP BY t.a) d`` in FROM with ``d.key_1 = o.b`` in WHERE is exact when:

- the conjunct is one of the WHERE's top-level ANDs, so a NULL comparison drops the row;
- the aggregates are sum, avg, min or max, under arithmetic and casts only: over no rows the
  subquery is NULL, and the comparison drops the row — as the join does when no group matches;
- each correlation is an equality of an expression of the subquery's tables with a column of
  the SELECT's own FROM items: the rows it aggregates for an outer row are exactly one group,
  and a NULL outer column matches no group, as it matches no row.
"""

from __future__ import annotations

import functools

from sqlglot import exp
from sqlglot.errors import SqlglotError

from mvlog.sql.parse.sqltree import conjuncts, from_items, item_alias, parsed, sql_text, top_conjuncts

_COMPARISONS = (exp.GT, exp.GTE, exp.LT, exp.LTE, exp.EQ, exp.NEQ)
_NULL_ON_EMPTY = (exp.Sum, exp.Avg, exp.Min, exp.Max)
# What may sit around those aggregates: NULL in, NULL out.
_STRICT = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Paren, exp.Neg, exp.Cast, exp.Literal, exp.DataType,
           exp.Alias, exp.Identifier)
ALIAS_PREFIX = "mvlog_agg_"
VALUE = "value"


def _aliases(select: exp.Select) -> set[str] | None:
    """The aliases of ``select``'s FROM items, None if one is not a plain table joined inner."""
    for join in select.args.get("joins") or []:
        if join.side or (join.kind or "").upper() not in ("", "INNER", "CROSS"):
            return None
    items = from_items(select)
    if not items or not all(isinstance(i, exp.Table) and isinstance(i.this, exp.Identifier) for i in items):
        return None
    return {item_alias(i) for i in items}


def _reads_only(node: exp.Expr, aliases: set[str]) -> bool:
    columns = list(node.find_all(exp.Column))
    return bool(columns) and all(c.table in aliases for c in columns)


def _strict_aggregate(projection: exp.Expr) -> bool:
    """A projection NULL over no rows: sum/avg/min/max under arithmetic; columns only inside them."""
    body = projection.this if isinstance(projection, exp.Alias) else projection
    found = False
    for node in body.walk():
        if isinstance(node, _NULL_ON_EMPTY):
            found = True
        elif isinstance(node, exp.Column):
            if node.find_ancestor(*_NULL_ON_EMPTY) is None:
                return False
        elif not isinstance(node, _STRICT) and node.find_ancestor(*_NULL_ON_EMPTY) is None:
            return False
    return found and not any(isinstance(a, exp.AggFunc) and not isinstance(a, _NULL_ON_EMPTY)
                             for a in body.find_all(exp.AggFunc))


def _correlation(inner: exp.Select, outer: set[str]) -> tuple[list[tuple[exp.Expr, exp.Column]], list[exp.Expr]] | None:
    """The subquery's correlations (its expression, the outer column) and its own conditions."""
    own = _aliases(inner)
    if own is None or own & outer:
        return None
    where = inner.args.get("where")
    pairs: list[tuple[exp.Expr, exp.Column]] = []
    local: list[exp.Expr] = []
    for conjunct in conjuncts(where.this) if where is not None else []:
        if _reads_only(conjunct, own) or not list(conjunct.find_all(exp.Column)):
            local.append(conjunct)
            continue
        if not isinstance(conjunct, exp.EQ):
            return None
        for mine, theirs in ((conjunct.this, conjunct.expression), (conjunct.expression, conjunct.this)):
            if isinstance(theirs, exp.Column) and theirs.table in outer and _reads_only(mine, own):
                pairs.append((mine, theirs))
                break
        else:
            return None
    return (pairs, local) if pairs else None


def _decorrelatable(subquery: exp.Expr, outer: set[str]) -> bool:
    inner = subquery.this if isinstance(subquery, exp.Subquery) else None
    if not isinstance(inner, exp.Select) or len(inner.selects) != 1:
        return False
    if any(inner.args.get(k) for k in ("group", "having", "distinct", "limit", "offset", "order", "with_")):
        return False
    if inner.find(exp.Subquery, exp.Exists, exp.Window) is not None or not _strict_aggregate(inner.selects[0]):
        return False
    return _correlation(inner, outer) is not None


def _derived(inner: exp.Select, outer: set[str], alias: str) -> tuple[exp.Subquery, exp.Expr]:
    """The grouped derived table and its join condition with the outer columns."""
    correlation = _correlation(inner, outer)
    assert correlation is not None
    pairs, local = correlation
    keys = [exp.alias_(mine.copy(), exp.to_identifier(f"key_{i}", quoted=True)) for i, (mine, _) in enumerate(pairs, 1)]
    value = inner.selects[0]
    body = exp.select(*keys, exp.alias_((value.this if isinstance(value, exp.Alias) else value).copy(),
                                        exp.to_identifier(VALUE, quoted=True)))
    body.set("from_", inner.args["from_"].copy())
    body.set("joins", [j.copy() for j in inner.args.get("joins") or []])
    if local:
        body = body.where(exp.and_(*[c.copy() for c in local]), copy=False)
    body = body.group_by(*[mine.copy() for mine, _ in pairs], copy=False)
    on = exp.and_(*[exp.EQ(this=exp.column(exp.to_identifier(f"key_{i}", quoted=True),
                                           table=exp.to_identifier(alias, quoted=True)), expression=theirs.copy())
                    for i, (_, theirs) in enumerate(pairs, 1)])
    return exp.Subquery(this=body, alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True))), on


def scalar_aggregates(tree: exp.Expr) -> str | None:
    """The (qualified) query with its correlated scalar aggregates in WHERE conjuncts joined as
    grouped derived tables, or None if it has none that decorrelate exactly."""
    tree = tree.copy()
    count = 0
    for select in list(tree.find_all(exp.Select)):
        outer = _aliases(select)
        where = select.args.get("where")
        if outer is None or where is None or any(isinstance(s, exp.Star) for s in select.selects):
            continue  # (a SELECT * would output the derived tables' columns too)
        for conjunct in top_conjuncts(where.this):
            if not isinstance(conjunct, _COMPARISONS):
                continue
            for side in (conjunct.this, conjunct.expression):
                subquery = _strictly_under(side)
                if subquery is not None and _decorrelatable(subquery, outer):
                    count += 1
                    alias = f"{ALIAS_PREFIX}{count}"
                    derived, on = _derived(subquery.this, outer, alias)
                    subquery.replace(exp.column(exp.to_identifier(VALUE, quoted=True),
                                                table=exp.to_identifier(alias, quoted=True)))
                    # a comma join and the condition in WHERE: an ON would not see the other comma items
                    select.join(derived, copy=False)
                    select.where(on, copy=False)
                    outer = outer | {alias}
                    break
    return sql_text(tree) if count else None


@functools.lru_cache(maxsize=256)  # a view's select_sql is asked on each of its refreshes
def joined_form(query: str) -> str | None:
    """``query`` (mvlog's own SQL, its columns qualified) with its correlated scalar aggregates
    joined grouped (:func:`scalar_aggregates`), or None if it has none. PostgreSQL runs such a
    subquery once per outer row (a SubPlan): TPC-DS q06's average price of an item's category,
    13,809 times at scale 0.5."""
    if query.upper().count("SELECT") < 2:  # no subquery: not worth a parse
        return None
    try:
        tree = parsed(query)
    except SqlglotError:  # mvlog's own SQL parses; a read sent as written is never wrong
        return None
    return scalar_aggregates(tree)


def _strictly_under(side: exp.Expr) -> exp.Subquery | None:
    """The one subquery of a comparison's side if only NULL-in-NULL-out arithmetic surrounds it —
    q06's ``1.2 * (SELECT avg(…) …)`` is NULL where the subquery is —, else None."""
    subqueries = _outermost_subqueries(side)
    if len(subqueries) != 1:
        return None
    node: exp.Expr | None = subqueries[0]
    while node is not side:
        node = node.parent if node is not None else None
        if not isinstance(node, _STRICT):
            return None
    return subqueries[0]


def _outermost_subqueries(node: exp.Expr) -> list[exp.Subquery]:
    if isinstance(node, exp.Subquery):
        return [node]
    return [s for child in node.iter_expressions() for s in _outermost_subqueries(child)]
