"""A CTE read several times, each time restricted by a constant, sent ``NOT MATERIALIZED``.

PostgreSQL materializes a CTE its query references more than once: the CTE is computed whole,
once, and every reference scans that result with the planner's default guesses for its filters.
TPC-DS q04 reads its ``year_total`` (a UNION ALL of three channels' sales per customer and year)
six times, each restricted to one channel and one year (``t_s_firstyear.sale_type = 's' AND
t_s_firstyear.dyear = 2001``); the scans are estimated at a few dozen rows, are tens of thousands,
and are joined by nested loops: at SF 1 the read did not finish in 90 s (1,572 s in a whole-set
run). Inlined, each reference is planned with its own filter pushed into the CTE's body — one
channel's branch, one year's rows — and estimated from the tables: 7.0 s.

Inlining is not always better: a reference that keeps every row of the CTE recomputes it whole
(q30's and q81's correlated averages over ``customer_total_return``, 8 s materialized and beyond
90 s inlined), and PostgreSQL's estimates rank the two forms wrongly both ways (q04's inlined
form is estimated 50 times dearer). The rule keeps to what the measurements of the 18 TPC-DS
queries with such a CTE show (BENCHMARKS.md): a CTE is inlined when **every** reference to it is
restricted, in its SELECT's WHERE or inner join condition, by a comparison of one of its columns
with a constant, and that column is one PostgreSQL can push into the body (not an aggregate's or
a window's output, in no branch), in a body without LIMIT, OFFSET, DISTINCT ON or grouping sets.
A CTE written ``MATERIALIZED`` stays so; PostgreSQL itself keeps a CTE with volatile functions
materialized. The rows are the same either way: a CTE without side effects read twice in one
snapshot gives the same rows twice — so a body with what may differ between two computations of
the same rows (a window, which numbers ties as the plan meets them; an aggregate whose result
depends on the rows' order, ``string_agg``; a function mvlog does not know) is left materialized,
where its references share one result.
"""

from __future__ import annotations

import functools

from sqlglot import exp
from sqlglot.errors import SqlglotError

from mvlog.sql.parse.sqltree import identifier_name, item_alias, parsed, sql_text, top_conjuncts

_RESTRICTIONS = (exp.EQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between, exp.In)
# Aggregates whose result does not depend on the order of their rows (a float sum's last bits
# aside, as in any two plans of one query).
_ORDER_FREE = (exp.Sum, exp.Count, exp.Avg, exp.Min, exp.Max, exp.Stddev, exp.StddevPop, exp.StddevSamp,
               exp.Variance, exp.VariancePop, exp.LogicalAnd, exp.LogicalOr)


@functools.lru_cache(maxsize=256)  # a view's select_sql is asked on each of its refreshes
def inlined_form(query: str) -> tuple[str, tuple[str, ...]] | None:
    """``query`` with each CTE that every reference restricts by a constant (see the module)
    written ``NOT MATERIALIZED``, and those CTEs' names; None if it has no such CTE (or does not
    parse)."""
    if "WITH" not in query.upper():
        return None
    try:
        tree = parsed(query)
    except SqlglotError:  # mvlog's own SQL parses; a read sent as written is never wrong
        return None
    inlined = restricted_ctes(tree)
    for cte in inlined:
        cte.set("materialized", False)
    return (sql_text(tree), tuple(identifier_name(c.args["alias"].this) for c in inlined)) if inlined else None


def restricted_ctes(tree: exp.Expr) -> list[exp.CTE]:
    """The CTEs of ``tree`` (at any depth) PostgreSQL materializes, every reference to them
    restricted by a constant on a column PostgreSQL pushes into the CTE's body."""
    found = []
    for cte, references in materialized_ctes(tree):
        pushable = _pushable_columns(cte.this)
        if pushable and all(_restricted(r, pushable) for r in references):
            found.append(cte)
    return found


def materialized_ctes(tree: exp.Expr) -> list[tuple[exp.CTE, list[exp.Table]]]:
    """The CTEs of ``tree`` (at any depth) PostgreSQL materializes by default — referenced more
    than once, not recursive, not written ``MATERIALIZED`` or ``NOT MATERIALIZED`` — each with its
    references."""
    found = []
    for with_ in tree.find_all(exp.With):
        if with_.args.get("recursive") or with_.parent is None:
            continue
        for cte in with_.expressions:
            name = identifier_name(cte.args["alias"].this)
            references = [t for t in with_.parent.find_all(exp.Table)
                          if not t.args.get("db") and identifier_name(t.this) == name]
            if cte.args.get("materialized") is None and len(references) > 1:
                found.append((cte, references))
    return found


def _pushable_columns(body: exp.Expr) -> set[str]:
    """The output columns of a CTE's body a filter on can be pushed into it: those no branch
    computes with an aggregate; none when a branch is not :func:`_plain`, or selects a star."""
    branches = list(body.flatten()) if isinstance(body, exp.Union) else [body]
    if not all(isinstance(b, exp.Select) and _plain(b) for b in branches):
        return set()
    width = len(branches[0].expressions)
    if any(len(b.expressions) != width or any(p.is_star for p in b.expressions) for b in branches):
        return set()
    names = [_output_name(p) for p in branches[0].expressions]
    return {name for i, name in enumerate(names) if not any(b.expressions[i].find(exp.AggFunc) for b in branches)}


def _plain(select: exp.Select) -> bool:
    """No LIMIT, OFFSET, DISTINCT ON or grouping sets (they stop PostgreSQL pushing a filter in),
    and nothing whose result may differ between two computations of the same rows (a window's
    numbering of ties, an aggregate that depends on the rows' order, a function mvlog does not
    know): inlined, each reference computes the body anew, where materialized they share one
    result."""
    group = select.args.get("group")
    distinct = select.args.get("distinct")
    return not (select.args.get("limit") or select.args.get("offset") or (distinct and distinct.args.get("on"))
                or (group and (any(group.args.get(k) for k in ("grouping_sets", "rollup", "cube"))
                               or group.find(exp.GroupingSets, exp.Rollup, exp.Cube)))
                or select.find(exp.Window, exp.Anonymous)
                or any(not isinstance(a, _ORDER_FREE) for a in select.find_all(exp.AggFunc)))


def _output_name(projection: exp.Expr) -> str:
    if isinstance(projection, exp.Alias):
        return identifier_name(projection.args["alias"])
    if isinstance(projection, exp.Column):
        return identifier_name(projection.this)
    return projection.alias_or_name.lower()


def _restricted(reference: exp.Table, pushable: set[str]) -> bool:
    """Whether the SELECT that reads ``reference`` keeps only rows of it with a pushable column
    compared to a constant."""
    if not isinstance(reference.parent, (exp.From, exp.Join)):
        return False
    select = reference.parent.parent
    if not isinstance(select, exp.Select):
        return False
    alias = item_alias(reference)
    conditions = [select.args["where"].this] if select.args.get("where") else []
    conditions += [j.args["on"] for j in select.args.get("joins") or []
                   if j.args.get("on") and not j.side and (j.kind or "").upper() in ("", "INNER")]
    return any(_restricts(c, alias, pushable) for condition in conditions for c in top_conjuncts(condition))


def _restricts(conjunct: exp.Expr, alias: str, pushable: set[str]) -> bool:
    if not isinstance(conjunct, _RESTRICTIONS):
        return False
    column, *others = ([conjunct.this, conjunct.expression] if isinstance(conjunct, exp.Binary)
                       else [conjunct.this, *conjunct.expressions] if isinstance(conjunct, exp.In)
                       else [conjunct.this, conjunct.args.get("low"), conjunct.args.get("high")])
    if isinstance(conjunct, exp.Binary) and not isinstance(column, exp.Column):
        column, others = conjunct.expression, [conjunct.this]  # 2001 = t.dyear
    return (isinstance(column, exp.Column) and identifier_name(column.args.get("table") or "") == alias
            and identifier_name(column.this) in pushable and bool(others)
            and all(o is not None and _constant(o) for o in others))


def _constant(node: exp.Expr) -> bool:
    """A literal, or casts, signs and arithmetic over literals only."""
    return not node.find(exp.Column, exp.Subquery, exp.Select, exp.Anonymous) and all(
        isinstance(n, (exp.Literal, exp.Cast, exp.DataType, exp.Neg, exp.Paren, exp.Add, exp.Sub, exp.Mul,
                       exp.Div, exp.Interval, exp.Var, exp.DataTypeParam))
        for n in node.walk())
