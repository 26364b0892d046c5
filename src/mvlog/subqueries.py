"""Subquery expressions (EXISTS, IN, scalar) as lineage: the table each reads and the condition
that ties its rows to the rows of the outer query's FROM items."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from mvlog.sqltree import DIALECT, TableRef, identifier_name, table_refs


@dataclass(frozen=True)
class SemiJoin:
    """A table a subquery expression reads, joined to the view's FROM items in its lineage by
    ``condition``: a row of it can change the subquery's value for a view row only if the two
    satisfy the condition, before or after the change."""

    table: TableRef
    condition: exp.Expression


def subquery_lineage(select: exp.Select, tables: list[TableRef], not_null: set[tuple[str, str]]
                     ) -> tuple[list[SemiJoin], list[str]]:
    """The table each subquery expression of ``select`` reads, and the condition that ties its
    rows to the FROM items' rows (or why a subquery cannot be keyed). Renames a subquery's alias
    that another table of the view already uses."""
    taken = {t.alias for t in tables}
    semi_joins, reasons = [], []
    for inner in [s for s in select.find_all(exp.Select) if s is not select]:
        if inner.find_ancestor(exp.Select) is not select:
            continue  # nested deeper: the enclosing subquery is refused below
        holder = inner.parent.parent if isinstance(inner.parent, exp.Subquery) else inner.parent
        if isinstance(inner.parent, exp.Subquery) and isinstance(holder, (exp.From, exp.Join)):
            continue  # a derived table: the FROM check gives its reason
        refs = table_refs(inner)
        if (len(refs) != 1 or inner.args.get("joins") or any(s is not inner for s in inner.find_all(exp.Select))
                or not isinstance(inner.args["from_"].this, exp.Table)):
            reasons.append("a subquery over more than one table, or over a subquery, is not incrementally maintainable")
            continue
        ref = refs[0]
        if ref.alias in taken:
            ref = _rename_subquery_alias(inner, ref, taken)
        taken.add(ref.alias)
        where = inner.args.get("where")
        conditions = [where.this.copy()] if where is not None else []
        null_sensitive = False
        if isinstance(holder, exp.In) and holder.args.get("query") is inner.parent:
            outer = holder.this.expressions if isinstance(holder.this, exp.Tuple) else [holder.this]
            values = [p.this if isinstance(p, exp.Alias) else p for p in inner.selects]
            if len(outer) != len(values):
                reasons.append("an IN subquery must return as many columns as it is compared with")
                continue
            if _positive(holder, select) or all(_not_null(e, not_null) for e in outer + values):
                conditions.insert(0, exp.and_(*[exp.EQ(this=v.copy(), expression=o.copy())
                                                for v, o in zip(values, outer)]))
            else:  # a NULL anywhere in the subquery's rows makes NOT IN NULL: all of them matter
                null_sensitive = True
        elif not isinstance(holder, exp.Exists) and not isinstance(inner.parent, exp.Subquery):
            reasons.append("subqueries other than EXISTS, IN and scalar subqueries are not incrementally maintainable")
            continue
        condition = exp.and_(*conditions) if conditions else None
        columns = list(condition.find_all(exp.Column)) if condition is not None else []
        outer_refs = [c for c in columns if identifier_name(c.args.get("table") or "") != ref.alias]
        if len(outer_refs) in (0, len(columns)):
            if null_sensitive:
                reasons.append(f"{holder.sql(DIALECT)[:80]} is not incrementally maintainable: under NOT or outside "
                               f"WHERE, IN depends on NULLs in all its subquery's rows; declare the compared columns "
                               f"NOT NULL or write (NOT) EXISTS")
            else:
                reasons.append("a subquery that does not relate its rows to the outer query's rows (an uncorrelated "
                               "subquery) is not incrementally maintainable: every view row would depend on every "
                               "row it reads")
            continue
        semi_joins.append(SemiJoin(ref, condition))
    return semi_joins, reasons


def _rename_subquery_alias(inner: exp.Select, ref: TableRef, taken: set[str]) -> TableRef:
    """Inside a subquery its own alias shadows the outer query's; in the lineage both are joined."""
    new = next(f"{ref.alias}_{i}" for i in range(2, 1000) if f"{ref.alias}_{i}" not in taken)
    table = inner.args["from_"].this
    table.set("alias", exp.TableAlias(this=exp.to_identifier(new, quoted=True)))
    for column in inner.find_all(exp.Column):
        if column.args.get("table") is not None and identifier_name(column.args["table"]) == ref.alias:
            column.set("table", exp.to_identifier(new, quoted=True))
    return TableRef(ref.schema, ref.name, new)


def _positive(node: exp.Expression, select: exp.Select) -> bool:
    """Whether ``node`` is reached from ``select``'s WHERE through AND, OR and parentheses only:
    there a NULL and a FALSE drop the row alike."""
    parent = node.parent
    while isinstance(parent, (exp.And, exp.Or, exp.Paren)):
        parent = parent.parent
    return isinstance(parent, exp.Where) and parent.parent is select


def _not_null(expression: exp.Expression, not_null: set[tuple[str, str]]) -> bool:
    if isinstance(expression, exp.Literal):
        return True
    return (isinstance(expression, exp.Column) and expression.args.get("table") is not None
            and (identifier_name(expression.args["table"]), identifier_name(expression.this)) in not_null)
