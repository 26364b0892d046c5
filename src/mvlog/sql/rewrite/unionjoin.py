"""A UNION ALL derived table joined to tables, as a UNION ALL of the joins (TPC-DS q71's sales of
three channels joined to item and time_dim; q05's sales and returns of a store joined to
date_dim and store, then aggregated):

    SELECT … FROM t1, (A UNION ALL B) u, t2 WHERE w GROUP BY …
    =  SELECT … FROM (SELECT <what the query reads> FROM t1, (A) u, t2 WHERE w
                      UNION ALL SELECT <the same> FROM t1, (B) u, t2 WHERE w) mvlog_union GROUP BY …

Inner joins distribute over UNION ALL: a row of ``u`` comes from exactly one branch and joins the
same rows of the other tables whichever branch it came from. Each branch is then a join the other
rules merge (the branch's own SELECT into it), and the query an aggregate over a UNION ALL of
joins — a shape mvlog keeps. Applied to a qualified SELECT (every column names its table's alias)
whose FROM items are tables and one UNION ALL derived table, joined inner.
"""

from __future__ import annotations

from sqlglot import exp

from mvlog.sql.parse.sqltree import join_side

UNION = "mvlog_union"  # the alias of the UNION ALL of the joins


def _branches(node: exp.Expr) -> list[exp.Expr] | None:
    """The branches of a chain of UNION ALLs (None for another set operation)."""
    if isinstance(node, exp.Subquery):
        return _branches(node.this)
    if not isinstance(node, exp.SetOperation):
        return [node]
    if not isinstance(node, exp.Union) or node.args.get("distinct") or node.args.get("with_"):
        return None
    left, right = _branches(node.this), _branches(node.expression)
    return None if left is None or right is None else left + right


def _the_union(select: exp.Select) -> exp.Subquery | None:
    """The one UNION ALL derived table among ``select``'s FROM items (the others tables, joined inner)."""
    items = [select.args["from_"].this, *(j.this for j in select.args.get("joins") or [])]
    if any(join_side(j) not in ("INNER", "CROSS") for j in select.args.get("joins") or []):
        return None
    derived = [i for i in items if isinstance(i, exp.Subquery)]
    if len(derived) != 1 or len(items) < 2 or not all(isinstance(i, (exp.Table, exp.Subquery)) for i in items):
        return None
    branches = _branches(derived[0].this)
    if branches is None or len(branches) < 2 or not isinstance(derived[0].this, exp.Union):
        return None
    return derived[0]


def _outer_parts(select: exp.Select) -> list[exp.Expr]:
    """What the query reads after the join: its outputs, GROUP BY, HAVING, ORDER BY."""
    parts: list[exp.Expr] = list(select.expressions)
    for key in ("group", "having", "order"):
        if select.args.get(key) is not None:
            parts.append(select.args[key])
    return parts


def union_of_joins(select: exp.Select) -> exp.Select | None:
    """``select`` with its joins distributed over its UNION ALL derived table (see the module), or
    None if it has none to distribute or reads a column it cannot name."""
    derived = _the_union(select)
    if derived is None:
        return None
    aliases = {i.alias_or_name for i in [select.args["from_"].this, *(j.this for j in select.args.get("joins") or [])]}
    read: dict[tuple[str, str], str] = {}  # (alias, column) -> the union's column
    for part in _outer_parts(select):
        for column in part.find_all(exp.Column):
            if column.find_ancestor(exp.Subquery) is not None:
                return None  # a subquery in the outputs: not this shape
            if not column.table or column.table not in aliases:
                return None
            read.setdefault((column.table, column.name), f"mvlog_c{len(read) + 1}")
    branches = _branches(derived.this)
    assert branches is not None
    union: exp.Expr | None = None
    for branch in branches:
        join = select.copy()
        for key in ("group", "having", "order", "limit", "offset", "distinct"):
            join.set(key, None)
        join.set("expressions", [exp.alias_(exp.column(exp.to_identifier(column, quoted=True),
                                                        table=exp.to_identifier(alias, quoted=True)), name, quoted=True)
                                 for (alias, column), name in read.items()])
        for item in [join.args["from_"].this, *(j.this for j in join.args.get("joins") or [])]:
            if isinstance(item, exp.Subquery):
                item.set("this", branch.copy())
        union = join if union is None else exp.union(union, join, distinct=False)
    assert union is not None

    def swap(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column) and (node.table, node.name) in read:
            return exp.column(read[(node.table, node.name)], table=UNION, quoted=True)
        return node

    outer = select.copy()
    outer.set("expressions", [exp.alias_(p.this.copy().transform(swap) if isinstance(p, exp.Alias)
                                         else p.copy().transform(swap), p.alias_or_name, quoted=True)
                              for p in select.expressions])
    for key in ("group", "having", "order"):
        if outer.args.get(key) is not None:
            outer.set(key, outer.args[key].transform(swap))
    outer.set("joins", None)
    outer.set("where", None)
    outer.set("from_", exp.From(this=exp.Subquery(this=union, alias=exp.TableAlias(this=exp.to_identifier(UNION)))))
    return outer


def unions_of_joins(tree: exp.Query) -> exp.Query:
    """Every SELECT of ``tree`` with its joins distributed over its UNION ALL derived table."""
    for select in list(tree.find_all(exp.Select, bfs=False))[::-1]:
        distributed = union_of_joins(select)
        if distributed is None:
            continue
        if select is tree:
            tree = distributed
        else:
            select.replace(distributed)
    return tree
