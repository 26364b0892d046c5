"""An aggregated derived table joined to tables, pulled up into one aggregate over the join.

``SELECT c.name, t.total FROM customers c JOIN (SELECT customer_id, sum(amount) AS total FROM
orders GROUP BY customer_id) t ON t.customer_id = c.id WHERE t.total > 100`` has one row per
customer row and ``t`` group that join, and the join condition reads only ``t``'s group columns:
so it is ``SELECT c.name, sum(o.amount) FROM customers c JOIN orders o ON o.customer_id = c.id
GROUP BY c.id, c.name, o.customer_id HAVING sum(o.amount) > 100`` — grouped by the joined
tables' primary keys (and the columns read from them) and the derived table's group columns, its
aggregates in place of its outputs, a condition on an aggregate in HAVING. That is an aggregate
view over a join, which a fast refresh keeps (by deltas, by state, or per affected group).

Exact when every join is inner, the outer query only filters and projects, the derived table is
a plain aggregate over tables (no DISTINCT, LIMIT, grouping sets or windows), and the outer query
joins on or filters by its group columns (a condition on its aggregates becomes HAVING: it is
one value per group either way).
"""

from __future__ import annotations

from sqlglot import exp

from mvlog.model import TableInfo
from mvlog.sql.restrictions import has_grouping_sets
from mvlog.sql.rewrite import Catalog, NotMergeable, substitute_outputs
from mvlog.sql.sqltree import DIALECT, identifier_name, join_side


def _text(node: exp.Expr) -> str:
    return node.sql(dialect=DIALECT)


def _alias(item: exp.Expr) -> str:
    return identifier_name(item.args["alias"].this)


def _conjuncts(condition: exp.Expr | None) -> list[exp.Expr]:
    if condition is None:
        return []
    if isinstance(condition, exp.And):
        return _conjuncts(condition.this) + _conjuncts(condition.expression)
    return [condition.this if isinstance(condition, exp.Paren) and isinstance(condition.this, exp.And)
            else condition]


def _plain_aggregate(inner: exp.Select) -> bool:
    return (inner.args.get("group") is not None and not has_grouping_sets(inner.args["group"])
            and not any(inner.args.get(k) for k in ("distinct", "limit", "offset", "fetch", "with_"))
            and not inner.find(exp.Window)
            and not any(s is not inner for s in inner.find_all(exp.Select))
            and all(isinstance(i, exp.Table) for i in _items(inner))
            and all(join_side(j) in ("INNER", "CROSS") and not j.args.get("using")
                    for j in inner.args.get("joins") or []))


def _items(select: exp.Select) -> list[exp.Expr]:
    first = [select.args["from_"].this] if select.args.get("from_") else []
    return first + [j.this for j in select.args.get("joins") or []]


def _candidate(select: exp.Select) -> exp.Subquery | None:
    """The one aggregated derived table of an outer query that only filters, projects and
    inner-joins it to tables; None if ``select`` is not that."""
    if any(select.args.get(k) for k in ("group", "having", "distinct", "limit", "offset", "fetch", "with_")):
        return None
    if any(p.find(exp.AggFunc, exp.Window) for p in select.selects):
        return None
    if not all(join_side(j) in ("INNER", "CROSS") and not j.args.get("using") for j in select.args.get("joins") or []):
        return None
    items = _items(select)
    derived = [i for i in items if isinstance(i, exp.Subquery)]
    if len(derived) != 1 or len(items) < 2 or not all(isinstance(i, (exp.Table, exp.Subquery)) for i in items):
        return None
    source = derived[0]
    if not (isinstance(source.this, exp.Select) and source.alias and _plain_aggregate(source.this)):
        return None
    if any(s is not select and s is not source.this for s in select.find_all(exp.Select)):
        return None  # a subquery expression beside it (the derived table has none: _plain_aggregate)
    return source


def pull_up(select: exp.Select, catalog: Catalog) -> exp.Select | None:
    """``select`` as one aggregate over the join (see the module docstring), or None if it is
    not an inner join of tables with one aggregated derived table."""
    source = _candidate(select)
    if source is None:
        return None
    inner: exp.Select = source.this.copy()
    alias = _alias(source)
    tables = {_alias(i): i for i in _items(select) if isinstance(i, exp.Table)}
    taken = set(tables)
    for item in _items(inner):
        if _alias(item) in taken:
            return None  # merged queries name their tables apart; keep it simple
        taken.add(_alias(item))
    group = []
    for item in inner.args["group"].expressions:  # GROUP BY 1: the inner's first output
        if isinstance(item, exp.Literal) and item.is_int:
            if not 1 <= int(item.this) <= len(inner.selects):
                return None
            item = inner.selects[int(item.this) - 1]
            item = item.this if isinstance(item, exp.Alias) else item
        group.append(item)
    outputs = {p.alias_or_name: (p.this if isinstance(p, exp.Alias) else p) for p in inner.selects}
    outer = select.copy()
    try:
        substitute_outputs(outer, alias, outputs)
    except NotMergeable:
        return None
    where: list[exp.Expr] = []
    having = _conjuncts(inner.args["having"].this) if inner.args.get("having") else []
    for condition in [*_conjuncts(outer.args["where"].this if outer.args.get("where") else None),
                      *[c for j in outer.args.get("joins") or [] for c in _conjuncts(j.args.get("on"))],
                      *_conjuncts(inner.args["where"].this if inner.args.get("where") else None),
                      *[c for j in inner.args.get("joins") or [] for c in _conjuncts(j.args.get("on"))]]:
        (having if condition.find(exp.AggFunc) else where).append(condition.copy())
    sources = [i.copy() for i in _items(select) if i is not source] + [i.copy() for i in _items(inner)]
    keys: list[exp.Expr] = []
    for item in _items(select):
        if isinstance(item, exp.Table):
            info = _table_info(item, catalog)
            if info is None or not info.key:
                return None
            here = exp.to_identifier(_alias(item), quoted=True)
            keys += [exp.column(exp.to_identifier(c.name, quoted=True), table=here.copy()) for c in info.key]
    read = [c for p in outer.selects for c in p.find_all(exp.Column)
            if c.table and identifier_name(c.args["table"]) in tables and not c.find_ancestor(exp.AggFunc)]
    grouping = {_text(e): e for e in [*keys, *read, *group]}
    result = exp.select(*[p.copy() for p in outer.selects])
    result.set("from_", exp.From(this=sources[0]))
    result.set("joins", [exp.Join(this=s, kind="CROSS") for s in sources[1:]])
    if where:
        result.set("where", exp.Where(this=exp.and_(*where)))
    result.set("group", exp.Group(expressions=[e.copy() for e in grouping.values()]))
    if having:
        result.set("having", exp.Having(this=exp.and_(*having)))
    return result


def _table_info(table: exp.Table, catalog: Catalog) -> TableInfo | None:
    """The catalog entry of a qualified table (``"schema"."name"``)."""
    schema = identifier_name(table.args["db"]) if table.args.get("db") else None
    name = identifier_name(table.this)
    return next((t for t in catalog.values() if (t.schema, t.name) == (schema, name)), catalog.get((schema, name)))
