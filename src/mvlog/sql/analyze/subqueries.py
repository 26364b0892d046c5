"""Subquery expressions (EXISTS, IN, scalar) as lineage: the table each reads and the condition
that ties its rows to the rows of the outer query's FROM items."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from mvlog.sql.parse.sqltree import (
    DIALECT,
    TableRef,
    from_items,
    identifier_name,
    item_alias,
    join_side,
    sql_text,
    table_refs,
)


@dataclass(frozen=True)
class SemiJoin:
    """The tables a subquery expression reads (inner-joined, all conditions in ``condition``),
    joined to the view's FROM items in its lineage by ``condition``: a combination of their rows
    can change the subquery's value for a view row only if it satisfies the condition with that
    row, before or after the change; so a changed row matters only inside such a combination."""

    tables: tuple[TableRef, ...]
    condition: exp.Expr


@dataclass(frozen=True)
class RangeParameter:
    """An uncorrelated scalar subquery compared with an expression over one FROM item's row
    (``value``, over the columns of ``alias``): when the subquery's value moves from V0 to V1,
    only rows whose value lies between them can change the comparison's outcome (TPC-H Q22's
    ``c_acctbal > (SELECT avg(c_acctbal) …)``)."""

    alias: str  # the FROM item whose rows are compared
    value: str  # SQL over that item's columns
    subquery: str  # the scalar subquery's SELECT
    tables: tuple[TableRef, ...]  # the tables it reads


def subquery_lineage(select: exp.Select, tables: list[TableRef], not_null: set[tuple[str, str]]
                     ) -> tuple[list[SemiJoin], list[str], list[TableRef], list[RangeParameter]]:
    """The table each subquery expression of ``select`` reads, and the condition that ties its
    rows to the FROM items' rows (or why a subquery cannot be keyed); the tables read by
    *parameters*: uncorrelated scalar subqueries in ``HAVING`` (one value for every group, see
    :func:`is_parameter`); and the *range parameters* (:func:`range_parameter`). Renames a
    subquery's alias that another table of the view already uses."""
    taken = {t.alias for t in tables}
    semi_joins: list[SemiJoin] = []
    reasons: list[str] = []
    parameters: list[TableRef] = []
    ranges: list[RangeParameter] = []
    for inner in [s for s in select.find_all(exp.Select) if s is not select]:
        if inner.find_ancestor(exp.Select) is not select:
            continue  # nested deeper: the enclosing subquery is refused below
        holder = inner.parent.parent if isinstance(inner.parent, exp.Subquery) else inner.parent
        if isinstance(inner.parent, exp.Subquery) and isinstance(holder, (exp.From, exp.Join)):
            continue  # a derived table: the FROM check gives its reason
        refs, why = _inner_tables(inner)
        if why:
            reasons.append(why)
            continue
        own = {ref.alias for ref in refs}
        for i, ref in enumerate(refs):
            if ref.alias in taken:  # a new alias clashes with neither the view's nor the subquery's others
                refs[i] = _rename_subquery_alias(inner, ref, taken | own)
                own.add(refs[i].alias)
            taken.add(refs[i].alias)
        where = inner.args.get("where")
        conditions = [j.args["on"].copy() for j in inner.args.get("joins") or [] if j.args.get("on") is not None]
        conditions += [where.this.copy()] if where is not None else []
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
        aliases = {ref.alias for ref in refs}
        if is_parameter(inner, select, aliases):
            parameters += refs
            continue
        ranged = range_parameter(inner, select, aliases, {t.alias for t in tables}, refs)
        if ranged is not None:
            ranges.append(ranged)
            continue
        condition = exp.and_(*conditions) if conditions else None
        columns = list(condition.find_all(exp.Column)) if condition is not None else []
        outer_refs = [c for c in columns if identifier_name(c.args.get("table") or "") not in aliases]
        if len(outer_refs) in (0, len(columns)):
            if null_sensitive:
                assert holder is not None  # null_sensitive: holder is the IN
                reasons.append(f"{holder.sql(DIALECT)[:80]} is not incrementally maintainable: under NOT or outside "
                               f"WHERE, IN depends on NULLs in all its subquery's rows; declare the compared columns "
                               f"NOT NULL or write (NOT) EXISTS")
            else:
                reasons.append("a subquery that does not relate its rows to the outer query's rows (an uncorrelated "
                               "subquery) is not incrementally maintainable: every view row would depend on every "
                               "row it reads")
            continue
        assert condition is not None  # without one, outer_refs and columns are both empty (continue above)
        semi = SemiJoin(tuple(refs), condition)
        if _signature(semi) not in {_signature(s) for s in semi_joins}:
            semi_joins.append(semi)  # the same tables under the same condition: one join of the lineage
    return semi_joins, reasons, parameters, ranges


COMPARISONS = (exp.GT, exp.GTE, exp.LT, exp.LTE, exp.EQ, exp.NEQ)


def range_parameter(inner: exp.Select, select: exp.Select, aliases: set[str], outer: set[str],
                    refs: list[TableRef]) -> RangeParameter | None:
    """``inner`` as a range parameter of ``select``: an uncorrelated scalar subquery (it reads only
    its own tables, ``aliases``) that is one side of a comparison whose other side reads the
    columns of one FROM item of ``select`` (of ``outer``) and nothing else. For any comparison,
    ``x op V0`` and ``x op V1`` differ only where ``x`` lies between V0 and V1."""
    subquery = inner.parent
    comparison = subquery.parent if isinstance(subquery, exp.Subquery) else None
    if not isinstance(comparison, COMPARISONS) or inner.find_ancestor(exp.Select) is not select:
        return None
    if not all(c.args.get("table") is not None and identifier_name(c.args["table"]) in aliases
               for c in inner.find_all(exp.Column)):
        return None
    other = comparison.expression if comparison.this is subquery else comparison.this
    columns = list(other.find_all(exp.Column))
    owners = {identifier_name(c.args["table"]) for c in columns if c.args.get("table") is not None}
    if (not columns or len(owners) != 1 or any(c.args.get("table") is None for c in columns)
            or not owners <= outer or any(isinstance(n, (exp.Select, exp.AggFunc)) for n in other.walk())):
        return None
    return RangeParameter(owners.pop(), sql_text(other), sql_text(inner), tuple(refs))


def is_parameter(inner: exp.Select, select: exp.Select, aliases: set[str]) -> bool:
    """Whether ``inner`` is a *parameter* of the aggregate ``select``: a scalar subquery in its
    ``HAVING`` that reads only its own tables (``aliases``; no column of the outer query). Its one
    value is compared with every group's aggregates, so when its tables change every group is
    evaluated again, from the state mvlog keeps per group (:mod:`mvlog.sql.generate.aggdelta`)."""
    having = inner.find_ancestor(exp.Having)
    if (not isinstance(inner.parent, exp.Subquery) or having is None or having.parent is not select
            or isinstance(inner.parent.parent, (exp.Exists, exp.In)) or inner.find_ancestor(exp.AggFunc)):
        return False  # compared with the groups' aggregates, not an input of one
    return all(c.args.get("table") is not None and identifier_name(c.args["table"]) in aliases
               for c in inner.find_all(exp.Column))


def _signature(semi: SemiJoin) -> tuple[tuple[tuple[str | None, str], ...], str]:
    """The tables a semi-join reads and its condition, its own aliases numbered: two subqueries
    of one signature (``t.spent`` read twice, an EXISTS beside it) tie the same rows to a view row."""
    numbered = {ref.alias: f"_{i}" for i, ref in enumerate(semi.tables)}
    condition = semi.condition.copy()
    for column in condition.find_all(exp.Column):
        table = column.args.get("table")
        if table is not None and identifier_name(table) in numbered:
            column.set("table", exp.to_identifier(numbered[identifier_name(table)]))
    return tuple((ref.schema, ref.name) for ref in semi.tables), sql_text(condition)


def _inner_tables(inner: exp.Select) -> tuple[list[TableRef], str | None]:
    """The tables a subquery reads, if they are tables joined by inner or comma joins with ON (an
    outer join's NULL-extended rows would hold no key of a partner that appears), or why not."""
    joins = inner.args.get("joins") or []
    if (any(not isinstance(item, exp.Table) or not isinstance(item.this, exp.Identifier) for item in from_items(inner))
            or any(s is not inner for s in inner.find_all(exp.Select))):
        return [], "a subquery over a subquery, a function or VALUES is not incrementally maintainable"
    if any(join_side(j) not in ("INNER", "CROSS") or j.args.get("using") for j in joins):
        return [], ("a subquery with an outer join or a join with USING is not incrementally maintainable "
                    "(write its joins as inner joins with ON)")
    return table_refs(inner), None


def _rename_subquery_alias(inner: exp.Select, ref: TableRef, taken: set[str]) -> TableRef:
    """Inside a subquery its own alias shadows the outer query's; in the lineage both are joined."""
    new = next(f"{ref.alias}_{i}" for i in range(2, 1000) if f"{ref.alias}_{i}" not in taken)
    table = next(item for item in from_items(inner) if item_alias(item) == ref.alias)
    table.set("alias", exp.TableAlias(this=exp.to_identifier(new, quoted=True)))
    for column in inner.find_all(exp.Column):
        if column.args.get("table") is not None and identifier_name(column.args["table"]) == ref.alias:
            column.set("table", exp.to_identifier(new, quoted=True))
    return TableRef(ref.schema, ref.name, new)


def _positive(node: exp.Expr, select: exp.Select) -> bool:
    """Whether ``node`` is reached from ``select``'s WHERE through AND, OR and parentheses only:
    there a NULL and a FALSE drop the row alike."""
    parent = node.parent
    while isinstance(parent, (exp.And, exp.Or, exp.Paren)):
        parent = parent.parent
    return isinstance(parent, exp.Where) and parent.parent is select


def _not_null(expression: exp.Expr, not_null: set[tuple[str, str]]) -> bool:
    if isinstance(expression, exp.Literal):
        return True
    return (isinstance(expression, exp.Column) and expression.args.get("table") is not None
            and (identifier_name(expression.args["table"]), identifier_name(expression.this)) in not_null)
