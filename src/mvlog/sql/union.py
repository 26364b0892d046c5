"""SQL of UNION ALL views: every branch is refreshed as a view of its own.

A UNION ALL view's key is (branch number, the branch's view key as row text): one text
column that is never NULL, so its rows and keys join on plain, hashable equality whatever
the branch's key is (a primary key, join keys with NULL-extended sides, NULL groups).
"""

from __future__ import annotations

from datetime import datetime

from sqlglot import exp

from mvlog.model import CHANGED_KEY_PREFIX
from mvlog.sql import changes, keymap, sqlgen
from mvlog.sql.analysis import DIALECT, ViewClass
from mvlog.sql.shape import ROW_KEY_COLUMN, ViewShape, col, ident


def _aggregate(branch: ViewShape) -> bool:
    return branch.view_class is ViewClass.AGGREGATE and not branch.global_aggregate


def fast_union_sql(shape: ViewShape, since: datetime | None, null_keys: tuple[bool, ...] = ()) -> str:
    """Per branch: its affected keys as (branch, row text) LEFT JOIN its restricted rows; the
    branches' reads, each with its own CTEs, under UNION ALL. ``null_keys[i]``: an affected key
    of branch i+1 holds a NULL (see :func:`null_keys_checks`)."""
    if shape.distinct or shape.over_union:
        return fast_union_distinct_sql(shape, since, any(null_keys))
    parts = []
    for i, (branch, select) in enumerate(zip(shape.branches, shape.branch_selects), 1):
        names = changes.key_names(len(branch.key_columns))
        row_key = exp.cast(exp.Anonymous(this="ROW", expressions=[col(n) for n in names]), exp.DataType.build("text"))
        keys = exp.select(exp.alias_(exp.Literal.number(i), ident(f"{CHANGED_KEY_PREFIX}0")),
                          exp.alias_(row_key, ident(f"{CHANGED_KEY_PREFIX}1"))).from_(changes.AFFECTED)
        nullish = len(null_keys) >= i and null_keys[i - 1]
        current = changes.union_of(sqlgen.restricted_rows(branch, select, nullish), distinct=False)
        on = exp.EQ(this=col(ROW_KEY_COLUMN, "v"), expression=col(f"{CHANGED_KEY_PREFIX}1", "k"))
        read = (exp.select(exp.column(exp.Star(), table=ident("k")), exp.column(exp.Star(), table=ident("v")))
                .from_(exp.Subquery(this=keys, alias=exp.TableAlias(this=ident("k"))))
                .join(exp.Subquery(this=current, alias=exp.TableAlias(this=ident("v"))), on=on, join_type="left"))
        read = sqlgen.with_affected(read, branch, since, nullish)
        parts.append(exp.select(exp.Star()).from_(exp.Subquery(this=read, alias=exp.TableAlias(this=ident(f"b{i}")))))
    return changes.union_of(parts, distinct=False).sql(dialect=DIALECT)


def _affected_rows(shape: ViewShape, since: datetime | None) -> exp.Query:
    """A UNION's affected output rows (an aggregate over a UNION ALL: groups): every branch's,
    each with its own CTEs, distinct."""
    names = changes.key_names(len(shape.key_columns))
    parts = []
    for i, branch in enumerate(shape.branches, 1):
        keys = sqlgen.with_affected(exp.select(*[col(n) for n in names]).from_(changes.AFFECTED), branch, since)
        parts.append(exp.select(exp.Star()).from_(exp.Subquery(this=keys, alias=exp.TableAlias(this=ident(f"b{i}")))))
    return changes.union_of(parts)


def _recomputed(shape: ViewShape, null_keys: bool) -> list[exp.Query]:
    """A UNION's rows restricted to the affected ones: the DISTINCT over every branch restricted to
    them (a row stays while some branch still yields it); an aggregate over a UNION ALL: the whole
    query restricted to the affected groups. The rows matched by IN, then (``null_keys``) those
    matched null-safely."""
    if shape.over_union:
        return list(sqlgen.restricted_rows(shape, shape.select_sql, null_keys))
    restricted = [sqlgen.restricted_rows(b, select, null_keys)
                  for b, select in zip(shape.branches, shape.branch_selects)]
    distinct: list[exp.Query] = []
    for part in zip(*restricted):  # the same part of every branch
        rows = changes.union_of(list(part), distinct=False)
        distinct.append(exp.select(exp.Star()).distinct()
                        .from_(exp.Subquery(this=rows, alias=exp.TableAlias(this=ident("u")))))
    return distinct


def fast_union_distinct_sql(shape: ViewShape, since: datetime | None, null_keys: bool = False) -> str:
    """A UNION, or an aggregate over a UNION ALL: the affected rows or groups (of any branch, before
    or after) LEFT JOIN their recomputed rows. ``null_keys``: an affected key holds a NULL (it
    is then matched null-safely)."""
    rows = _recomputed(shape, null_keys)
    query = sqlgen.join_affected(rows[0], rows[1] if len(rows) > 1 else None, shape.key_columns)
    return query.with_(changes.AFFECTED, as_=_affected_rows(shape, since)).sql(dialect=DIALECT)


def null_keys_checks(shape: ViewShape, since: datetime | None) -> list[str | None]:
    """Per aggregate or window view (the view itself, or each UNION ALL branch; a UNION: its
    affected rows), the query telling whether an affected key (a window view's: partition) holds
    a NULL (None: its keys cannot)."""
    if shape.distinct or shape.over_union:
        check = sqlgen.any_null_exists(changes.AFFECTED, len(shape.key_columns))
        return [check.with_(changes.AFFECTED, as_=_affected_rows(shape, since)).sql(dialect=DIALECT)]
    return [sqlgen.null_keys_check_sql(b, since)
            if (_aggregate(b) or b.partition_exprs) and b.keyed and b.deltas is None else None
            for b in shape.branches or (shape,)]


def keyed_branches(shape: ViewShape) -> list[ViewShape]:
    """The shapes whose key map a refresh keeps: the view's own, or its branches'."""
    shapes = shape.branches or (shape,)
    return [s for s in shapes if s.keyed and s.keymap is not None and not s.global_aggregate]


def fast_refresh_statements(shape: ViewShape, since: datetime) -> list[str]:
    """Every statement a fast refresh of a UNION ALL view sends (see sqlgen.fast_refresh_statements)."""
    statements = [fast_union_sql(shape, since, (True,) * len(shape.branches))]
    for branch in keyed_branches(shape):
        statements += keymap.keymap_update_sql(branch, since)
    return statements + [check for check in null_keys_checks(shape, since) if check]
