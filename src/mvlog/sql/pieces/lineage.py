"""The rows a join view is computed from, as a ``SELECT 1``: its *core* (FROM items and WHERE) and,
for outer joins and subqueries, its *lineage* from the root (see :func:`lineage`). A refresh
finds the view rows a changed base row touches through them (:mod:`mvlog.sql.generate.changes`).
"""

from __future__ import annotations

from sqlglot import exp

from mvlog.sql.analyze.subqueries import SemiJoin
from mvlog.sql.parse.sqltree import (
    conjuncts,
    from_items,
    identifier_name,
    item_alias,
    join_side,
    root_join,
    sql_text,
)
from mvlog.sql.pieces.shape import Tie, ident


def select_core(select: exp.Select) -> exp.Select:
    """``SELECT 1`` over ``select``'s FROM items and WHERE: the rows it is computed from."""
    core = exp.select(exp.Literal.number(1))
    core.set("from_", select.args["from_"].copy())
    if select.args.get("joins"):
        core.set("joins", [j.copy() for j in select.args["joins"]])
    if select.args.get("where"):
        core.set("where", select.args["where"].copy())
    return core


def lineage(select: exp.Select, sides: list[str], semi_joins: list[SemiJoin]) -> exp.Select:
    """``SELECT 1 FROM`` an outer-join view's FROM items as a chain from its root, every join
    from the first outer one on made LEFT, and only the WHERE conditions on the tables before it;
    then each table a subquery reads, LEFT JOINed on the condition that ties its rows to the view's.

    Every view row of a root row is a function of that root row's lineage rows, and a base row
    changes them only if it is in one of them, before or after the change: so the roots of the
    lineage rows that hold a changed row are all the roots whose view rows may change. (Inner
    joins after an outer one, or WHERE conditions on its NULL-extended side, would drop rows in
    which a change shows: a partner that appears removes its NULL-extended row.)

    A RIGHT JOIN's table is the root: ``A JOIN B … RIGHT JOIN C ON c`` becomes ``C LEFT JOIN (A JOIN
    B …) ON c``. The inner joins' rows are combinations of base rows, present or not, so a change
    shows in the lineage rows that hold the changed row (an outer join there would not do: a
    partner that appears replaces a NULL-extended row that holds no key of it)."""
    items = [select.args["from_"].this.copy()]
    joins = [j.copy() for j in select.args.get("joins") or []]
    right = root_join(joins)
    if right is not None:  # P RIGHT JOIN b ON c …  ->  b LEFT JOIN P ON c …, P nested if it joins
        prefix_item = items[0]
        if right > 0:
            prefix_item.set("joins", joins[:right])
            prefix_item = exp.Subquery(this=prefix_item)
        root = joins[right]
        items[0] = root.this
        root.set("this", prefix_item)
        joins = [root] + joins[right + 1:]
    first_outer = 0 if right is not None else next(
        (i for i, side in enumerate(sides) if side == "LEFT"), len(sides))
    for join in joins[:first_outer]:
        if _comma(join):  # `a, b LEFT JOIN s ON <a's column>` may not name a: `a CROSS JOIN b` may
            join.set("kind", "CROSS")
    for join in joins[first_outer:]:
        if _comma(join):
            join.set("on", exp.true())
        join.set("side", "LEFT")
        join.set("kind", None)
    prefix = {item_alias(items[0])} | {item_alias(j.this) for j in joins[:first_outer]}
    item: exp.Table | exp.Subquery
    for semi in semi_joins:  # one table, or several cross-joined in parentheses (their ON is in the condition)
        item, *others = [exp.Table(this=ident(ref.name), db=ident(ref.schema) if ref.schema else None,
                                   alias=exp.TableAlias(this=ident(ref.alias))) for ref in semi.tables]
        if others:
            item.set("joins", [exp.Join(this=other, kind="CROSS") for other in others])
            item = exp.Subquery(this=item)
        joins.append(exp.Join(this=item, on=semi.condition.copy(), side="LEFT"))
    core = exp.select(exp.Literal.number(1)).from_(items[0])
    core.set("joins", joins)
    where = select.args.get("where")
    if where is not None:
        kept = [c.copy() for c in conjuncts(where.this) if _on_tables(c, prefix)]
        if kept:
            core.where(exp.and_(*kept), copy=False)
    return core


def split_lineage(select: exp.Select, sides: list[str], semi_joins: list[SemiJoin], root: str
                  ) -> tuple[tuple[str, ...], tuple[Tie | None, ...]]:
    """An aggregate's split key map (``ViewShape.keymap_cores`` and ``keymap_ties``): the lineage
    without subqueries, then per subquery its tied core (:func:`tied_core`) or the lineage with it
    alone; the ties are () when no subquery is tied."""
    branches: list[tuple[exp.Select, Tie | None]] = [(lineage(select, sides, []), None)]
    for semi in semi_joins:
        branches.append(tied_core(semi, root) or (lineage(select, sides, [semi]), None))
    ties = tuple(tie for _, tie in branches)
    return tuple(sql_text(branch) for branch, _ in branches), ties if any(ties) else ()


def tied_core(semi: SemiJoin, root: str) -> tuple[exp.Select, Tie] | None:
    """``SELECT 1 FROM`` the subquery's tables ``WHERE`` its conditions on them alone, and its
    :class:`Tie` to the root ``root``, when every other condition is an equality between an
    expression over its tables and one over the root's columns (None otherwise, or when there is
    none: then its rows are tied to the outer rows by the lineage)."""
    aliases = tuple(ref.alias for ref in semi.tables)
    own, inner, outer = [], [], []
    for condition in _conjuncts(semi.condition):
        if condition.find(exp.Select):
            return None
        if _on_tables(condition, set(aliases)):
            own.append(condition.copy())
            continue
        if not isinstance(condition, exp.EQ):
            return None
        sides = [condition.this, condition.expression]
        if _on_tables(sides[1], set(aliases)) and _on_tables(sides[0], {root}):
            sides.reverse()
        if not (_on_tables(sides[0], set(aliases)) and _on_tables(sides[1], {root})):
            return None
        inner.append(sql_text(sides[0]))
        outer.append(sql_text(sides[1]))
    if not inner:
        return None
    first, *others = [exp.Table(this=ident(ref.name), db=ident(ref.schema) if ref.schema else None,
                                alias=exp.TableAlias(this=ident(ref.alias))) for ref in semi.tables]
    core = exp.select(exp.Literal.number(1)).from_(first)
    if others:
        core.set("joins", [exp.Join(this=other, kind="CROSS") for other in others])
    if own:
        core.where(exp.and_(*own), copy=False)
    return core, Tie(aliases, tuple(inner), tuple(outer))


def _conjuncts(condition: exp.Expr) -> list[exp.Expr]:
    """The operands of a condition's ANDs, through parentheses."""
    condition = condition.unnest()
    if isinstance(condition, exp.And):
        return [c for operand in (condition.this, condition.expression) for c in _conjuncts(operand)]
    return [condition]


def _comma(join: exp.Join) -> bool:
    """Whether ``join`` is a FROM list's comma (a cross join that binds looser than any JOIN)."""
    return not any(join.args.get(arg) for arg in ("on", "using", "kind", "side", "method"))


def _on_tables(condition: exp.Expr, aliases: set[str]) -> bool:
    """Whether every column of ``condition`` is qualified by one of ``aliases`` (and it has no subquery)."""
    columns = list(condition.find_all(exp.Column))
    return bool(columns) and not condition.find(exp.Select) and all(
        c.args.get("table") and identifier_name(c.args["table"]) in aliases for c in columns)


def semi_root(select: exp.Select, semi_joins: list[SemiJoin]) -> str | None:
    """The FROM item every subquery is correlated with, if it is not the first and the FROM items
    are inner-joined: the lineage's root to choose. A changed row is traced to the roots whose
    lineage holds it, and each root's rows are read again: with TPC-H Q18's ``orders`` as its
    root (``IN (SELECT l_orderkey …)`` is correlated with it), a changed line item touches its
    order; with the first table, ``customer``, every order of the customer, and the key map
    ties each subquery row to the customer's orders' groups."""
    joins = select.args.get("joins") or []
    if not semi_joins or any(join_side(j) not in ("INNER", "CROSS") or j.args.get("using") or j.args.get("method")
                             for j in joins):
        return None
    items = from_items(select)
    if not all(isinstance(i, exp.Table) for i in items):
        return None
    aliases = [item_alias(i) for i in items]
    referenced = {identifier_name(c.args["table"]) for s in semi_joins for c in s.condition.find_all(exp.Column)
                  if c.args.get("table")} & set(aliases)
    return next(iter(referenced)) if len(referenced) == 1 and aliases[0] not in referenced else None


def with_root_first(select: exp.Select, root: str) -> None:
    """``select``'s inner joins as a FROM list with ``root`` first, their ON conditions in WHERE."""
    items = from_items(select)
    conditions = [j.args["on"] for j in select.args.get("joins") or [] if j.args.get("on") is not None]
    first = next(i for i in items if item_alias(i) == root)
    select.set("from_", exp.From(this=first.copy()))
    select.set("joins", [exp.Join(this=i.copy()) for i in items if i is not first])
    if conditions:
        select.where(exp.and_(*[c.copy() for c in conditions]), copy=False)
