"""Rewriting a view query into the plain shapes that fast refresh keys: CTEs and derived tables
are merged into the query that reads them, the way PostgreSQL's planner pulls up subqueries.
The rules here (:func:`qualified`, :func:`inlined_ctes`, :func:`named_outputs`; derived tables are
merged by :mod:`mvlog.sql.rewrite.merge`) are applied in the order :mod:`mvlog.sql.rewrite.normalize` declares.

A query that uses ``WITH``, a subquery in ``FROM`` or a subquery expression is first qualified
with the catalog's columns (every column names its table's alias, ``*`` is expanded), so that a
derived table's outputs can be replaced by the expressions that compute them. What cannot be
merged exactly is left alone and the analysis gives its reason.
"""

from __future__ import annotations

import itertools

from sqlglot import exp
from sqlglot.optimizer.qualify import qualify

from mvlog.model import TableInfo
from mvlog.sql.parse.sqltree import DIALECT, from_items, identifier_name, join_side
from mvlog.sql.rewrite.fulljoin import aggregates_over_full_join

# A base table as written in the query (schema or None, name) -> the table PostgreSQL resolves it to.
Catalog = dict[tuple[str | None, str], TableInfo]


class NotMergeable(Exception):
    """Why a query cannot be rewritten into a shape fast refresh keys."""


def needs_rewrite(tree: exp.Expr) -> bool:
    """Whether the query has a CTE, a derived table, a subquery expression, grouping sets (their
    expressions must be qualified to be matched), an aggregate over a FULL JOIN (keyed as an
    aggregate over a UNION ALL, see :func:`mvlog.sql.rewrite.fulljoin.full_join_as_union`), or a comma join
    after an outer join (its conditions are moved to its ``ON``: :func:`comma_joins_as_inner_joins`)."""
    return tree.find(exp.With, exp.Subquery, exp.GroupingSets, exp.Rollup, exp.Cube) is not None or any(
        s is not tree for s in tree.find_all(exp.Select) if not _in_set_operation_of(s, tree)) or any(
        aggregates_over_full_join(s) for s in _top_selects(tree)) or any(
        _comma_after_outer(s) for s in tree.find_all(exp.Select))


def _comma_after_outer(select: exp.Select) -> bool:
    sides = [join_side(j) for j in select.args.get("joins") or []]
    return any(side == "CROSS" and any(s in ("LEFT", "RIGHT", "FULL") for s in sides[:i])
               for i, side in enumerate(sides))


def _aliases_of(node: exp.Expr) -> set[str]:
    return {c.table for c in node.find_all(exp.Column) if c.table}


def comma_joins_as_inner_joins(tree: exp.Query) -> exp.Query:
    """Each comma (or CROSS) join after an outer join, in a qualified query, as ``JOIN t ON c``
    where ``c`` is the AND of the WHERE's top-level conditions that read ``t`` and only tables
    joined before it (``ON true`` if none), taken out of the WHERE: for an inner join a condition
    filters the same rows in its ``ON`` as in the ``WHERE`` (TPC-DS q40, q93: ``FROM a LEFT JOIN b
    ON …, c, d WHERE …``). Conditions with an unqualified column stay in the WHERE."""
    for select in list(tree.find_all(exp.Select)):
        if not _comma_after_outer(select):
            continue
        where = select.args.get("where")
        conditions = list(where.this.flatten()) if where is not None and isinstance(where.this, exp.And) else (
            [where.this] if where is not None else [])
        seen = {select.args["from_"].this.alias_or_name}
        outer = False
        for join in select.args.get("joins") or []:
            alias = join.this.alias_or_name
            seen.add(alias)
            side = join_side(join)
            if side == "CROSS" and outer:
                taken = [c for c in conditions if alias in _aliases_of(c) and _aliases_of(c) <= seen
                         and all(col.table for col in c.find_all(exp.Column))]
                conditions = [c for c in conditions if not any(c is t for t in taken)]
                join.set("kind", None)
                join.set("on", exp.and_(*taken) if taken else exp.true())
            outer = outer or side in ("LEFT", "RIGHT", "FULL")
        select.set("where", exp.Where(this=exp.and_(*conditions)) if conditions else None)
    return tree


def _in_set_operation_of(select: exp.Select, tree: exp.Expr) -> bool:
    """A branch of the top-level UNION ALL chain (not a subquery)."""
    node: exp.Expr = select
    while node is not tree:
        parent = node.parent
        if not isinstance(parent, exp.SetOperation):
            return False
        node = parent
    return True


def optional_name(node: exp.Identifier | None) -> str | None:
    return identifier_name(node) if node is not None else None


def qualified(tree: exp.Query, catalog: Catalog) -> exp.Query:
    """The query with every table named as PostgreSQL resolves it and every column qualified by
    its table's alias (``*`` expanded): what the other rules match on."""
    tree = tree.copy()
    ctes = {optional_name(c.args["alias"].this) for c in tree.find_all(exp.CTE) if c.args.get("alias")}
    schema: dict[str, dict[str, dict[str, str]]] = {}
    for table in tree.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier):
            continue
        written = (optional_name(table.args.get("db")), identifier_name(table.this))
        if written[0] is None and written[1] in ctes:
            continue
        info = catalog.get(written)
        if info is None:
            raise NotMergeable(f"table {'.'.join(p for p in written if p)} is not known")
        table.set("db", exp.to_identifier(info.schema, quoted=True))
        table.set("this", exp.to_identifier(info.name, quoted=True))
        schema.setdefault(info.schema, {})[info.name] = {c.name: c.type for c in info.columns}
    with_ = tree.args.get("with_")
    if with_ is not None and with_.args.get("recursive"):
        raise NotMergeable("recursive CTEs (WITH RECURSIVE) are not incrementally maintainable")
    if any(c.args.get("alias") and c.args["alias"].columns for c in tree.find_all(exp.CTE)):
        raise NotMergeable("a CTE with a column list (WITH s(a, b) AS …) is not supported: alias the columns inside it")
    try:
        # sqlglot annotates ``schema`` as dict[str, object]: dict being invariant, that rejects the
        # nested {schema: {table: {column: type}}} dict it takes
        return qualify(tree, schema=schema, dialect=DIALECT,  # type: ignore[arg-type]
                       validate_qualify_columns=False, quote_identifiers=True, identify=True)
    except Exception as exc:  # sqlglot raises several kinds; any means "cannot analyse"
        raise NotMergeable(f"the query cannot be analysed: {str(exc).splitlines()[0]}") from None


def _plain_select(select: exp.Expr) -> bool:
    """A SELECT of tables, joined inner, with no grouping, DISTINCT, LIMIT or window."""
    return (isinstance(select, exp.Select) and all(select.args.get(k) is None for k in (
        "group", "having", "distinct", "limit", "offset", "order", "with_")) and not select.find(exp.Window)
            and all(isinstance(i, exp.Table) for i in from_items(select))
            and all(join_side(j) in ("INNER", "CROSS") for j in select.args.get("joins") or []))


def flattened_in_subqueries(tree: exp.Query) -> exp.Query:
    """In a subquery whose rows only count as a set (the query of an ``IN`` or ``EXISTS``), a
    condition ``y IN (SELECT f FROM U WHERE w)`` (or ``y = (SELECT f …)``, which may return one row
    only) of its WHERE's top-level ANDs, with an inner query
    of tables only and correlated with nothing outside it, as a join: ``… FROM T, U WHERE y = f AND
    w``. A row of T passes the one iff it joins a row of U in the other; how many U rows it joins
    does not matter to a set (TPC-DS q58, q83: ``d_date IN (SELECT d_date FROM date_dim WHERE
    d_week_seq IN (SELECT d_week_seq FROM date_dim WHERE d_date IN (…)))``)."""
    for subquery in list(tree.find_all(exp.Subquery)):
        middle = subquery.this
        if not isinstance(subquery.parent, (exp.In, exp.Exists)) or not _plain_select(middle):
            continue
        where = middle.args.get("where")
        if where is None:
            continue
        conditions = list(where.this.flatten()) if isinstance(where.this, exp.And) else [where.this]
        for condition in conditions:
            query = condition.args.get("query") if isinstance(condition, exp.In) else None
            if isinstance(condition, exp.EQ) and isinstance(condition.expression, exp.Subquery):
                query = condition.expression  # y = (SELECT f …): as IN, where it returns a row at most
            inner = query.this if isinstance(query, exp.Subquery) else query
            if inner is None or not _plain_select(inner) or len(inner.selects) != 1 or inner.find(exp.Subquery):
                continue
            own = {source_alias(source) for source in from_items(inner)}
            if any(not c.table or c.table not in own for c in inner.find_all(exp.Column)):
                continue  # correlated, or not qualified
            inner = inner.copy()
            rename_aliases(inner, {source_alias(source) for source in from_items(middle)})
            value = inner.selects[0].this if isinstance(inner.selects[0], exp.Alias) else inner.selects[0]
            rest = [c for c in conditions if c is not condition]
            inner_where = inner.args.get("where")
            joined = [*rest, exp.EQ(this=condition.this.copy(), expression=value.copy()),
                      *([inner_where.this.copy()] if inner_where is not None else [])]
            for source in from_items(inner):
                middle.append("joins", exp.Join(this=source.copy()))
            middle.set("where", exp.Where(this=exp.and_(*joined)))
            break  # one at a time: the conditions changed
    return tree


def named_outputs(tree: exp.Query, output_names: list[str] | None) -> exp.Query:
    """The query's output columns named as PostgreSQL names the original's (``output_names``)."""
    if output_names:
        for select in _top_selects(tree):
            if len(select.selects) == len(output_names):
                select.set("expressions", [
                    exp.alias_(p.this if isinstance(p, exp.Alias) else p, exp.to_identifier(n, quoted=True))
                    for p, n in zip(select.selects, output_names)])
    return tree


def _top_selects(tree: exp.Expr) -> list[exp.Select]:
    if isinstance(tree, exp.SetOperation):
        return _top_selects(tree.this) + _top_selects(tree.expression)
    if isinstance(tree, exp.Subquery):
        return _top_selects(tree.this)
    return [tree] if isinstance(tree, exp.Select) else []


def inlined_ctes(tree: exp.Query) -> exp.Query:
    """Every reference to a CTE replaced by its body as a derived table (bodies may use earlier
    CTEs, and have CTEs of their own: inlined in turn, from the copies the outer pass made)."""
    while True:
        holders = [n for n in [tree, *[n for n in tree.find_all(exp.Select, exp.SetOperation) if n is not tree]]
                   if n.args.get("with_") is not None]
        if not holders:
            return tree
        for holder in holders:
            bodies: dict[str, exp.Expr] = {}
            for cte in holder.args["with_"].expressions:
                body = cte.this.copy()
                _replace_cte_refs(body, bodies)
                bodies[identifier_name(cte.args["alias"].this)] = body
            holder.set("with_", None)
            _replace_cte_refs(holder, bodies)


def _replace_cte_refs(node: exp.Expr, bodies: dict[str, exp.Expr]) -> None:
    for table in list(node.find_all(exp.Table)):
        name = optional_name(table.this) if isinstance(table.this, exp.Identifier) else None
        if table.args.get("db") is None and name in bodies:
            alias = table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(name, quoted=True))
            table.replace(exp.Subquery(this=bodies[name].copy(), alias=alias.copy()))


def source_alias(source: exp.Expr) -> str:
    return identifier_name(source.args["alias"].this)


def rename_aliases(inner: exp.Select, taken: set[str]) -> None:
    """Give the inner query's FROM items aliases that the outer query's other FROM items do not use."""
    for source in from_items(inner):
        old = source_alias(source)
        if old not in taken:
            taken.add(old)
            continue
        new = next(f"{old}_{i}" for i in itertools.count(2) if f"{old}_{i}" not in taken)
        taken.add(new)
        source.args["alias"].set("this", exp.to_identifier(new, quoted=True))
        for column in inner.find_all(exp.Column):
            if optional_name(column.args.get("table")) == old:
                column.set("table", exp.to_identifier(new, quoted=True))
