"""What rules out a fast refresh in a part of a query, whatever the query's class.

Owns the checks that :mod:`mvlog.sql.analyze.analysis` applies while it classifies a query: which
chains of outer joins have one root table, which functions are non-deterministic, and what a
SELECT groups by (GROUPING SETS, CUBE and ROLLUP, and GROUP BY positions, cannot key a view).
"""

from __future__ import annotations

from sqlglot import exp

from mvlog.sql.parse.sqltree import identifier_name, item_alias, join_side, null_rejecting

# Functions whose value changes between evaluations or over time: a view using them
# cannot be maintained from changed keys alone.
VOLATILE_FUNCTIONS = {
    "now", "clock_timestamp", "statement_timestamp", "transaction_timestamp", "timeofday",
    "random", "setseed", "gen_random_uuid", "uuid_generate_v4", "nextval", "currval", "setval",
    "txid_current", "pg_current_xact_id", "pg_sleep", "current_setting", "age",
}
# sqlglot parses gen_random_uuid(), localtime and localtimestamp into nodes of their own
VOLATILE_NODES = (exp.CurrentTimestamp, exp.CurrentDate, exp.CurrentTime, exp.Rand, exp.Uuid, exp.Localtime,
                  exp.Localtimestamp)


def is_volatile(node: exp.Expr) -> bool:
    """Whether ``node`` is a call of a function whose value changes between evaluations or over time."""
    return isinstance(node, VOLATILE_NODES) or _function_name(node) in VOLATILE_FUNCTIONS


def reads_volatile(tree: exp.Expr) -> bool:
    """Whether a query calls a function whose value changes while its tables do not (its result
    can change with nothing in its logs)."""
    return any(is_volatile(node) for node in tree.find_all(exp.Func))


def join_reasons(first: str, joins: list[exp.Join]) -> list[str]:
    """Why a join chain (``first``: the FROM item's alias) cannot be refreshed fast: every row of an
    outer-join view must hold a row of its *root*: its first table, or the table of a RIGHT JOIN
    (``P RIGHT JOIN C ON c`` is ``C LEFT JOIN (P) ON c``, see :func:`_right_after_left`), with LEFT
    and inner joins after it. A FULL JOIN is two such views (see keying._shape_full)."""
    reasons, outer = [], None  # the first outer join's side
    for i, join in enumerate(joins):
        side = join_side(join)
        written = join.args.get("using") or join.args.get("method") == "NATURAL"
        if side in ("RIGHT", "FULL") and outer in ("RIGHT", "FULL"):
            reasons.append(f"a {side} JOIN after a {outer} JOIN is not incrementally maintainable: the view would "
                           f"have two root tables; write the chain with LEFT JOINs")
        elif side in ("RIGHT", "FULL") and any(join_side(j) == "CROSS" for j in joins[:i]):
            reasons.append(f"a {side} JOIN after a comma or CROSS join is not incrementally maintainable: "
                           f"write the joins before it as JOIN … ON")
        elif side in ("RIGHT", "FULL") and written and (i > 0 or side == "FULL"):
            reasons.append(f"a {side} JOIN {'after the first join ' if side == 'RIGHT' else ''}with USING or "
                           f"NATURAL is not incrementally maintainable: write it with ON")
        elif side in ("RIGHT", "FULL") and outer == "LEFT":
            reasons += _right_after_left(first, joins[:i], join)
        elif side == "CROSS" and outer:
            reasons.append("a comma or CROSS join after an outer join is not incrementally maintainable: "
                           "write it as JOIN … ON")
        if outer is None and side in ("LEFT", "RIGHT", "FULL"):
            outer = side
    return reasons


def _right_after_left(first: str, prefix: list[exp.Join], join: exp.Join) -> list[str]:
    """Why ``P RIGHT|FULL JOIN c ON q`` with LEFT joins in ``P`` is not exact, if it is not.

    Its rows are ``c LEFT JOIN (P) ON q``. A changed row ``r`` of a table ``T`` of ``P`` changes
    ``P``'s rows that hold it and, where ``T`` is NULL-extended, rows that hold no key of ``r``
    (a partner appearing replaces ``(a, NULL)`` by ``(a, r)``). Those cannot change what a ``c`` row
    matches when ``q`` is false wherever ``T`` is NULL-extended (``c.x = T.y``), or reads only the
    tables joined before ``T`` (such a row matches the same ``c`` rows as the row holding ``r`` it
    replaces, which the lineage holds, before or after). Inner joins after a LEFT join in ``P``
    could drop that replaced row."""
    side = join_side(join)
    aliases = [first] + [item_alias(j.this) for j in prefix]
    first_left = next(i for i, j in enumerate(prefix) if join_side(j) == "LEFT")
    if any(join_side(j) != "LEFT" for j in prefix[first_left:]):
        return [f"a {side} JOIN after an inner join that follows a LEFT JOIN is not incrementally maintainable: "
                f"make that join LEFT, or move it before the LEFT JOIN"]
    condition = join.args.get("on")
    columns = list(condition.find_all(exp.Column)) if condition is not None else []
    if condition is None or condition.find(exp.Select) or any(not c.args.get("table") for c in columns):
        return [f"a {side} JOIN after a LEFT JOIN needs an ON condition whose columns are qualified by their "
                f"tables to be analysed"]
    used = {identifier_name(c.args["table"]) for c in columns}
    for position in range(first_left + 1, len(aliases)):
        nullable = aliases[position]
        if not (null_rejecting(condition, nullable) or used <= {*aliases[:position], item_alias(join.this)}):
            return [f"a {side} JOIN after a LEFT JOIN is not incrementally maintainable when its ON condition reads "
                    f"{nullable} or a table joined after it yet can hold where {nullable} is NULL-extended: compare a "
                    f"column of {nullable} in it, or read only tables joined before {nullable}"]
    return []


def _function_name(node: exp.Expr) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.this).lower()
    return node.sql_name().lower() if isinstance(node, exp.Func) else ""


class NotKeyable(Exception):
    """Why a view's groups cannot key it."""


def has_grouping_sets(group: exp.Group | None) -> bool:
    """Whether a GROUP BY has GROUPING SETS, ROLLUP or CUBE (sqlglot keeps them as items of the
    GROUP BY, or, in older versions, as its arguments)."""
    if group is None:
        return False
    return (any(isinstance(e, (exp.GroupingSets, exp.Rollup, exp.Cube)) for e in group.expressions)
            or any(group.args.get(k) for k in ("grouping_sets", "cube", "rollup")))


def group_expressions(select: exp.Select) -> list[exp.Expr]:
    """What ``select`` groups by (DISTINCT: its outputs, each once; positions resolved; none: [])."""
    group = select.args.get("group")
    if group is None and select.args.get("distinct") is not None:  # DISTINCT: grouped by every output
        outputs = [(p.this if isinstance(p, exp.Alias) else p).copy() for p in select.selects]
        return [e for i, e in enumerate(outputs) if e not in outputs[:i]]
    if group is None:
        return []
    if has_grouping_sets(group):
        raise NotKeyable("GROUPING SETS, CUBE and ROLLUP are not incrementally maintainable")
    result = []
    for item in group.expressions:
        if isinstance(item, exp.Literal) and item.is_int:
            position = int(item.this)
            if not 1 <= position <= len(select.selects):
                raise NotKeyable(f"GROUP BY position {position} is not in the select list")
            target = select.selects[position - 1]
            result.append((target.this if isinstance(target, exp.Alias) else target).copy())
        else:
            result.append(item.copy())
    return result
