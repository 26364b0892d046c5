"""Derived tables merged into the query that reads them, as PostgreSQL's planner pulls subqueries
up (a rule of :mod:`mvlog.sql.rewrite.normalize`, after :func:`mvlog.sql.rewrite.rewrite.qualified`
has given every column its table's alias): a derived table that only filters and projects
(select-project-join) is replaced by its FROM items and its outputs by the expressions that compute
them; one read by an outer query that only filters and projects it becomes that query's
aggregate; parenthesized inner joins are flattened into one chain. What cannot be merged exactly
is left alone (the analysis gives its reason).
"""

from __future__ import annotations

from sqlglot import exp

from mvlog.sql.parse.sqltree import join_side
from mvlog.sql.rewrite.rewrite import NotMergeable, optional_name, rename_aliases, source_alias


def merged_derived_tables(tree: exp.Query) -> exp.Query:
    """Each SELECT's parenthesized inner joins flattened and its mergeable derived tables merged
    into it, innermost first."""
    for select in list(tree.find_all(exp.Select, bfs=False))[::-1]:
        _flatten_parenthesized_joins(select)
        _merge_derived_tables(select)
    return tree


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
            taken = {source_alias(s) for s, _ in _from_items(select) if s.alias}
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


def substitute_outputs(scope: exp.Expr, alias: str, outputs: dict[str, exp.Expr]) -> None:
    """Replace ``alias.column`` everywhere in ``scope`` by the expression the derived table outputs."""
    for column in list(scope.find_all(exp.Column)):
        if optional_name(column.args.get("table")) == alias and isinstance(column.this, exp.Identifier):
            name = optional_name(column.this)
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
    alias = source_alias(source)
    rename_aliases(inner, taken)
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
    alias = source_alias(source)
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
