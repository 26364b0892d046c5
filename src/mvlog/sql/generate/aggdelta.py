"""Aggregates maintained by deltas: a refresh costs the changed rows, not whole groups.

An aggregate view whose aggregates are ``count(*)``, ``count(x)``, ``sum(x)`` and ``avg(x)`` over
exact types (integers, numeric), and expressions over them and the groups, keeps

- in its key map, each lineage row's aggregate *inputs* as of the last refresh (the old
  contribution of a changed row, which a primary-key-only log does not hold), and
- in a group table ``mvlog."groups$_<view>_<hash>"``, each group's state: its row count and,
  per input, the count of non-NULL values and (summed inputs) their sum.

A fast refresh reads, per affected group, the old state + what the changed lineage rows
contribute now (from the base tables) − what they contributed at the last refresh (from the
key map), and computes the view's outputs (and HAVING) from that state in PostgreSQL, so the
values are the query's own to the last digit. A group whose row count reaches 0 is deleted.
The record step writes the same new states into the group table, in the transaction that
brings the key map to the refresh's stamp. Everything here is pure SQL generation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import TypeVar

from sqlglot import exp

from mvlog.model import HIDDEN_PREFIX, PRESENT
from mvlog.sql.generate import aggprobe
from mvlog.sql.generate.changes import (
    changed_keys_sql,
    in_query,
    key_names,
    keymap_items,
    keymap_key_columns,
    keymap_table,
    log_table,
    logged_after,
    null_safe_matches,
    touched_rows,
)
from mvlog.sql.generate.keymap import qualified
from mvlog.sql.parse.sqltree import parse_select, parsed, sql_text, union_of
from mvlog.sql.pieces import aggplan
from mvlog.sql.pieces.aggplan import ROWS, STATE, count_column, distinct_column, extreme_column, sum_column
from mvlog.sql.pieces.shape import ViewShape, col, ident, input_column

SIGNED = HIDDEN_PREFIX + "signed"  # CTE: the changed lineage rows now (+1) and at the last refresh (-1)
DELTA = HIDDEN_PREFIX + "delta"  # CTE: per affected group, what the window adds and removes
GROUP_STATE = HIDDEN_PREFIX + "group_state"  # CTE: STATE without the MIN/MAX (which the group table does not hold)
SIGN = HIDDEN_PREFIX + "sign"  # +1: a contribution now, -1: one at the last refresh
ROW_ID = HIDDEN_PREFIX + "row"  # the group table's row (ctid) holding the old state


def _distinct_change_column(j: int) -> str:
    """A changed row's change of the group's distinct count of input ``j`` (+1 enters, -1 leaves)."""
    return f"{HIDDEN_PREFIX}dd{j}"


def _changed_extreme_column(function: str, j: int) -> str:
    """DELTA's column: ``min``/``max`` of input ``j`` over the group's changed lineage rows now."""
    return f"{HIDDEN_PREFIX}now_{function}{j}"


def groups_table(shape: ViewShape) -> exp.Table:
    assert shape.deltas is not None
    return exp.Table(this=ident(shape.deltas.groups), db=ident("mvlog"))


def kept_by_deltas(shape: ViewShape, input_types: Sequence[int] | None = None,
                   group_table: Sequence[str] | None = None) -> ViewShape:
    """The one decision after shaping whether an aggregate's groups are kept by deltas or
    recomputed: recomputed if its summed inputs (of PostgreSQL types ``input_types``, learnt at
    compile) are not exact, or if its group table (``group_table``: its columns now, learnt
    before a fast refresh; [] if it is missing) is not the one its deltas need."""
    if shape.deltas is None:
        return shape
    reason = aggplan.exact_inputs_reason(shape.deltas, list(input_types)) if input_types is not None else None
    if reason is None and group_table is not None and list(group_table) != groups_columns(shape):
        reason = "the state of its groups is built by its next complete refresh"
    return dataclasses.replace(shape, deltas=None, recompute_reason=reason) if reason else shape


def rows_from_state(shape: ViewShape) -> exp.Select | None:
    """The view's rows (its columns, hidden ones too) computed from the group table — each
    group's state at the last refresh — without reading the base tables; None when its outputs
    need more than the table holds (a MIN or MAX, probed from the key map)."""
    assert shape.deltas is not None
    if shape.deltas.extremes:
        return None
    outputs = parse_select(shape.deltas.outputs_sql)
    columns = [p.alias_or_name for p in outputs.selects if p.alias_or_name != PRESENT]
    lateral = exp.Lateral(this=exp.Subquery(this=outputs), alias=exp.TableAlias(this=ident("v")))
    return (exp.select(*[col(c, "v") for c in columns])
            .from_(groups_table(shape).as_(ident(STATE)))
            .join(lateral, on=exp.true()))


def groups_columns(shape: ViewShape) -> list[str]:
    """The group table's columns, in order: the group key, then the state."""
    return [*keymap_key_columns(shape), *_state_columns(shape)]


def _state_columns(shape: ViewShape) -> list[str]:
    assert shape.deltas is not None
    columns = [ROWS]
    for j, summed in enumerate(shape.deltas.summed):
        columns += [sum_column(j), count_column(j)] if summed else [count_column(j)]
    return columns + [distinct_column(j) for j in shape.deltas.distinct]


def _signed_sql(shape: ViewShape, since: datetime | None) -> exp.Query:
    """The changed lineage rows' group and inputs, signed: +1 now (the base tables), -1 at the
    last refresh (the key map)."""
    assert shape.deltas is not None
    keys = keymap_key_columns(shape)
    inputs = [input_column(j) for j in range(len(shape.deltas.inputs))]
    now = touched_rows(shape, keymap_items(shape), since)
    before = union_of([
        exp.select(exp.Star()).from_(keymap_table(shape))
        .where(in_query([col(c) for c in table.keymap_columns], changed_keys_sql(table.log, since)))
        for table in shape.tables
    ])
    return union_of([
        exp.select(*map(col, keys), exp.alias_(exp.Literal.number(sign), ident(SIGN)), *map(col, inputs))
        .from_(exp.Subquery(this=rows, alias=exp.TableAlias(this=ident(alias))))
        for sign, rows, alias in ((1, now, "now"), (-1, before, "before"))
    ], distinct=False)


def _distinct_changes_sql(shape: ViewShape, since: datetime | None, j: int) -> exp.Select:
    """Per (group, value of input ``j``) among the changed rows: +1 if the value enters the group,
    -1 if it leaves (in the column of the group's distinct count; the other columns NULL)."""
    assert shape.deltas is not None
    keys = keymap_key_columns(shape)
    value = col(input_column(j))
    pairs = (exp.select(*map(col, keys), exp.alias_(value.copy(), ident("v")),
                        exp.alias_(exp.func("bool_or", exp.EQ(this=col(SIGN), expression=exp.Literal.number(1))),
                                   ident("now")))
             .from_(SIGNED).where(exp.not_(exp.Is(this=value.copy(), expression=exp.Null())))
             .group_by(*map(col, keys), value.copy()))
    pair = col("v", "p")
    before = aggprobe.value_in_keymap(shape, since, j, "p", pair, untouched=False)
    after = exp.or_(col("now", "p"), aggprobe.value_in_keymap(shape, since, j, "p", pair, untouched=True))
    one = lambda condition: exp.Case(ifs=[exp.If(this=condition, true=exp.Literal.number(1))],  # noqa: E731
                                     default=exp.Literal.number(0))
    items: list[exp.Expr] = [*(col(k, "p") for k in keys), exp.alias_(exp.Literal.number(0), ident(SIGN))]
    items += [exp.Null() for _ in shape.deltas.inputs]
    items += [exp.Sub(this=one(after), expression=one(before)) if i == j else exp.Null()
              for i in shape.deltas.distinct]
    return exp.select(*items).from_(exp.Subquery(this=pairs, alias=exp.TableAlias(this=ident("p"))))


def _delta_sql(shape: ViewShape, since: datetime | None) -> exp.Select:
    """Per affected group (from SIGNED): lineage rows, sums and non-NULL counts added (now) minus
    removed (at the last refresh), the MIN/MAX of the changed rows now, and the change of each
    distinct count."""
    assert shape.deltas is not None
    keys = keymap_key_columns(shape)
    inputs = [input_column(j) for j in range(len(shape.deltas.inputs))]
    changes = [_distinct_change_column(j) for j in shape.deltas.distinct]
    signed: exp.Query = exp.select(*map(col, [*keys, SIGN, *inputs]),
                                   *[exp.alias_(exp.cast(exp.Null(), exp.DataType.build("bigint")), ident(c))
                                     for c in changes]).from_(SIGNED)
    for j in shape.deltas.distinct:
        signed = exp.union(signed, _distinct_changes_sql(shape, since, j), distinct=False)
    if shape.parameter_logs:
        signed = exp.union(signed, _every_group_sql(shape, since, len(inputs) + len(changes)), distinct=False)
    sign = col(SIGN)
    items = [exp.alias_(exp.Sum(this=sign.copy()), ident(ROWS))]
    for j, summed in enumerate(shape.deltas.summed):
        value = col(input_column(j))
        if summed:
            items.append(exp.alias_(exp.Sum(this=exp.Mul(this=sign.copy(), expression=value.copy())),
                                    ident(sum_column(j))))
        counted: exp.Expr = exp.Case(ifs=[exp.If(this=exp.Is(this=value.copy(), expression=exp.Null()),
                                                 true=exp.Literal.number(0))], default=sign.copy())
        if not shape.deltas.raw(j):  # the key map holds 1 for a non-NULL value, 0 for NULL
            counted = exp.Mul(this=sign.copy(), expression=value.copy())
        items.append(exp.alias_(exp.Sum(this=counted), ident(count_column(j))))
    items += [exp.alias_(exp.Sum(this=col(c)), ident(distinct_column(j)))
              for j, c in zip(shape.deltas.distinct, changes)]
    for function, j in shape.deltas.extremes:
        changed: exp.Expr = exp.Case(ifs=[exp.If(this=exp.EQ(this=sign.copy(), expression=exp.Literal.number(1)),
                                                 true=col(input_column(j)))])
        extreme = exp.Min(this=changed) if function == "min" else exp.Max(this=changed)
        items.append(exp.alias_(extreme, ident(_changed_extreme_column(function, j))))
    return (exp.select(*map(col, keys), *items)
            .from_(exp.Subquery(this=signed, alias=exp.TableAlias(this=ident("c"))))
            .group_by(*map(col, keys)))


def _every_group_sql(shape: ViewShape, since: datetime | None, nulls: int) -> exp.Select:
    """Every group of the group table with nothing added or removed (sign 0, NULL inputs), when a
    table a parameter reads (an uncorrelated scalar subquery in HAVING) has rows in the window:
    its value may have changed, so every group's HAVING is evaluated again, from its state."""
    logged = [exp.select(exp.Literal.number(1)).from_(log_table(log)) for log in shape.parameter_logs]
    changed = [exp.Exists(this=rows if since is None else rows.where(logged_after(since))) for rows in logged]
    return (exp.select(*map(col, keymap_key_columns(shape)), exp.Literal.number(0), *[exp.Null()] * nulls)
            .from_(groups_table(shape)).where(exp.or_(*changed)))


def _state_sql(shape: ViewShape) -> exp.Select:
    """Per group of DELTA: the old state's row (ctid, NULL for a new group) and the new state."""
    keys = keymap_key_columns(shape)
    table = groups_table(shape)
    old_row = [exp.alias_(exp.column("ctid"), ident(ROW_ID)), exp.Star()]
    equal = exp.select(*old_row).from_(table.copy()).where(
        exp.and_(*[exp.EQ(this=col(k), expression=col(k, "d")) for k in keys]))
    # A key holding NULL matches null-safely, and a key that cannot be NULL by = (the group
    # table's index finds the groups by a leading one): where a key is NULL in nearly every
    # group (TPC-DS's c_login), a scan of the group table per group was q11's 1,230 × 39,450.
    matches = null_safe_matches([(col(k), col(k, "d")) for k in keys], shape.null_free_keys)
    nullable = [k for k, match in zip(keys, matches) if isinstance(match, exp.NullSafeEQ)]
    parts: list[exp.Query] = [equal]
    if nullable:
        parts.append(exp.select(*[r.copy() for r in old_row]).from_(table.copy()).where(exp.and_(
            exp.or_(*[exp.Is(this=col(k, "d"), expression=exp.Null()) for k in nullable]), *matches)))
    old = exp.Lateral(this=exp.Subquery(this=union_of(parts, distinct=False)), alias=exp.TableAlias(this=ident("g")))
    items: list[exp.Expr] = [*(col(k, "d") for k in keys), col(ROW_ID, "g")]
    for name in _state_columns(shape):
        items.append(exp.alias_(exp.Add(
            this=exp.func("coalesce", col(name, "g"), exp.Literal.number(0)),
            expression=exp.func("coalesce", col(name, "d"), exp.Literal.number(0))), ident(name)))
    assert shape.deltas is not None
    items += [col(_changed_extreme_column(f, j), "d") for f, j in shape.deltas.extremes]
    return (exp.select(*items).from_(exp.Table(this=ident(DELTA), alias=exp.TableAlias(this=ident("d"))))
            .join(old, on=exp.true(), join_type="left"))


_WithCTEs = TypeVar("_WithCTEs", exp.Query, exp.Insert)


def _with_state(query: _WithCTEs, shape: ViewShape, since: datetime | None, extremes: bool = False) -> _WithCTEs:
    """``query`` with the CTEs DELTA and STATE (with ``extremes``: STATE also holds each group's
    MIN/MAX now)."""
    assert shape.deltas is not None
    query = (query.with_(SIGNED, as_=_signed_sql(shape, since), copy=False)
             .with_(DELTA, as_=_delta_sql(shape, since), copy=False))
    if not extremes or not shape.deltas.extremes:
        return query.with_(STATE, as_=_state_sql(shape), copy=False)
    items: list[exp.Expr] = [exp.Star()]
    for function, j in shape.deltas.extremes:
        combine = exp.Least if function == "min" else exp.Greatest
        kept = aggprobe.kept_extreme(shape, since, function, j, GROUP_STATE)
        now = col(_changed_extreme_column(function, j), GROUP_STATE)
        items.append(exp.alias_(combine(this=kept, expressions=[now]), ident(extreme_column(function, j))))
    extended = exp.select(*items).from_(exp.Table(this=ident(GROUP_STATE)))
    return query.with_(GROUP_STATE, as_=_state_sql(shape), copy=False).with_(STATE, as_=extended, copy=False)


def fast_delta_sql(shape: ViewShape, since: datetime | None) -> str:
    """The fast read of a delta-maintained aggregate view: per affected group, its key
    (``_mvlog_key_<i>``) and its row computed from the new state (PRESENT NULL: no row any more)."""
    assert shape.deltas is not None
    keys = keymap_key_columns(shape)
    outputs = exp.Lateral(this=exp.Subquery(this=parsed(shape.deltas.outputs_sql)),
                          alias=exp.TableAlias(this=ident("v")))
    query = (exp.select(*[exp.alias_(col(k, STATE), ident(n)) for k, n in zip(keys, key_names(len(keys)))],
                        exp.column(exp.Star(), table=ident("v")))
             .from_(STATE).join(outputs, on=exp.true(), join_type="left"))
    return sql_text(_with_state(query, shape, since, extremes=True))


def groups_update_sql(shape: ViewShape, since: datetime | None) -> list[str]:
    """Bring the group table to the window's end (run before the key map's update, which it reads
    as of the last refresh): replace the affected groups' states, dropping emptied groups."""
    columns = groups_columns(shape)
    table = groups_table(shape)
    gone = exp.delete(table.copy(), where=exp.In(this=exp.column("ctid"), query=exp.Subquery(
        this=exp.select(col(ROW_ID)).from_(STATE)
        .where(exp.Not(this=exp.Is(this=col(ROW_ID), expression=exp.Null()))))))
    insert = exp.insert(
        exp.select(*map(col, columns)).from_(STATE).where(exp.GT(this=col(ROWS), expression=exp.Literal.number(0))),
        table, columns=[ident(c) for c in columns])
    insert = _with_state(insert, shape, since)
    insert.args["with_"].append("expressions",
                                exp.CTE(this=gone, alias=exp.TableAlias(this=ident(HIDDEN_PREFIX + "gone"))))
    return [sql_text(insert)]


def groups_rebuild_sql(shape: ViewShape, exists: bool) -> list[str]:
    """Statements that rebuild the group table from the (rebuilt) key map; an existing table is
    emptied and refilled, a missing one created with an index on the group columns."""
    assert shape.deltas is not None
    keys = keymap_key_columns(shape)
    table = sql_text(groups_table(shape))
    items: list[exp.Expr] = [*map(col, keys), exp.alias_(exp.Count(this=exp.Star()), ident(ROWS))]
    for j, summed in enumerate(shape.deltas.summed):
        value = col(input_column(j))
        if summed:
            items.append(exp.alias_(exp.func("coalesce", exp.Sum(this=value.copy()), exp.Literal.number(0)),
                                    ident(sum_column(j))))
        counted = exp.Count(this=value.copy()) if shape.deltas.raw(j) else exp.Sum(this=value.copy())
        items.append(exp.alias_(counted, ident(count_column(j))))
    items += [exp.alias_(exp.Count(this=exp.Distinct(expressions=[col(input_column(j))])), ident(distinct_column(j)))
              for j in shape.deltas.distinct]
    grouped = sql_text(exp.select(*items).from_(keymap_table(shape)).group_by(*map(col, keys)))
    if exists:
        return [f"TRUNCATE {table}", f"INSERT INTO {table} {grouped}"]
    index = sql_text(ident(shape.deltas.groups + "_k"))
    columns = ", ".join(sql_text(ident(k)) for k in keys)
    return [f"CREATE TABLE {table} AS {grouped}", f"CREATE INDEX {index} ON {table} ({columns})"]


def groups_stand_in_sql(shape: ViewShape) -> list[str]:
    """An empty group table of today's columns in place of the view's (checking statements in a
    transaction that is rolled back; after the key map's stand-in)."""
    assert shape.deltas is not None
    return [drop_groups_sql(shape.deltas.groups), *groups_rebuild_sql(shape, exists=False)[:1]]


def drop_groups_sql(name: str) -> str:
    return f"DROP TABLE IF EXISTS {qualified(name)}"


def fast_refresh_statements(shape: ViewShape, since: datetime) -> list[str]:
    """The statements of a delta-maintained aggregate's fast refresh beyond the key map's update."""
    return [fast_delta_sql(shape, since), *groups_update_sql(shape, since)]
