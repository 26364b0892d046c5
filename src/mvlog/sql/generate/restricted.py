"""Rules for a view's query restricted to a few affected keys (a fast refresh's recompute).

A complete refresh reads every row, and PostgreSQL is right to compute an ``IN (SELECT k … GROUP
BY k HAVING …)`` subquery once, over its whole table, and hash it. Restricted to a few keys, the
outer rows are estimated at one or two, and PostgreSQL may then loop over the whole aggregate
for each of them (TPC-H Q18 at SF 1: the aggregate of 6M line items rescanned per affected row,
over 13 minutes against 93 s for the complete build; docs/benchmarks-history.md session 34). Asked per outer
row instead, through the inner table's index, the same subquery costs the rows of those keys.
"""

from __future__ import annotations

from sqlglot import exp

from mvlog.sql.parse.sqltree import conjuncts


def grouped_in_as_exists(select: exp.Select) -> exp.Select:
    """``select`` with each ``x IN (SELECT k FROM … GROUP BY k [HAVING …])`` among the conjuncts of
    its WHERE written ``EXISTS (SELECT 1 FROM … WHERE … AND k = x GROUP BY k [HAVING …])``.

    The same rows: in a WHERE conjunct a row passes ``IN`` exactly when some group of the
    subquery has the key ``x`` and passes HAVING; a NULL ``x`` or a NULL group key matches in
    neither. Left alone when ``x`` names a table the subquery also names (it would bind inside).
    """
    where = select.args.get("where")
    if where is None:
        return select
    for conjunct in _conjuncts(where.this):
        exists = _as_exists(conjunct)
        if exists is not None:
            conjunct.replace(exists)
    return select


def _conjuncts(node: exp.Expr) -> list[exp.Expr]:
    """The terms of an AND chain, through the parentheses mvlog's generated SQL puts around them."""
    terms = conjuncts(node.unnest())
    return terms if len(terms) == 1 else [t for term in terms for t in _conjuncts(term)]


def _as_exists(node: exp.Expr) -> exp.Exists | None:
    if not isinstance(node, exp.In) or not isinstance(node.args.get("query"), exp.Subquery):
        return None
    inner = node.args["query"].this
    if not isinstance(inner, exp.Select) or len(inner.expressions) != 1 or inner.args.get("distinct") \
            or inner.args.get("limit") or inner.args.get("offset") or inner.args.get("with"):
        return None
    group = inner.args.get("group")
    key = inner.expressions[0].unalias()
    if group is None or len(group.expressions) != 1 or group.expressions[0] != key:
        return None
    inner_names = {t.alias_or_name for t in inner.find_all(exp.Table)}
    outer = node.this
    if any(c.table in inner_names or not c.table for c in outer.find_all(exp.Column)):
        return None
    correlated = inner.copy()
    correlated.set("expressions", [exp.Literal.number(1)])
    correlated.where(exp.EQ(this=key.copy(), expression=outer.copy()), copy=False)
    return exp.Exists(this=correlated)
