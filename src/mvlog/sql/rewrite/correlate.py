"""An aggregated derived table joined on all of its groups, as correlated subqueries.

``SELECT n.name, count(*), sum(t.spent) FROM customers c JOIN nation n ON n.id = c.nation_id JOIN
(SELECT customer_id, sum(amount) AS spent FROM orders GROUP BY customer_id) t ON t.customer_id =
c.id WHERE t.spent > 100 GROUP BY n.name`` joins each customer row to at most one group of ``t``:
the one whose group value equals ``c.id``. So ``t.spent`` is, for that row, the correlated scalar
subquery ``(SELECT sum(o.amount) FROM orders o WHERE o.customer_id = c.id)``, and the row is in the
join exactly when ``EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id)``; a NULL ``c.id``
matches no group either way. The query over the tables alone, with those subqueries, has the same
rows — and subquery expressions are kept fast already: their tables join the view's lineage, and
the groups of the affected rows are recomputed with the subqueries evaluated by PostgreSQL (so a
customer whose total crosses the threshold enters or leaves its nation's count).

This is the pull-up's fallback (:mod:`mvlog.sql.rewrite.pullup`) for an aggregate over the join that does
not fold the derived table's aggregates: a condition on them, ``count(t.x)``, a float ``avg``.
"""

from __future__ import annotations

from sqlglot import exp

from mvlog.sql.parse.sqltree import identifier_name, sql_text
from mvlog.sql.rewrite.merge import substitute_outputs
from mvlog.sql.rewrite.rewrite import NotMergeable


def _text(node: exp.Expr) -> str:
    return sql_text(node)


def _refers_to(node: exp.Expr, alias: str) -> bool:
    return any(c.args.get("table") is not None and identifier_name(c.args["table"]) == alias
               for c in node.find_all(exp.Column))


def _output_of(node: exp.Expr, alias: str) -> str | None:
    """The derived table's output ``node`` names (``alias.name``), if it is one."""
    if isinstance(node, exp.Column) and node.args.get("table") is not None \
            and identifier_name(node.args["table"]) == alias:
        return identifier_name(node.this)
    return None


def correlated(select: exp.Select, source: exp.Subquery, group: list[exp.Expr], conditions: list[exp.Expr],
               sources: list[exp.Expr]) -> exp.Select | None:
    """``select`` over ``sources`` (its FROM items but the derived table ``source``) with the
    derived table's outputs as correlated subqueries, or None if some group of it is not joined by
    an equality to the other items (a row could then join several groups). ``group``: the inner
    query's GROUP BY; ``conditions``: the outer query's conditions (WHERE and every ON)."""
    alias = identifier_name(source.args["alias"].this)
    inner: exp.Select = source.this
    outputs = {p.alias_or_name: (p.this if isinstance(p, exp.Alias) else p) for p in inner.selects}
    group_texts = [_text(g) for g in group]
    grouped = {name: group_texts.index(_text(e)) for name, e in outputs.items() if _text(e) in group_texts}
    if any(not e.find(exp.AggFunc) for name, e in outputs.items() if name not in grouped):
        return None  # an output that is neither a group nor an aggregate
    matched: dict[int, exp.Expr] = {}  # group position -> the outer expression it equals
    used: list[exp.Expr] = []
    for condition in conditions:
        if not isinstance(condition, exp.EQ):
            continue
        for side, other in ((condition.this, condition.expression), (condition.expression, condition.this)):
            name = _output_of(side, alias)
            if name in grouped and grouped[name] not in matched and not _refers_to(other, alias):
                matched[grouped[name]] = other
                used.append(condition)
                break
    if len(matched) != len(group):
        return None

    def subquery(value: exp.Expr | None, condition: exp.Expr | None = None) -> exp.Select:
        """The inner query restricted to the outer row's group, selecting ``value`` (None: 1)."""
        body = inner.copy()
        for key in ("group", "having", "order"):
            body.set(key, None)
        body.set("expressions", [value.copy() if value is not None else exp.Literal.number(1)])
        correlation = [exp.EQ(this=group[i].copy(), expression=matched[i].copy()) for i in range(len(group))]
        body.where(exp.and_(*correlation, *([condition] if condition is not None else [])), copy=False)
        return body

    replacements: dict[str, exp.Expr] = {name: matched[i] for name, i in grouped.items()}
    replacements |= {name: exp.Subquery(this=subquery(e)) for name, e in outputs.items() if name not in grouped}
    outer = select.copy()
    kept = [c.copy() for c in conditions if not any(c is u for u in used)]
    holder = exp.select(*outer.selects).where(exp.and_(*kept)) if kept else exp.select(*outer.selects)
    if outer.args.get("group") is not None:
        if any(_output_of(c, alias) not in (None, *grouped) for c in outer.args["group"].find_all(exp.Column)):
            return None  # grouped by an aggregate of the derived table
        holder.set("group", outer.args["group"].copy())
    if outer.args.get("having") is not None:
        holder.set("having", outer.args["having"].copy())
    try:
        substitute_outputs(holder, alias, replacements)
    except NotMergeable:
        return None
    exists: list[exp.Expr] = [exp.Exists(this=subquery(None))]
    if inner.args.get("having") is not None:  # the group is in the derived table only if it passes HAVING
        exists.append(exp.Paren(this=exp.Subquery(this=subquery(inner.args["having"].this))))
    where = holder.args.get("where")
    holder.set("where", exp.Where(this=exp.and_(*([where.this] if where is not None else []), *exists)))
    holder.set("from_", exp.From(this=sources[0].copy()))
    holder.set("joins", [exp.Join(this=s.copy(), kind="CROSS") for s in sources[1:]])
    return holder
