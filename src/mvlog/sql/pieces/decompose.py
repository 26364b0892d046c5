"""The pieces of a query that mvlog keeps while it cannot key the query as a whole
(:mod:`mvlog.sql.strategies.composed`), found outermost first:

- an aggregated CTE, derived table or scalar subquery (GROUP BY, aggregates, DISTINCT), or a set
  operation of them (a UNION ALL of per-channel aggregates), that ``apply`` can keep fast as a view
  of its own — the CTEs of the query it reads inlined — is a piece, read by the query on top from a
  relation of its own (the same SQL twice is one piece);
- one it cannot keep is looked into for pieces of its own;
- first, a SELECT that computes window functions over its own aggregates (a row's share of its
  class, an average over its partition, a rank within a ROLLUP level) is split into the window over
  an aggregated derived table (:func:`split_windowed_aggregates`), whose aggregate can be a piece;
  then a ROLLUP, CUBE or GROUPING SETS aggregate into the same grouping over its finest level, a
  derived table that can be a piece (:mod:`mvlog.sql.pieces.finest`).

:func:`decompose` takes ``piece_columns``, which compiles a candidate as a view and says its output
columns (None when it cannot be kept fast): the decisions here are pure and testable with a stub.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlglot
from sqlglot import exp

from mvlog.sql.parse.sqltree import own_aggregates, parsed, sql_text
from mvlog.sql.pieces import finest
from mvlog.sql.pieces.shape import ident, relation

PieceColumns = Callable[[str], "list[str] | None"]
# The derived table's columns and alias (a piece's columns cannot be _mvlog_ ones: those are mvlog's).
GROUP, AGGREGATE, INNER = "mvlog_g", "mvlog_a", "mvlog_agg"


def _aggregated(node: exp.Expr) -> bool:
    """Whether ``node`` is a SELECT that aggregates (or a set operation of them only)."""
    if isinstance(node, exp.Subquery):
        return _aggregated(node.this)
    if isinstance(node, exp.SetOperation):
        return _aggregated(node.this) and _aggregated(node.expression)
    return isinstance(node, exp.Select) and (node.args.get("group") is not None or bool(own_aggregates(node))
                                             or bool(node.args.get("distinct")))


def _windows(select: exp.Select) -> list[exp.Window]:
    """The window functions of ``select`` itself (not of its subqueries)."""
    return [w for p in select.expressions for w in p.find_all(exp.Window)
            if w.find_ancestor(exp.Select) is select]


def _group_expressions(group: exp.Group) -> list[exp.Expr]:
    found: list[exp.Expr] = []
    for item in [*group.expressions, *(group.args.get("rollup") or []), *(group.args.get("cube") or []),
                 *(group.args.get("grouping_sets") or [])]:
        inner = item.expressions if isinstance(item, (exp.Rollup, exp.Cube, exp.GroupingSets, exp.Tuple)) else [item]
        for e in inner:
            found += e.expressions if isinstance(e, exp.Tuple) else [e]
    return found


def split_windowed_aggregate(select: exp.Select) -> exp.Select | None:
    """``SELECT g, f(agg(x)) OVER (…) … FROM … GROUP BY g HAVING h`` as ``SELECT g, f(a) OVER (…) …
    FROM (SELECT g AS mvlog_g1, agg(x) AS mvlog_a1 FROM … GROUP BY g) mvlog_agg WHERE h'``: the same
    rows, its aggregate a derived table of its own. None when ``select`` has no window over its
    aggregates, or an output that is neither a column nor named."""
    if not _windows(select) or (select.args.get("group") is None and not own_aggregates(select)):
        return None
    if not all(isinstance(p, (exp.Alias, exp.Column)) for p in select.expressions):
        return None
    group = select.args.get("group")
    keys = _group_expressions(group) if group is not None else []
    names: dict[str, str] = {}  # SQL of a group expression or an aggregate -> its column in the derived table
    inner_items = []
    for i, key in enumerate(dict.fromkeys(sql_text(k) for k in keys), start=1):
        names[key] = f"{GROUP}{i}"
        inner_items.append(exp.alias_(parsed(key), ident(names[key])))
    aggregates: list[exp.Expr] = []

    def collect(node: exp.Expr) -> None:
        """The aggregates under ``node``, outermost (a window's own function is not one)."""
        if isinstance(node, exp.Subquery):
            return
        if isinstance(node, (exp.AggFunc, exp.Grouping)) and not (isinstance(node.parent, exp.Window)
                                                                    and node.arg_key == "this"):
            aggregates.append(node)
            return
        for child in node.iter_expressions():
            collect(child)

    for part in [*select.expressions, select.args.get("having")]:
        if part is not None:
            collect(part)
    for i, aggregate in enumerate(dict.fromkeys(sql_text(a) for a in aggregates), start=1):
        names[aggregate] = f"{AGGREGATE}{i}"
        inner_items.append(exp.alias_(parsed(aggregate), ident(names[aggregate])))

    def replaced(node: exp.Expr) -> exp.Expr:
        def swap(n: exp.Expr) -> exp.Expr:
            name = names.get(sql_text(n)) if not isinstance(n, (exp.Alias, exp.Identifier)) else None
            return exp.column(ident(name), table=ident(INNER)) if name else n
        return node.copy().transform(swap)

    outer_items = []
    for p in select.expressions:
        name = p.alias_or_name
        expression = p.this if isinstance(p, exp.Alias) else p
        outer_items.append(exp.alias_(replaced(expression), ident(name)))
    outer = exp.select(*outer_items)
    leftover = [c for item in outer_items for c in item.find_all(exp.Column) if c.table != INNER]
    if leftover:  # a column neither grouped nor under an aggregate: not this shape
        return None
    inner = select.copy()
    for arg in ("expressions", "having", "order", "limit", "offset", "distinct", "windows"):
        inner.set(arg, None)
    inner.set("expressions", inner_items)
    outer = outer.from_(exp.Subquery(this=inner, alias=exp.TableAlias(this=ident(INNER))))
    if select.args.get("having") is not None:
        outer = outer.where(replaced(select.args["having"].this))
    for arg in ("order", "limit", "offset", "distinct"):
        if select.args.get(arg) is not None:
            outer.set(arg, select.args[arg].copy())
    return outer


def split_windowed_aggregates(tree: exp.Expr) -> exp.Expr:
    """``tree`` with every SELECT that computes windows over its own aggregates split (innermost first)."""
    for select in reversed(list(tree.find_all(exp.Select))):
        split = split_windowed_aggregate(select)
        if split is not None:
            if select is tree:
                tree = split
            else:
                select.replace(split)
    return tree


def _cte_names(tree: exp.Expr) -> dict[str, exp.CTE]:
    with_ = tree.args.get("with_")
    return {c.alias_or_name: c for c in (with_.expressions if with_ else [])}


def _inlined(node: exp.Expr, ctes: dict[str, exp.CTE]) -> exp.Expr:
    """``node`` with each CTE of the query it reads as a derived table of the CTE's body."""
    node = node.copy()
    for _ in range(len(ctes) + 1):  # a CTE's body may read an earlier CTE
        tables = [t for t in node.find_all(exp.Table) if not t.db and t.name in ctes]
        if not tables:
            return node
        for table in tables:
            cte = ctes[table.name]
            alias = exp.TableAlias(this=ident(table.alias_or_name),
                                   columns=[c.copy() for c in cte.args["alias"].columns])
            replacement = exp.Subquery(this=cte.this.copy(), alias=alias)
            if table is node:
                return node
            table.replace(replacement)
    return node


def _read(relation: str, columns: list[str]) -> exp.Select:
    return exp.select(*[exp.column(ident(c)) for c in columns]).from_(exp.Table(this=ident(relation)))


def _candidates(node: exp.Expr) -> list[exp.Expr]:
    """The subtrees of query ``node`` that may be pieces, outermost first: its CTE bodies, its
    derived tables, the operands of its set operations, its subqueries in expressions."""
    found: list[exp.Expr] = []
    if isinstance(node, exp.Subquery):
        return _candidates(node.this)
    if isinstance(node, exp.SetOperation):
        return [operand for side in (node.this, node.expression)
                for operand in ([side] if not isinstance(side, exp.SetOperation) else _candidates(side))]
    with_ = node.args.get("with_")
    found += [c.this for c in (with_.expressions if with_ else [])]
    if isinstance(node, exp.Select):
        items = [node.args.get("from_"), *(node.args.get("joins") or [])]
        found += [s for item in items if item is not None for s in item.find_all(exp.Subquery)
                  if isinstance(s.parent, (exp.From, exp.Join)) and s.find_ancestor(exp.Select) is node]
        # scalar subqueries, and the subqueries of IN and EXISTS (pieces too when they are not
        # correlated; else looked into)
        found += [s for part in (*node.expressions, node.args.get("where"), node.args.get("having")) if part is not None
                  for s in part.find_all(exp.Subquery)
                  if not isinstance(s.parent, (exp.From, exp.Join)) and s.find_ancestor(exp.Select) is node]
    return found


def _distinct_operand(node: exp.Expr) -> bool:
    """Whether ``node`` is a plain SELECT operand of a set operation that keeps distinct rows."""
    parent = node.parent
    return (isinstance(node, exp.Select) and isinstance(parent, (exp.Intersect, exp.Except, exp.Union))
            and bool(parent.args.get("distinct")) and not _aggregated(node) and not node.args.get("limit"))


def decompose(query: str, piece_columns: PieceColumns,
              types_of: finest.TypesOf | None = None) -> tuple[str, list[str]] | None:
    """The query on top (piece ``i`` read from the relation ``relation(i)``) and the pieces' SQL,
    or None when no piece is found (see the module; ``types_of``: a query's output types, to keep
    a grouping-sets aggregate's finest level only, :mod:`mvlog.sql.pieces.finest`)."""

    try:
        tree = parsed(query)
    except sqlglot.errors.ParseError:
        return None
    if not isinstance(tree, exp.Query):
        return None
    tree = split_windowed_aggregates(tree)
    if types_of is not None:
        written = _cte_names(tree.copy())
        tree = finest.split_every_grouping_set(tree, types_of, lambda node: _inlined(node, written))
    ctes = _cte_names(tree)
    pieces: list[str] = []
    numbered: dict[str, tuple[int, list[str]]] = {}
    refused: set[str] = set()

    def kept(node: exp.Expr) -> tuple[int, list[str]] | None:
        """``node`` as a piece: its number and columns (asked once), or None if it cannot be one."""
        sql = sql_text(_inlined(node, ctes))
        if sql not in numbered and sql not in refused:
            columns = piece_columns(sql)
            if columns is None:
                refused.add(sql)
            else:
                pieces.append(sql)
                numbered[sql] = (len(pieces), columns)
        return numbered.get(sql)

    def visit(node: exp.Expr) -> None:
        for candidate in _candidates(node):
            body = candidate.this if isinstance(candidate, exp.Subquery) else candidate
            if _distinct_operand(candidate) and isinstance(body, exp.Select):
                body = body.copy().distinct()  # INTERSECT, EXCEPT, UNION: the operand's distinct rows are enough
            if finest.is_split(body) and kept(finest.finest_level(body)) is None:
                original = finest.unsplit(body)  # its finest level is no piece: the grouping sets may be one
                body.replace(original)
                candidate, body = (original if candidate is body else candidate), original
            if not _aggregated(body) or finest.is_split(body):
                visit(candidate)
                continue
            found = kept(body)
            if found is None:
                visit(candidate)
                continue
            i, columns = found
            read = _read(relation(i), columns)
            if isinstance(candidate, exp.Subquery):
                candidate.set("this", read)
            elif isinstance(candidate.parent, exp.CTE):
                # NOT MATERIALIZED: each reference is planned with its own filters and estimated
                # from the piece's table. Materialized, a CTE read three times (q31: a quarter
                # each) is estimated at a row per filter, and joined by nested loops over
                # thousands of rows: q31's fast read at SF 1 took 13.5 s, inlined 38 ms.
                candidate.parent.set("this", read)
                candidate.parent.set("materialized", False)
            else:
                candidate.replace(read)

    visit(tree)
    if not pieces:
        return None
    return sql_text(tree), pieces
