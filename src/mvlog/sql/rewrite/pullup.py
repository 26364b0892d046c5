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

An aggregate over such a join is pulled up too when each of its aggregates folds one of the
derived table's (a sum of sums or counts, a min of mins, a max of maxes, an avg of sums or counts)
or counts the join's rows (``count(*)``: the pairs of table rows and groups); see
:func:`_flattened`.
"""

from __future__ import annotations

from sqlglot import exp

from mvlog.model import TableInfo
from mvlog.sql.parse.restrictions import has_grouping_sets
from mvlog.sql.parse.sqltree import DIALECT, identifier_name, join_side, sql_text
from mvlog.sql.rewrite.correlate import correlated
from mvlog.sql.rewrite.merge import substitute_outputs
from mvlog.sql.rewrite.rewrite import Catalog, NotMergeable


def _text(node: exp.Expr) -> str:
    return sql_text(node)


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


def _derived(select: exp.Select) -> exp.Subquery | None:
    """The one aggregated derived table of a query over it and tables, all inner-joined; None if
    ``select`` is not that."""
    if any(select.args.get(k) for k in ("distinct", "limit", "offset", "fetch", "with_")) or select.find(exp.Window):
        return None
    if not all(join_side(j) in ("INNER", "CROSS") and not j.args.get("using") for j in select.args.get("joins") or []):
        return None
    items = _items(select)
    derived = [i for i in items if isinstance(i, exp.Subquery)]
    if len(derived) != 1 or not all(isinstance(i, (exp.Table, exp.Subquery)) for i in items):
        return None
    source = derived[0]
    if not (isinstance(source.this, exp.Select) and source.alias and _plain_aggregate(source.this)):
        return None
    if any(s is not select and s is not source.this for s in select.find_all(exp.Select)):
        return None  # a subquery expression beside it (the derived table has none: _plain_aggregate)
    return source


def _groups(inner: exp.Select) -> list[exp.Expr] | None:
    """The inner aggregate's GROUP BY expressions (``GROUP BY 1``: its first output's)."""
    group = []
    for item in inner.args["group"].expressions:
        if isinstance(item, exp.Literal) and item.is_int:
            if not 1 <= int(item.this) <= len(inner.selects):
                return None
            item = inner.selects[int(item.this) - 1]
            item = item.this if isinstance(item, exp.Alias) else item
        group.append(item)
    return group


def _conditions(select: exp.Select, inner: exp.Select) -> list[exp.Expr]:
    """Every condition of the outer and the inner query (WHERE and ON: all joins are inner)."""
    return [c.copy() for c in [
        *_conjuncts(select.args["where"].this if select.args.get("where") else None),
        *[c for j in select.args.get("joins") or [] for c in _conjuncts(j.args.get("on"))],
        *_conjuncts(inner.args["where"].this if inner.args.get("where") else None),
        *[c for j in inner.args.get("joins") or [] for c in _conjuncts(j.args.get("on"))]]]


def _over_join(projections: list[exp.Expr], sources: list[exp.Expr], where: list[exp.Expr],
               group: list[exp.Expr], having: list[exp.Expr]) -> exp.Select:
    result = exp.select(*[p.copy() for p in projections])
    result.set("from_", exp.From(this=sources[0]))
    result.set("joins", [exp.Join(this=s, kind="CROSS") for s in sources[1:]])
    if where:
        result.set("where", exp.Where(this=exp.and_(*where)))
    if group:
        result.set("group", exp.Group(expressions=[e.copy() for e in group]))
    if having:
        result.set("having", exp.Having(this=exp.and_(*having)))
    return result


def pull_up(select: exp.Select, catalog: Catalog, output_types: list[str] | None = None) -> exp.Select | None:
    """``select`` as one aggregate over the join (see the module docstring), or None if it is
    not an inner join of tables with one aggregated derived table that this can pull up.
    ``output_types``: the types PostgreSQL gives ``select``'s outputs (a sum of sums keeps its type)."""
    source = _derived(select)
    if source is None:
        return None
    inner: exp.Select = source.this.copy()
    taken = {_alias(i) for i in _items(select) if isinstance(i, exp.Table)}
    for item in _items(inner):
        if _alias(item) in taken:
            return None  # merged queries name their tables apart; keep it simple
        taken.add(_alias(item))
    group = _groups(inner)
    if group is None:
        return None
    sources = [i.copy() for i in _items(select) if i is not source] + [i.copy() for i in _items(inner)]
    outer_aggregates = any(p.find(exp.AggFunc) for p in select.selects) or select.args.get("having")
    if select.args.get("group") is None and not outer_aggregates:
        return _joined(select, source, inner, group, sources, catalog) if len(sources) > len(_items(inner)) else None
    if select.args.get("group") is not None and has_grouping_sets(select.args["group"]):
        return None
    if select.args.get("group") is not None:
        flattened = _flattened(select, source, inner, group, sources, output_types, catalog)
        if flattened is not None:
            return flattened
    others = [i.copy() for i in _items(select) if i is not source]
    where = select.args["where"].this if select.args.get("where") else None
    ons = [c for j in select.args.get("joins") or [] for c in _conjuncts(j.args.get("on"))]
    conditions = [c.copy() for c in [*_conjuncts(where), *ons]]
    return correlated(select, source, group, conditions, others) if others else None


def _table_keys(select: exp.Select, catalog: Catalog) -> list[exp.Expr] | None:
    """The primary-key columns of the tables ``select`` reads beside its derived table (None if
    one has no key)."""
    keys: list[exp.Expr] = []
    for item in _items(select):
        if isinstance(item, exp.Table):
            info = _table_info(item, catalog)
            if info is None or not info.key:
                return None
            here = exp.to_identifier(_alias(item), quoted=True)
            keys += [exp.column(exp.to_identifier(c.name, quoted=True), table=here.copy()) for c in info.key]
    return keys


def _joined(select: exp.Select, source: exp.Subquery, inner: exp.Select, group: list[exp.Expr],
            sources: list[exp.Expr], catalog: Catalog) -> exp.Select | None:
    """An outer query that filters and projects: grouped by the tables' keys and the derived
    table's groups, its conditions on the derived table's aggregates as HAVING."""
    alias = _alias(source)
    tables = {_alias(i) for i in _items(select) if isinstance(i, exp.Table)}
    outputs = {p.alias_or_name: (p.this if isinstance(p, exp.Alias) else p) for p in inner.selects}
    outer = select.copy()
    try:
        substitute_outputs(outer, alias, outputs)
    except NotMergeable:
        return None
    where: list[exp.Expr] = []
    having = _conjuncts(inner.args["having"].this) if inner.args.get("having") else []
    for condition in _conditions(outer, inner):
        (having if condition.find(exp.AggFunc) else where).append(condition)
    keys = _table_keys(select, catalog)
    if keys is None:
        return None
    read = [c for p in outer.selects for c in p.find_all(exp.Column)
            if c.table and identifier_name(c.args["table"]) in tables and not c.find_ancestor(exp.AggFunc)]
    grouping = {_text(e): e for e in [*keys, *read, *group]}
    return _over_join(outer.selects, sources, where, list(grouping.values()), having)


def _flattened(select: exp.Select, source: exp.Subquery, inner: exp.Select, group: list[exp.Expr],
               sources: list[exp.Expr], output_types: list[str] | None, catalog: Catalog) -> exp.Select | None:
    """An aggregate over the join whose aggregates each fold one of the derived table's:
    ``sum(t.total)`` over ``sum(x)`` (or ``count(…)``) is ``sum(x)`` (``count(…)``) over the
    join, ``min``/``max`` of a ``min``/``max`` the same — each pair of a table row and a group
    contributes exactly its group's rows, as the join condition reads only group columns.
    ``count(*)`` counts those pairs: the distinct (table keys, group values) of the join's rows;
    ``avg`` of a numeric sum or count is that sum over the pairs divided by their count. Any other
    aggregate, or a condition on the derived table's aggregates, keeps the query as it is."""
    if inner.args.get("having"):
        return None
    keys = _table_keys(select, catalog) or []  # none: count(*) and avg do not fold (pairs need keys)

    def pairs(valued: exp.Expr | None = None) -> exp.Expr:
        """count(DISTINCT (keys, groups)) over the join's rows (with ``valued``: of the pairs whose
        group has a non-NULL ``valued``, as avg skips a NULL sum). Records compare their NULL
        fields as equal, as GROUP BY does."""
        identity: exp.Expr = exp.Tuple(expressions=[k.copy() for k in keys] + [g.copy() for g in group])
        if valued is not None:
            identity = exp.Case(ifs=[exp.If(this=exp.Not(this=exp.Is(this=valued.copy(), expression=exp.Null())),
                                            true=identity)])
        return exp.Count(this=exp.Distinct(expressions=[identity]))
    alias = _alias(source)
    texts = {_text(g) for g in group}
    outputs = {p.alias_or_name: (p.this if isinstance(p, exp.Alias) else p) for p in inner.selects}
    folded = {n for n, e in outputs.items() if _text(e) not in texts}
    if any(not isinstance(outputs[n], (exp.Sum, exp.Count, exp.Min, exp.Max)) or outputs[n].find(exp.Distinct)
           for n in folded):
        return None
    outer = select.copy()
    types = output_types if output_types and len(output_types) == len(outer.selects) else None

    def derived_column(node: exp.Expr) -> str | None:
        if (isinstance(node, exp.Column) and node.args.get("table") is not None
                and identifier_name(node.args["table"]) == alias and identifier_name(node.this) in folded):
            return identifier_name(node.this)
        return None

    def output_type(node: exp.Expr) -> exp.DataType | None:
        """The type PostgreSQL gives the output ``node`` is (None: not a whole output, or unknown)."""
        owner = node.parent
        if not (isinstance(owner, exp.Alias) and owner.parent is outer and types):
            return None
        return exp.DataType.build(types[outer.selects.index(owner)], dialect=DIALECT)

    for node in [a for a in outer.find_all(exp.AggFunc) if a.find_ancestor(exp.Select) is outer]:
        if isinstance(node, exp.Count) and isinstance(node.this, exp.Star):
            if not keys:
                return None
            node.replace(pairs())
            continue
        name = derived_column(node.this)
        if name is None or node.find(exp.Distinct):
            return None  # an aggregate of other values would count each group once per row
        kept = outputs[name]
        replacement: exp.Expr = kept.copy()
        if isinstance(node, exp.Avg) and isinstance(kept, (exp.Sum, exp.Count)):
            # PostgreSQL's avg of integers and numerics: their numeric sum / their count
            typed = output_type(node)
            if typed is None or not typed.is_type("decimal") or not keys:
                return None
            valued = kept.this if isinstance(kept, exp.Sum) else None
            replacement = exp.cast(exp.Div(this=exp.cast(replacement, exp.DataType.build("numeric")),
                                           expression=pairs(valued)), typed)
        elif isinstance(node, exp.Sum) and isinstance(kept, (exp.Sum, exp.Count)):
            if not node.find_ancestor(exp.Having):  # a sum of sums (of counts) has the outer sum's type
                typed = output_type(node)
                if typed is None:
                    return None
                replacement = exp.cast(replacement, typed)
        elif not (isinstance(node, (exp.Min, exp.Max)) and type(node) is type(kept)):
            return None
        node.replace(replacement)
    if any(derived_column(c) for c in outer.find_all(exp.Column)):
        return None  # the derived table's aggregate outside an aggregate (GROUP BY it)
    try:
        substitute_outputs(outer, alias, outputs)
    except NotMergeable:
        return None
    having = _conjuncts(outer.args["having"].this) if outer.args.get("having") else []
    return _over_join(outer.selects, sources, _conditions(outer, inner), list(outer.args["group"].expressions),
                      having)


def _table_info(table: exp.Table, catalog: Catalog) -> TableInfo | None:
    """The catalog entry of a qualified table (``"schema"."name"``)."""
    schema = identifier_name(table.args["db"]) if table.args.get("db") else None
    name = identifier_name(table.this)
    return next((t for t in catalog.values() if (t.schema, t.name) == (schema, name)), catalog.get((schema, name)))
