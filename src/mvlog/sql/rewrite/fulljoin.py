"""An aggregate over a FULL JOIN, keyed as the same aggregate over the UNION ALL of the join's two
parts (see :mod:`mvlog.sql.pieces.keying`'s ``full_join``): the rewrite, and whether a query needs it."""

from __future__ import annotations

import itertools

from sqlglot import exp

from mvlog.sql.parse.sqltree import full_join_parts, join_side, own_aggregates, sql_text


def aggregates_over_full_join(select: exp.Select) -> bool:
    return any(join_side(j) == "FULL" for j in select.args.get("joins") or []) and bool(
        select.args.get("group") or select.args.get("distinct") or select.args.get("having")
        or own_aggregates(select))


FULL_JOIN_PARTS = "_mvlog_full"  # the derived table full_join_as_union puts under the aggregate


def full_join_as_union(select: exp.Select, not_null: set[tuple[str, str]]) -> exp.Select | None:
    """A (qualified) aggregate over ``P FULL JOIN b ON c …`` (``P``: the first table ``a`` and the
    tables inner-joined to it) as the same aggregate over the UNION ALL of the join's two parts
    (see keying._shape_full): ``P LEFT JOIN b ON c …`` and ``P RIGHT JOIN b ON c … WHERE
    a.<a NOT NULL column> IS NULL``, each with the WHERE, outputting the columns the aggregate
    reads. None if ``a`` has no NOT NULL column or the aggregate reads none."""
    first = select.args["from_"].this.alias_or_name
    marker = sorted(c for alias, c in not_null if alias == first)
    outer = select.copy()
    for key in ("from_", "joins", "where"):
        outer.set(key, None)
    names: dict[str, exp.Column] = {}
    for column in list(outer.find_all(exp.Column)):
        if not column.args.get("table"):
            continue  # an output's alias (ORDER BY)
        key = sql_text(column)
        base = f"{column.table}_{column.name}"
        name = next(n for n in itertools.chain([base], (f"{base}_{i}" for i in itertools.count(2)))
                    if n not in names or sql_text(names[n]) == key)
        names[name] = column.copy()
        column.replace(exp.column(exp.to_identifier(name, quoted=True),
                                  table=exp.to_identifier(FULL_JOIN_PARTS, quoted=True)))
    if not marker or not names:
        return None
    columns = exp.select(*[exp.alias_(c.copy(), exp.to_identifier(n, quoted=True)) for n, c in names.items()])
    columns.set("from_", select.args["from_"].copy())
    columns.set("joins", [j.copy() for j in select.args["joins"]])
    if select.args.get("where") is not None:
        columns.set("where", select.args["where"].copy())
    marker_column = exp.column(exp.to_identifier(marker[0], quoted=True), table=exp.to_identifier(first, quoted=True))
    parts = full_join_parts(columns, marker_column)
    union = exp.union(*parts, distinct=False)
    outer.set("from_", exp.From(this=exp.Subquery(
        this=union, alias=exp.TableAlias(this=exp.to_identifier(FULL_JOIN_PARTS, quoted=True)))))
    outer.set("expressions", [p if isinstance(p, exp.Alias) else exp.alias_(p, exp.to_identifier(o, quoted=True))
                              for p, o in zip(outer.selects, [p.alias_or_name for p in select.selects])])
    return outer
