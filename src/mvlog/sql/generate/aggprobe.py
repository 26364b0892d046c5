"""Probes of an aggregate's key map per group, for the aggregates that sums cannot keep.

The key map of an aggregate kept by state holds each lineage row's inputs as of the last refresh,
indexed on (group, input) for MIN/MAX and COUNT(DISTINCT …). A row of the key map whose base keys
no change of the window touched holds its value now. So, per affected group:

- MIN/MAX now = the extreme of the changed rows now (from the base tables) and of the group's
  *untouched* key-map rows: an index walk in the input's order that stops at the first untouched
  row (it skips only the group's changed rows);
- a value is in the group now when a changed row has it now or an untouched key-map row has it,
  and was in it at the last refresh when any key-map row of the group has it: each an index probe.

A group key holding NULL is matched by ``IS NULL`` (one branch per pattern of NULL keys, the
others cost nothing: their conditions on the group are false before any row is read).
"""

from __future__ import annotations

import itertools
from datetime import datetime

from sqlglot import exp

from mvlog.sql.generate.changes import changed_keys_sql, in_query, keymap_key_columns, keymap_table
from mvlog.sql.pieces.shape import ViewShape, col, ident, input_column

MAP = "m"  # the key map's alias in a probe


def _group_matches(shape: ViewShape, group: str) -> list[list[exp.Expr]]:
    """Conditions tying the key map's rows to the group ``group`` (an alias holding its key
    columns): one list per pattern of NULL keys (past three keys: equal, or null-safe)."""
    keys = keymap_key_columns(shape)
    patterns: list[tuple[bool | None, ...]] = (
        list(itertools.product((False, True), repeat=len(keys))) if len(keys) <= 3
        else [(False,) * len(keys), (None,) * len(keys)])
    branches = []
    for nulls in patterns:  # per key: False equal, True both NULL, None null-safe (some key NULL)
        match: list[exp.Expr] = []
        for k, null in zip(keys, nulls):
            mine, theirs = col(k, MAP), col(k, group)
            if null is None:
                match.append(exp.NullSafeEQ(this=mine, expression=theirs))
            elif null:
                match += [exp.Is(this=mine, expression=exp.Null()), exp.Is(this=theirs, expression=exp.Null())]
            else:
                match.append(exp.EQ(this=mine, expression=theirs))
        if None in nulls:
            match.append(exp.or_(*[exp.Is(this=col(k, group), expression=exp.Null()) for k in keys]))
        branches.append(match)
    return branches


def _untouched(shape: ViewShape, since: datetime | None) -> list[exp.Expr]:
    """The key-map row's base keys are all unchanged in the window: it holds its value now."""
    return [exp.Not(this=in_query([col(c, MAP) for c in t.keymap_columns], changed_keys_sql(t.log, since)))
            for t in shape.tables]


def kept_extreme(shape: ViewShape, since: datetime | None, function: str, j: int, group: str) -> exp.Expr:
    """``min``/``max`` of input ``j`` over the untouched key-map rows of ``group``."""
    value = col(input_column(j), MAP)
    branches: list[exp.Expr] = []
    for match in _group_matches(shape, group):
        branches.append(exp.Subquery(this=(
            exp.select(value.copy()).from_(keymap_table(shape).as_(MAP))
            .where(exp.and_(*match, exp.not_(exp.Is(this=value.copy(), expression=exp.Null())),
                            *_untouched(shape, since)))
            # the index's own order (ASC NULLS LAST; backwards DESC NULLS FIRST): no sort
            .order_by(exp.Ordered(this=value.copy(), desc=function == "max", nulls_first=function == "max"))
            .limit(1))))
    picked = exp.Min if function == "min" else exp.Max
    arms = exp.union(*branches, distinct=False)
    return exp.Subquery(this=exp.select(picked(this=col(input_column(j), "b")))
                        .from_(exp.Subquery(this=arms, alias=exp.TableAlias(this=ident("b")))))


def value_in_keymap(shape: ViewShape, since: datetime | None, j: int, group: str, value: exp.Expr,
                    untouched: bool) -> exp.Expr:
    """EXISTS a key-map row of ``group`` whose input ``j`` equals ``value`` (``untouched``: among
    the rows no change of the window touched)."""
    branches: list[exp.Query] = []
    for match in _group_matches(shape, group):
        condition = [*match, exp.EQ(this=col(input_column(j), MAP), expression=value.copy())]
        condition += _untouched(shape, since) if untouched else []
        branches.append(exp.select(exp.Literal.number(1)).from_(keymap_table(shape).as_(MAP))
                        .where(exp.and_(*condition)))
    return exp.Exists(this=exp.union(*branches, distinct=False))
