"""Which aggregate views are kept by state, and how: the plan (:class:`AggregateDeltas`) that
:mod:`mvlog.sql.generate.aggdelta` turns into SQL.

An aggregate view qualifies when every aggregate is ``count``, ``sum``, ``avg`` (over exact types,
checked at apply: :func:`exact_inputs_reason`), ``min``, ``max`` or ``count(DISTINCT x)``, with or
without ``FILTER``; its outputs and HAVING are rewritten over the group state (the CTE ``STATE``).
Pure: no database.
"""

from __future__ import annotations

from sqlglot import exp

from mvlog.model import HIDDEN_PREFIX, PRESENT
from mvlog.sql.parse.sqltree import parse_select, parsed, sql_text
from mvlog.sql.pieces.shape import AggregateDeltas, ViewShape, col, groups_name, ident, unit_column

STATE = HIDDEN_PREFIX + "state"  # CTE: each affected group's new state (and the old state's row)
ROWS = HIDDEN_PREFIX + "n"  # lineage rows of the group
EXACT_TYPES = {20, 21, 23, 1700}  # int8, int2, int4, numeric: sums that deltas keep exact
KEPT = (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max)  # the aggregates kept by state


def sum_column(j: int) -> str:
    return f"{HIDDEN_PREFIX}s{j}"


def count_column(j: int) -> str:
    return f"{HIDDEN_PREFIX}c{j}"


def distinct_column(j: int) -> str:
    """The group table's count of distinct non-NULL values of input ``j``."""
    return f"{HIDDEN_PREFIX}d{j}"


def extreme_column(function: str, j: int) -> str:
    """STATE's column of ``min``/``max`` of input ``j`` in the group now."""
    return f"{HIDDEN_PREFIX}{function}{j}"


def plan_deltas(select: exp.Select, groups: list[exp.Expr], keymap: str) -> AggregateDeltas | str:
    """How the aggregate ``select`` (grouped by ``groups``, the key map's units) is maintained by
    deltas, or why its affected groups are recomputed instead."""
    if select.args.get("distinct") or not groups:
        return "a global aggregate or SELECT DISTINCT over groups is recomputed"
    select = select.copy()
    parameters = _set_aside_parameters(select)
    having = select.args.get("having")
    written = [a.parent if isinstance(a.parent, exp.Filter) else a
               for part in [*select.selects, *([having] if having else [])] for a in part.find_all(exp.AggFunc)]
    for projection in select.selects:
        projection.replace(_without_filters(projection))
    having = _without_filters(having) if having else None
    found = [a for p in select.selects for a in p.find_all(exp.AggFunc)]
    found += list(having.find_all(exp.AggFunc)) if having else []
    inputs: dict[str, int] = {}
    summed: list[bool] = []
    extremes: dict[tuple[str, int], None] = {}
    distinct: dict[int, None] = {}
    for aggregate in found:
        name = sql_text(aggregate).split("(")[0].lower()  # as PostgreSQL calls it (string_agg)
        if not isinstance(aggregate, KEPT):
            return f"{name}() is recomputed per affected group (not maintained by deltas)"
        if aggregate.find_ancestor(exp.Window, exp.Filter):
            return f"{name}() with OVER is recomputed per affected group"
        argument = aggregate.this
        counted_distinct = isinstance(argument, exp.Distinct) and isinstance(aggregate, exp.Count)
        if counted_distinct and len(argument.expressions) == 1:
            argument = argument.expressions[0]
            if argument.find(exp.Tuple):  # pairs of a pulled-up join (sql/pullup.py): a record
                return f"{name}(DISTINCT (…)) of a record is recomputed per affected group"
        elif isinstance(argument, exp.Distinct):
            return f"{name}(DISTINCT …) is recomputed per affected group (count(DISTINCT x) is kept by state)"
        if isinstance(argument, exp.Star):
            continue
        if argument.find(exp.AggFunc, exp.Subquery) or aggregate.expressions:
            return f"{name}() over an aggregate, a subquery or several arguments is recomputed per affected group"
        text = sql_text(argument)
        j = inputs.setdefault(text, len(inputs))
        if j == len(summed):
            summed.append(False)
        if isinstance(aggregate, (exp.Min, exp.Max)):
            extremes[(name, j)] = None
        elif counted_distinct:
            distinct[j] = None
        else:
            summed[j] = summed[j] or not isinstance(aggregate, exp.Count)

    def over_state(node: exp.Expr) -> exp.Expr:
        for i, group in enumerate(groups):
            if node == group:
                return col(unit_column(i), STATE)
        if isinstance(node, exp.Count) and isinstance(node.this, exp.Star):
            return col(ROWS, STATE)
        if isinstance(node, exp.Count) and isinstance(node.this, exp.Distinct):
            return col(distinct_column(inputs[sql_text(node.this.expressions[0])]), STATE)
        if isinstance(node, (exp.Min, exp.Max)):
            return col(extreme_column(node.sql_name().lower(), inputs[sql_text(node.this)]), STATE)
        if isinstance(node, (exp.Count, exp.Sum, exp.Avg)):
            j = inputs[sql_text(node.this)]
            count = col(count_column(j), STATE)
            if isinstance(node, exp.Count):
                return count
            value: exp.Expr = col(sum_column(j), STATE)
            if isinstance(node, exp.Avg):  # PostgreSQL's avg of integers and numerics: numeric sum / count
                value = exp.Div(this=exp.cast(value, exp.DataType.build("numeric")), expression=count.copy())
            return exp.Case(ifs=[exp.If(this=exp.GT(this=count.copy(), expression=exp.Literal.number(0)),
                                        true=value)])
        return node

    outputs = []
    for projection in select.selects:
        if isinstance(projection, exp.Alias):
            outputs.append(exp.alias_(projection.this.copy().transform(over_state), projection.args["alias"].copy()))
        elif isinstance(projection, exp.Column) and isinstance(projection.this, exp.Identifier):
            outputs.append(exp.alias_(projection.copy().transform(over_state), projection.this.copy()))
        else:  # PostgreSQL names it ("sum", "count", …): name it to keep it by deltas
            return f"output {sql_text(projection)} has no name (AS …): its groups are recomputed"
    condition: exp.Expr = exp.GT(this=col(ROWS, STATE), expression=exp.Literal.number(0))
    if having:
        condition = exp.Case(ifs=[exp.If(this=condition,
                                         true=exp.Paren(this=having.this.copy().transform(over_state)))])
    for output in [*outputs, condition]:
        stray = next((c for c in output.find_all(exp.Column) if c.table != STATE), None)
        if stray is not None:
            return (f"output {sql_text(stray)} is not a GROUP BY expression or an aggregate: "
                    f"its groups are recomputed")
    condition = condition.transform(lambda node: parameters[node.name].copy()
                                    if isinstance(node, exp.Column) and node.name in parameters else node)
    outputs_sql = exp.select(*outputs, exp.alias_(exp.true(), ident(PRESENT))).where(condition)
    aggregates = tuple(dict.fromkeys(sql_text(a) for a in written))
    return AggregateDeltas(tuple(inputs), tuple(summed), sql_text(outputs_sql), groups_name(keymap),
                           aggregates, tuple(extremes), tuple(distinct))


def _set_aside_parameters(select: exp.Select) -> dict[str, exp.Subquery]:
    """Replace the scalar subqueries of ``select``'s HAVING (parameters: uncorrelated, see
    :func:`mvlog.sql.analyze.subqueries.is_parameter`) by placeholder columns of STATE, so that their own
    aggregates are not taken for the view's; the placeholders' names -> the subqueries."""
    having = select.args.get("having")
    found: dict[str, exp.Subquery] = {}
    for i, subquery in enumerate(list(having.find_all(exp.Subquery)) if having else []):
        if subquery.find_ancestor(exp.Subquery) is None:  # not inside another one
            name = f"{HIDDEN_PREFIX}parameter{i}"
            found[name] = subquery.copy()
            subquery.replace(col(name, STATE))
    return found


def _without_filters(node: exp.Expr) -> exp.Expr:
    """``agg(x) FILTER (WHERE c)`` as ``agg(CASE WHEN c THEN x END)`` (``count(*)``: of ``1``), which
    is the same aggregate over the same rows and keeps by deltas like any other input."""
    def rewrite(filtered: exp.Expr) -> exp.Expr:
        if not isinstance(filtered, exp.Filter) or not isinstance(filtered.this, KEPT):
            return filtered
        aggregate = filtered.this.copy()
        argument = aggregate.this
        if aggregate.expressions or isinstance(argument, exp.Distinct) and len(argument.expressions) != 1:
            return filtered
        value = exp.Literal.number(1) if isinstance(argument, exp.Star) else argument
        if isinstance(argument, exp.Distinct):  # NULLs are not counted: count(DISTINCT CASE … END)
            value = argument.expressions[0]
        case = exp.Case(ifs=[exp.If(this=filtered.expression.this.copy(), true=value.copy())])
        aggregate.set("this", exp.Distinct(expressions=[case]) if isinstance(argument, exp.Distinct) else case)
        return aggregate
    return node.transform(rewrite)


def exact_inputs_reason(deltas: AggregateDeltas, type_oids: list[int]) -> str | None:
    """Why deltas of the summed inputs (of PostgreSQL types ``type_oids``) would not be exact."""
    for text, summed, oid in zip(deltas.inputs, deltas.summed, type_oids):
        if summed and oid not in EXACT_TYPES:
            return (f"sum/avg of {text} (not an integer or numeric) would drift from the query's rounding "
                    f"if kept by deltas: its groups are recomputed")
    return None


def inputs_probe_sql(shape: ViewShape) -> str:
    """The aggregate inputs over the view's rows (to learn their types without reading any)."""
    assert shape.deltas is not None
    core = parse_select(shape.core_sql)
    core.set("expressions", [parsed(i) for i in shape.deltas.inputs])
    return sql_text(core)
