"""SQL that a refresh pushes down to PostgreSQL, built as sqlglot trees.

Every fast read has the same form: *affected view keys* LEFT JOIN *the view
restricted to those keys*. A key whose right side is missing is deleted from the
view. Over-approximating the affected keys is always safe (the restricted view is
exact), so for join and aggregate views they are the union of

- the view keys that the changed base rows produce now (from the base tables), and
- the view keys they produced at the last refresh (from the view's key map).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TypeVar

from sqlglot import exp

from mvlog.model import HIDDEN_PREFIX, PRESENT
from mvlog.sql import aggdelta
from mvlog.sql.analysis import DIALECT, ViewClass, window_parts
from mvlog.sql.changes import (
    AFFECTED,
    ROOTS,
    changed_keys_sql,
    in_query,
    in_roots,
    key_exprs,
    key_names,
    keymap_key_columns,
    keymap_table,
    parse_select,
    root_exprs,
    roots_ref,
    roots_sql,
    touched_rows,
    union_of,
    unit_exprs,
)
from mvlog.sql.keymap import keymap_update_sql
from mvlog.sql.shape import ViewShape, col, ident

AFFECTED_ALIAS = HIDDEN_PREFIX + "affected"


def _left_join_keys(keys: exp.Query, current: exp.Query, key_columns: tuple[str, ...],
                    null_safe_from: int | None = None) -> exp.Select:
    """SELECT k.*, v.* FROM keys k LEFT JOIN current v ON v.<key i> = k._mvlog_key_<i>.

    Key columns from ``null_safe_from`` on compare with IS NOT DISTINCT FROM, which PostgreSQL
    cannot hash: with none before them it joins by a nested loop (every key against every
    row), so use it for few rows only; after an equality it only filters the equal pairs."""
    on = exp.and_(*[
        (exp.NullSafeEQ if null_safe_from is not None and i >= null_safe_from else exp.EQ)(
            this=col(name, "v"), expression=col(key, "k"))
        for i, (name, key) in enumerate(zip(key_columns, key_names(len(key_columns))))
    ])
    return (
        exp.select(exp.column(exp.Star(), table=ident("k")), exp.column(exp.Star(), table=ident("v")))
        .from_(exp.Subquery(this=keys, alias=exp.TableAlias(this=ident("k"))))
        .join(exp.Subquery(this=current, alias=exp.TableAlias(this=ident("v"))), on=on, join_type="left")
    )


def _with_present(select: exp.Select) -> exp.Select:
    return select.copy().select(exp.alias_(exp.true(), ident(PRESENT)), copy=False)


def fast_simple_sql(shape: ViewShape, since: datetime | None) -> str:
    """Changed keys LEFT JOIN the view: PostgreSQL flattens the view subquery and probes the
    base table's primary key once per changed key, so only changed rows are read."""
    (log,) = shape.logs
    return _left_join_keys(changed_keys_sql(log, since), _with_present(parse_select(shape.select_sql)),
                           shape.key_columns).sql(dialect=DIALECT)


def _outer_affected(shape: ViewShape, roots: exp.Query) -> exp.Query:
    """What the key map maps the roots' lineage rows to (view keys; a window view's partitions),
    now and at the last refresh."""
    names = key_names(len(unit_exprs(shape)))
    now = parse_select(shape.core_sql)
    now.set("expressions", [exp.alias_(e, ident(n)) for e, n in zip(unit_exprs(shape), names)])
    now.where(in_roots(root_exprs(shape), roots), copy=False)
    before = (exp.select(*[exp.alias_(col(c), ident(n)) for c, n in zip(keymap_key_columns(shape), names)])
              .from_(keymap_table(shape))
              .where(in_roots([col(c) for c in shape.tables[0].keymap_columns], roots.copy())))
    return union_of([now, before])


_Q = TypeVar("_Q", bound=exp.Query)


def with_affected(query: _Q, shape: ViewShape, since: datetime | None, null_keys: bool = False) -> _Q:
    """``query`` with the CTE AFFECTED (``_mvlog_key_<i>``: the view keys to recompute), and ROOTS
    before it for an outer-join view (the affected roots) or a window view (the affected
    partitions; ``null_keys``: one holds a NULL); a simple view's affected keys are its changed keys."""
    if shape.view_class is ViewClass.SIMPLE:
        return query.with_(AFFECTED, as_=changed_keys_sql(shape.logs[0], since))
    if shape.partition_exprs:
        query = query.with_(ROOTS, as_=affected_keys_sql(shape, since))
        return query.with_(AFFECTED, as_=_window_affected(shape, null_keys))
    if shape.outer:
        query = query.with_(ROOTS, as_=roots_sql(shape, since))
    return query.with_(AFFECTED, as_=affected_keys_sql(shape, since))


def restricted_rows(shape: ViewShape, select_sql: str, null_keys: bool) -> list[exp.Select]:
    """``select_sql`` (the view's query with hidden columns) restricted to the rows of the keys in
    AFFECTED, with PRESENT: one query that PostgreSQL drives through indexes, and with
    ``null_keys`` (an affected key holds a NULL) a second that matches those keys null-safely.
    A window view is restricted to its affected partitions where its windows are computed."""
    names = key_names(len(shape.key_columns))
    keys = key_exprs(shape)
    current = _with_present(parse_select(select_sql))
    if shape.partition_exprs:
        parts = []
        for condition in _unit_matches(shape, null_keys):
            restricted = current.copy()
            window_parts(restricted)[1].where(condition, copy=False)
            parts.append(restricted)
        return parts
    if shape.outer and shape.view_class is ViewClass.JOIN:
        return [current.where(in_roots(root_exprs(shape)), copy=False)]
    affected = exp.select(*[col(n) for n in names]).from_(AFFECTED)
    parts = [current.where(in_query([k.copy() for k in keys], affected), copy=False)]
    if null_keys and shape.view_class is ViewClass.AGGREGATE and not shape.global_aggregate:
        parts.append(_with_present(parse_select(select_sql)).where(_null_safe_match(keys, names), copy=False))
    return parts


def _unit_matches(shape: ViewShape, null_keys: bool) -> list[exp.Expr]:
    """Conditions on a window view's base rows: its partition is in ROOTS, and with ``null_keys``
    (a NULL in an affected partition) a second, disjoint one that matches those null-safely."""
    units = unit_exprs(shape)
    names = key_names(len(units))
    conditions = [in_query([u.copy() for u in units], roots_ref())]
    if null_keys:
        conditions.append(_null_safe_match(units, names, ROOTS))
    return conditions


def _window_affected(shape: ViewShape, null_keys: bool) -> exp.Query:
    """A window view's keys: of the rows in the affected partitions (ROOTS), now and at the last refresh."""
    names = key_names(len(shape.key_columns))
    branches: list[exp.Query] = []
    keymap_units = [col(c) for c in keymap_key_columns(shape)]
    pk_columns = [c for table in shape.tables for c in table.keymap_columns]
    for condition in _unit_matches(shape, null_keys):
        now = parse_select(shape.core_sql)
        now.set("expressions", [exp.alias_(e, ident(n)) for e, n in zip(key_exprs(shape), names)])
        branches.append(now.where(condition, copy=False))
    before = exp.select(*[exp.alias_(col(c), ident(n)) for c, n in zip(pk_columns, names)]).from_(keymap_table(shape))
    branches.append(before.copy().where(in_query(keymap_units, roots_ref())))
    if null_keys:
        branches.append(before.where(_null_safe_match(keymap_units, key_names(len(keymap_units)), ROOTS)))
    return union_of(branches)


def _null_safe_match(keys: Sequence[exp.Expr], names: list[str], cte: str = AFFECTED) -> exp.Expr:
    """A row whose key holds a NULL and equals an affected key null-safely. Only such rows can
    match (an index on a key column finds them); the affected keys' alias must not shadow a
    table alias of the view's query (``a`` once did: ``a.branch`` then named the affected keys)."""
    a_any_null = _any_null(names, AFFECTED_ALIAS)
    matches = [exp.NullSafeEQ(this=k.copy(), expression=col(n, AFFECTED_ALIAS)) for k, n in zip(keys, names)]
    key_has_null = exp.or_(*[exp.Is(this=k.copy(), expression=exp.Null()) for k in keys])
    return exp.and_(key_has_null, exp.Exists(this=exp.select(exp.Literal.number(1)).from_(
        exp.Table(this=ident(cte), alias=exp.TableAlias(this=ident(AFFECTED_ALIAS)))
    ).where(exp.and_(a_any_null, *matches))))


def affected_keys_sql(shape: ViewShape, since: datetime | None) -> exp.Query:
    """View keys to recompute: produced by changed rows now, or by them at the last refresh
    (an outer-join view's refer to the CTE ROOTS: see :func:`with_affected`; a window view's are
    its partitions)."""
    names = key_names(len(unit_exprs(shape)))
    if shape.outer:  # a window view's CTE ROOTS holds its partitions: its roots are read in place
        return _outer_affected(shape, roots_sql(shape, since) if shape.partition_exprs else roots_ref())
    if shape.global_aggregate:
        changed = [exp.Exists(this=changed_keys_sql(log, since)) for log in shape.logs]
        return exp.select(exp.alias_(exp.true(), ident(names[0]))).where(exp.or_(*changed))
    now = touched_rows(shape, [exp.alias_(e, ident(n)) for e, n in zip(unit_exprs(shape), names)], since)
    before = []
    for table in shape.tables:
        before.append(
            exp.select(*[exp.alias_(col(c), ident(n)) for c, n in zip(keymap_key_columns(shape), names)])
            .from_(keymap_table(shape))
            .where(in_query([col(c) for c in table.keymap_columns], changed_keys_sql(table.log, since)))
        )
    return union_of([now, *before])


def fast_keyed_sql(shape: ViewShape, since: datetime | None, null_keys: bool = False) -> str:
    """Affected view keys LEFT JOIN the view restricted to them.

    The restriction is a semi-join ``(key exprs) IN (affected)`` that PostgreSQL can
    drive through indexes, and the LEFT JOIN an equi-join it can hash. Neither matches
    NULL, so when an affected aggregate key holds a NULL (``null_keys``), those keys take
    a second branch that matches null-safely (IS NOT DISTINCT FROM: a nested loop, but
    over the few keys and rows with a NULL in the key only).
    """
    current, *nullish = restricted_rows(shape, shape.select_sql, null_keys)
    if shape.partition_exprs:  # the rows of the affected partitions (disjoint parts), by primary keys
        rows = union_of([current, *nullish], distinct=False)
        # Over outer joins, a NULL-extended table's key is NULL: matched null-safely after the root's.
        query: exp.Query = _left_join_keys(exp.select(exp.Star()).from_(AFFECTED), rows, shape.key_columns,
                                           null_safe_from=len(shape.tables[0].keymap_columns) if shape.outer else None)
        return with_affected(query, shape, since, null_keys).sql(dialect=DIALECT)
    if shape.outer and shape.view_class is ViewClass.JOIN:
        # The roots' rows, matched to their keys by the root's key (never NULL), then null-safely
        # by the NULL-extended tables' keys among the few rows of one root.
        query = _left_join_keys(exp.select(exp.Star()).from_(AFFECTED), current, shape.key_columns,
                                null_safe_from=len(shape.tables[0].keymap_columns))
        return with_affected(query, shape, since).sql(dialect=DIALECT)
    query = join_affected(current, nullish[0] if nullish else None, shape.key_columns)
    return with_affected(query, shape, since).sql(dialect=DIALECT)


def join_affected(current: exp.Query, nullish: exp.Query | None, key_columns: tuple[str, ...]) -> exp.Query:
    """AFFECTED LEFT JOIN ``current`` by the view key; with ``nullish``, the keys holding a NULL
    join those rows instead, null-safely (few keys and rows: the nested loop stays small)."""
    if nullish is None:
        return _left_join_keys(exp.select(exp.Star()).from_(AFFECTED), current, key_columns)
    any_null = _any_null(key_names(len(key_columns)))
    with_nulls = exp.select(exp.Star()).from_(AFFECTED).where(any_null)
    without_nulls = exp.select(exp.Star()).from_(AFFECTED).where(exp.not_(any_null.copy()))
    return exp.union(
        _left_join_keys(without_nulls, current, key_columns),
        _left_join_keys(with_nulls, nullish, key_columns, null_safe_from=0),
        distinct=False,
    )


def any_null_exists(cte: str, width: int) -> exp.Select:
    """``SELECT EXISTS (a row of cte whose _mvlog_key_<i>, i < width, holds a NULL)``."""
    names = key_names(width)
    return exp.select(exp.Exists(this=exp.select(exp.Literal.number(1)).from_(cte).where(_any_null(names))))


def null_keys_check_sql(shape: ViewShape, since: datetime | None) -> str:
    """Whether an affected view key (a window view's: an affected partition) holds a NULL (then
    the null-safe branch is needed)."""
    cte = ROOTS if shape.partition_exprs else AFFECTED
    query = any_null_exists(cte, len(shape.partition_exprs or shape.key_columns))
    if shape.partition_exprs:  # the partitions alone: the view keys are derived from them
        return query.with_(ROOTS, as_=affected_keys_sql(shape, since)).sql(dialect=DIALECT)
    return with_affected(query, shape, since).sql(dialect=DIALECT)


def _any_null(names: list[str], table: str | None = None) -> exp.Expr:
    return exp.or_(*[exp.Is(this=col(n, table), expression=exp.Null()) for n in names])


def fast_refresh_statements(shape: ViewShape, since: datetime) -> list[str]:
    """Every statement a fast refresh of ``shape`` sends to PostgreSQL for a window after
    ``since``: its reads and, for a view with a key map, the null-key check and the map's
    update (checked by PostgreSQL at apply time, against :func:`keymap_stand_in_sql`)."""
    if not shape.keyed:
        return [fast_simple_sql(shape, since)]
    if shape.deltas is not None:  # the group table's update reads the key map before its own
        return [*aggdelta.fast_refresh_statements(shape, since), *keymap_update_sql(shape, since)]
    statements = [fast_keyed_sql(shape, since)]
    if shape.keymap is not None and not shape.global_aggregate:
        statements += keymap_update_sql(shape, since)
        if shape.view_class is ViewClass.AGGREGATE or shape.partition_exprs:
            statements += [null_keys_check_sql(shape, since), fast_keyed_sql(shape, since, null_keys=True)]
    return statements
