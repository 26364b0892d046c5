"""Rewriting a view query into the plain shapes that fast refresh keys: CTEs and derived tables
are merged into the query that reads them, the way PostgreSQL's planner pulls up subqueries.
The rules here (:func:`qualified`, :func:`inlined_ctes`, :func:`merged_derived_tables`,
:func:`named_outputs`) are applied in the order :mod:`mvlog.sql.rewrite.normalize` declares.

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


def _name(node: exp.Identifier | None) -> str | None:
    return identifier_name(node) if node is not None else None


def qualified(tree: exp.Query, catalog: Catalog) -> exp.Query:
    """The query with every table named as PostgreSQL resolves it and every column qualified by
    its table's alias (``*`` expanded): what the other rules match on."""
    tree = tree.copy()
    ctes = {_name(c.args["alias"].this) for c in tree.find_all(exp.CTE) if c.args.get("alias")}
    schema: dict[str, dict[str, dict[str, str]]] = {}
    for table in tree.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier):
            continue
        written = (_name(table.args.get("db")), identifier_name(table.this))
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
            own = {_source_alias(source) for source in from_items(inner)}
            if any(not c.table or c.table not in own for c in inner.find_all(exp.Column)):
                continue  # correlated, or not qualified
            inner = inner.copy()
            _rename_aliases(inner, {_source_alias(source) for source in from_items(middle)})
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


def merged_derived_tables(tree: exp.Query) -> exp.Query:
    """Each SELECT's parenthesized inner joins flattened and its mergeable derived tables merged
    into it, innermost first."""
    for select in list(tree.find_all(exp.Select, bfs=False))[::-1]:
        _flatten_parenthesized_joins(select)
        _merge_derived_tables(select)
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
        name = _name(table.this) if isinstance(table.this, exp.Identifier) else None
        if table.args.get("db") is None and name in bodies:
            alias = table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(name, quoted=True))
            table.replace(exp.Subquery(this=bodies[name].copy(), alias=alias.copy()))


def _parenthesized(item: exp.Expr) -> bool:
    """``(B JOIN C ON p)`` as a FROM item: an unaliased Subquery around a table with joins."""
    return (isinstance(item, exp.Subquery) and not item.alias and isinstance(item.this, exp.Table)
            and bool(item.this.args.get("joins")))


def _plain_inner(join: exp.Join) -> bool:
    return join_side(join) in ("INNER", "CROSS") and not join.args.get("using")


def _flatten_parenthesized_joins(select: exp.Select) -> None:
    """Parenthesized joins as one chain, where that keeps the rows (PostgreSQL's planner flattens
    them alike): ``(A LEFT JOIN B ON p) JOIN C ON q`` first in FROM is ``A LEFT JOIN B ON p JOIN C
    ON q`` (joins associate to the left anyway); ``A JOIN (B JOIN C ON p) ON q`` with inner joins
    only is ``A JOIN B ON true JOIN C ON p AND q``. A parenthesized join under an outer join keeps
    its order (the analysis gives the reason)."""
    first = select.args["from_"].this if select.args.get("from_") else None
    leading: list[exp.Join] = []
    if first is not None and _parenthesized(first):
        table = first.this.copy()
        leading = _flat_joins(table.args.get("joins") or [])
        table.set("joins", None)
        select.args["from_"].set("this", table)
    joins = leading + _flat_joins(select.args.get("joins") or [])
    if joins:
        select.set("joins", joins)


def _flat_joins(joins: list[exp.Join]) -> list[exp.Join]:
    result: list[exp.Join] = []
    for join in joins:
        group = join.this
        nested = _flat_joins(group.this.args.get("joins") or []) if _parenthesized(group) else []
        if not (nested and _plain_inner(join) and all(_plain_inner(j) for j in nested)):
            result.append(join)
            continue
        table = group.this.copy()
        table.set("joins", None)
        last = nested[-1]
        conditions = [c for c in (last.args.get("on"), join.args.get("on")) if c is not None]
        last.set("on", exp.and_(*conditions) if conditions else None)
        last.set("kind", None if conditions else last.args.get("kind"))
        result += [exp.Join(this=table, on=exp.true()), *nested]
    return result


def _source_alias(source: exp.Expr) -> str:
    return identifier_name(source.args["alias"].this)


def _plain_spj(select: exp.Select) -> bool:
    """Projection, filter and joins only: a derived table PostgreSQL would pull up."""
    return not (any(select.args.get(k) for k in ("group", "having", "distinct", "limit", "offset", "fetch", "with_"))
                or any(p.find(exp.AggFunc, exp.Window) for p in select.selects))


def _from_items(select: exp.Select) -> list[tuple[exp.Expr, exp.Join | None]]:
    items = [(select.args["from_"].this, None)] if select.args.get("from_") else []
    return items + [(j.this, j) for j in select.args.get("joins") or []]


def _merge_derived_tables(select: exp.Select) -> None:
    """Merge each derived table of ``select`` that can be merged exactly (see module docstring)."""
    items = _from_items(select)
    for position, (source, join) in enumerate(items):
        if not (isinstance(source, exp.Subquery) and isinstance(source.this, exp.Select) and source.alias):
            continue
        inner = source.this
        if len(items) > 1 or _plain_outer(select):  # an aggregate over it alone: see analysis._analyze_over_union
            _distinct_as_group_by(inner)
        if _plain_spj(inner) and inner.args.get("from_"):
            # its own alias too: an inner alias equal to it would read as the derived table's
            taken = {_source_alias(s) for s, _ in _from_items(select) if s.alias}
            _merge_spj(select, position, source, join, taken)
        elif (position == 0 and len(items) == 1 and inner.args.get("group") is not None
              and not inner.args.get("distinct") and _plain_outer(select)):
            _merge_into_aggregate(select, source)


def _distinct_as_group_by(inner: exp.Select) -> None:
    """A derived table ``SELECT DISTINCT a, b …`` (no aggregate, window or LIMIT) as ``SELECT a, b …
    GROUP BY a, b``: the same rows (GROUP BY, like DISTINCT, takes NULLs as equal), and an
    aggregated derived table is what the merges and the pull-up know."""
    distinct = inner.args.get("distinct")
    if (distinct is None or distinct.args.get("on") is not None or not inner.args.get("from_")
            or any(inner.args.get(k) for k in ("group", "having", "limit", "offset", "fetch"))
            or any(p.find(exp.AggFunc, exp.Window, exp.Star) for p in inner.selects)
            or any(isinstance(p.unalias(), exp.Literal) for p in inner.selects)):  # GROUP BY 1 is a position
        return
    inner.set("distinct", None)
    inner.set("group", exp.Group(expressions=[(p.this if isinstance(p, exp.Alias) else p).copy()
                                              for p in inner.selects]))


def _plain_outer(select: exp.Select) -> bool:
    return _plain_spj(select) and not select.find(exp.Window)


def _rename_aliases(inner: exp.Select, taken: set[str]) -> None:
    """Give the inner query's FROM items aliases that the outer query's other FROM items do not use."""
    for source in from_items(inner):
        old = _source_alias(source)
        if old not in taken:
            taken.add(old)
            continue
        new = next(f"{old}_{i}" for i in itertools.count(2) if f"{old}_{i}" not in taken)
        taken.add(new)
        source.args["alias"].set("this", exp.to_identifier(new, quoted=True))
        for column in inner.find_all(exp.Column):
            if _name(column.args.get("table")) == old:
                column.set("table", exp.to_identifier(new, quoted=True))


def substitute_outputs(scope: exp.Expr, alias: str, outputs: dict[str, exp.Expr]) -> None:
    """Replace ``alias.column`` everywhere in ``scope`` by the expression the derived table outputs."""
    for column in list(scope.find_all(exp.Column)):
        if _name(column.args.get("table")) == alias and isinstance(column.this, exp.Identifier):
            name = _name(column.this)
            if name not in outputs:
                raise NotMergeable(f"column {alias}.{name} is not an output of the subquery")
            replacement = outputs[name].copy()
            if not isinstance(replacement, (exp.Column, exp.Literal, exp.Paren)):
                replacement = exp.Paren(this=replacement)
            column.replace(replacement)


def _outputs(inner: exp.Select) -> dict[str, exp.Expr]:
    return {p.alias_or_name: (p.this if isinstance(p, exp.Alias) else p) for p in inner.selects}


def _merge_spj(select: exp.Select, position: int, source: exp.Subquery, join: exp.Join | None, taken: set[str]) -> None:
    inner = source.this
    side = join_side(join) if join is not None else ""
    outer_sides = [join_side(j) for j in select.args.get("joins") or []]
    null_extended = side == "LEFT" or "RIGHT" in outer_sides[position:]  # the items before a RIGHT JOIN
    inner_joins = inner.args.get("joins") or []
    if side in ("RIGHT", "FULL") or "FULL" in outer_sides[position:]:
        return  # left as it is: the analysis gives the reason
    if null_extended:
        # A NULL-extended derived table: only a single table whose outputs are its columns,
        # so that a missing partner yields NULLs in the merged query too.
        if inner_joins or not all(isinstance(e, exp.Column) for e in _outputs(inner).values()):
            return
    inner_only = all(join_side(j) in ("INNER", "CROSS") and not j.args.get("using") for j in inner_joins)
    if position > 0 and inner_joins and not (join is not None and side in ("INNER", "CROSS")
                                             and not join.args.get("using") and inner_only):
        return  # a join nested after another FROM item, under an outer join: the join order matters
    alias = _source_alias(source)
    _rename_aliases(inner, taken)
    outputs = _outputs(inner)
    where = inner.args.get("where")
    substitute_outputs(select, alias, outputs)
    first = inner.args["from_"].this.copy()
    if join is None:
        select.set("from_", exp.From(this=first))
        if inner_joins:
            select.set("joins", [j.copy() for j in inner_joins] + list(select.args.get("joins") or []))
        if where is not None:
            if null_extended:
                first_join = select.args["joins"][0]
                first_join.set("on", exp.and_(first_join.args["on"], where.this.copy()))
            else:
                select.where(where.this.copy(), copy=False)
    elif inner_joins:  # A JOIN (B JOIN C ON c1 WHERE w) s ON c2 = A JOIN B ON true JOIN C ON c1 AND c2 AND w
        condition = [c for c in (join.args.get("on"), where.this if where is not None else None) if c is not None]
        join.set("this", first)
        join.set("on", exp.true())
        join.set("kind", None)
        added = [j.copy() for j in inner_joins]
        last = added[-1]
        last.set("on", exp.and_(*[c for c in (last.args.get("on"), *condition) if c is not None]).copy())
        last.set("kind", None)
        joins = list(select.args["joins"])
        at = next(i for i, j in enumerate(joins) if j is join)
        select.set("joins", joins[:at + 1] + added + joins[at + 1:])
    else:
        join.set("this", first)
        if where is not None:
            join.set("on", exp.and_(join.args.get("on") or exp.true(), where.this.copy()))


def _merge_into_aggregate(select: exp.Select, source: exp.Subquery) -> None:
    """``SELECT … FROM (SELECT … GROUP BY …) s WHERE p`` is the inner aggregate with the outer
    projections and ``p`` as a HAVING condition (both over the inner's outputs)."""
    inner = source.this.copy()
    alias = _source_alias(source)
    outputs = _outputs(inner)
    outer = select.copy()
    outer.set("from_", None)
    substitute_outputs(outer, alias, outputs)
    inner.set("expressions", outer.expressions)
    inner.set("order", None)
    if outer.args.get("where") is not None:
        having = inner.args.get("having")
        condition = outer.args["where"].this
        inner.set("having", exp.Having(this=exp.and_(having.this, condition) if having else condition))
    for key in ("order", "limit", "offset"):
        if outer.args.get(key) is not None:
            inner.set(key, outer.args[key])
    for key in set(select.args) | set(inner.args):  # in place: ``select`` may be the root
        select.set(key, inner.args.get(key))
