"""SQL that a refresh pushes down to PostgreSQL, built as sqlglot trees.

Every fast read has the same form: *affected view keys* LEFT JOIN *the view
restricted to those keys*. A key whose right side is missing is deleted from the
view. Over-approximating the affected keys is always safe (the restricted view is
exact), so for join and aggregate views they are the union of

- the view keys that the changed base rows produce now (from the base tables), and
- the view keys they produced at the last refresh (from the view's key map).

These are the building blocks; each view shape's strategy (:mod:`mvlog.sql.strategies.strategy`) composes
them into its fast read.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlglot import exp

from mvlog.model import HIDDEN_PREFIX, PRESENT
from mvlog.sql.analyze.analysis import window_parts
from mvlog.sql.generate.changes import (
    AFFECTED,
    ROOTS,
    changed_keys_sql,
    in_query,
    in_roots,
    key_exprs,
    key_names,
    keymap_key_columns,
    keymap_table,
    null_safe_matches,
    root_exprs,
    roots_ref,
    touched_rows,
    unit_exprs,
)
from mvlog.sql.generate.restricted import grouped_in_as_exists
from mvlog.sql.parse.sqltree import parse_select, parsed, sql_text, union_of
from mvlog.sql.pieces.shape import ViewShape, col, ident

AFFECTED_ALIAS = HIDDEN_PREFIX + "affected"


def left_join_keys(keys: exp.Query, current: exp.Query, key_columns: tuple[str, ...],
                   null_safe_from: int | None = None, null_safe: Sequence[bool] = ()) -> exp.Select:
    """SELECT k.*, v.* FROM keys k LEFT JOIN current v ON v.<key i> = k._mvlog_key_<i>.

    Key columns from ``null_safe_from`` on, and those ``null_safe`` marks, compare with IS NOT
    DISTINCT FROM, which PostgreSQL cannot hash: with none before them it joins by a nested loop
    (every key against every row), so use it for few rows only; after an equality it only filters
    the equal pairs."""
    lax = _padded(null_safe, len(key_columns))
    on = exp.and_(*[
        (exp.NullSafeEQ if (null_safe_from is not None and i >= null_safe_from) or lax[i] else exp.EQ)(
            this=col(name, "v"), expression=col(key, "k"))
        for i, (name, key) in enumerate(zip(key_columns, key_names(len(key_columns))))
    ])
    return (
        exp.select(exp.column(exp.Star(), table=ident("k")), exp.column(exp.Star(), table=ident("v")))
        .from_(exp.Subquery(this=keys, alias=exp.TableAlias(this=ident("k"))))
        .join(exp.Subquery(this=current, alias=exp.TableAlias(this=ident("v"))), on=on, join_type="left")
    )


def with_present(select: exp.Select) -> exp.Select:
    return select.copy().select(exp.alias_(exp.true(), ident(PRESENT)), copy=False)


def whole_rows_sql(shape: ViewShape) -> str:
    """Every row of the view, in a fast read's form: its key columns as the changed keys, its
    columns, PRESENT — the read of a fast refresh that reads the whole query
    (:mod:`mvlog.pipeline.readscope`)."""
    keys = [exp.alias_(col(name, "v"), ident(key)) for name, key in
            zip(shape.key_columns, key_names(len(shape.key_columns)))]
    whole = exp.Subquery(this=parsed(shape.select_sql), alias=exp.TableAlias(this=ident("v")))
    return sql_text(exp.select(*keys, exp.column(exp.Star(), table=ident("v")),
                               exp.alias_(exp.true(), ident(PRESENT))).from_(whole))


def fast_simple_sql(shape: ViewShape, since: datetime | None) -> str:
    """Changed keys LEFT JOIN the view: PostgreSQL flattens the view subquery and probes the
    base table's primary key once per changed key, so only changed rows are read."""
    (log,) = shape.logs
    return sql_text(left_join_keys(changed_keys_sql(log, since), with_present(parse_select(shape.select_sql)),
                                   shape.key_columns))


def outer_affected_sql(shape: ViewShape, roots: exp.Query) -> exp.Query:
    """What the key map maps the roots' lineage rows to (view keys; a window view's partitions),
    now and at the last refresh (an outer-join view: its roots; see :func:`changes.roots_sql`)."""
    names = key_names(len(unit_exprs(shape)))
    now = parse_select(shape.core_sql)
    now.set("expressions", [exp.alias_(e, ident(n)) for e, n in zip(unit_exprs(shape), names)])
    now.where(in_roots(root_exprs(shape), roots), copy=False)
    before = (exp.select(*[exp.alias_(col(c), ident(n)) for c, n in zip(keymap_key_columns(shape), names)])
              .from_(keymap_table(shape))
              .where(in_roots([col(c) for c in shape.tables[0].keymap_columns], roots.copy())))
    return union_of([now, before])


def tied_affected_sql(shape: ViewShape, since: datetime | None, roots: exp.Query) -> exp.Query:
    """The groups to recompute of an aggregate with subqueries tied by values (:func:`changes.tied_inner`):
    those of the lineage rows (without subqueries: they only filter) that hold a changed outer row
    or a root of a changed subquery row (``roots``), now and at the last refresh (the key map's
    branch 0)."""
    names = key_names(len(unit_exprs(shape)))
    outer = [t for t in shape.tables if not t.semi]

    def lineage(condition: exp.Expr) -> exp.Select:
        core = parse_select(shape.keymap_cores[0])
        core.set("expressions", [exp.alias_(e, ident(n)) for e, n in zip(unit_exprs(shape), names)])
        return core.where(condition, copy=False)

    now = [lineage(in_query([col(pk, t.alias) for pk in t.log.key_columns], changed_keys_sql(t.log, since)))
           for t in outer]
    now.append(lineage(in_roots(root_exprs(shape), roots)))
    held = [in_query([col(c) for c in t.keymap_columns], changed_keys_sql(t.log, since)) for t in outer]
    before = [exp.select(*[exp.alias_(col(c), ident(n)) for c, n in zip(keymap_key_columns(shape), names)])
              .from_(keymap_table(shape)).where(condition) for condition in
              [*held, in_roots([col(c) for c in shape.tables[0].keymap_columns], roots.copy())]]
    return union_of([*now, *before])


def keyed_affected_sql(shape: ViewShape, since: datetime | None) -> exp.Query:
    """View keys (a window view's partitions) to recompute over inner joins: produced by changed
    rows now, or by them at the last refresh (the key map)."""
    names = key_names(len(unit_exprs(shape)))
    now = touched_rows(shape, [exp.alias_(e, ident(n)) for e, n in zip(unit_exprs(shape), names)], since)
    before = []
    for table in shape.tables:
        before.append(
            exp.select(*[exp.alias_(col(c), ident(n)) for c, n in zip(keymap_key_columns(shape), names)])
            .from_(keymap_table(shape))
            .where(in_query([col(c) for c in table.keymap_columns], changed_keys_sql(table.log, since)))
        )
    return union_of([now, *before])


def global_affected_sql(shape: ViewShape, since: datetime | None) -> exp.Query:
    """A global aggregate's one key (TRUE) when any of its tables changed."""
    changed = [exp.Exists(this=changed_keys_sql(log, since)) for log in shape.logs]
    return exp.select(exp.alias_(exp.true(), ident(key_names(1)[0]))).where(exp.or_(*changed))


def window_affected_sql(shape: ViewShape, null_keys: bool) -> exp.Query:
    """A window view's keys: of the rows in the affected partitions (ROOTS), now and at the last refresh."""
    names = key_names(len(shape.key_columns))
    branches: list[exp.Query] = []
    keymap_units = [col(c) for c in keymap_key_columns(shape)]
    pk_columns = [c for table in shape.tables for c in table.keymap_columns]
    for condition in unit_matches(shape, null_keys):
        now = parse_select(shape.core_sql)
        now.set("expressions", [exp.alias_(e, ident(n)) for e, n in zip(key_exprs(shape), names)])
        branches.append(now.where(condition, copy=False))
    before = exp.select(*[exp.alias_(col(c), ident(n)) for c, n in zip(pk_columns, names)]).from_(keymap_table(shape))
    branches.append(before.copy().where(in_query(keymap_units, roots_ref())))
    if null_keys:
        branches.append(before.where(_null_safe_match(keymap_units, key_names(len(keymap_units)), ROOTS)))
    return union_of(branches)


def unit_matches(shape: ViewShape, null_keys: bool) -> list[exp.Expr]:
    """Conditions on a window view's base rows: its partition is in ROOTS, and with ``null_keys``
    (a NULL in an affected partition) a second, disjoint one that matches those null-safely."""
    units = unit_exprs(shape)
    names = key_names(len(units))
    conditions = [in_query([u.copy() for u in units], roots_ref())]
    if null_keys:
        conditions.append(_null_safe_match(units, names, ROOTS))
    return conditions


def restricted_query(select_sql: str) -> exp.Select:
    """The view's query (with hidden columns) as a recompute of a few keys reads it, with PRESENT
    (see :mod:`mvlog.sql.generate.restricted`)."""
    return with_present(grouped_in_as_exists(parse_select(select_sql)))


def rows_of_keys(shape: ViewShape, select_sql: str, null_keys: bool = False) -> list[exp.Select]:
    """``select_sql`` (the view's query with hidden columns) restricted to the rows of the keys in
    AFFECTED, with PRESENT: one query that PostgreSQL drives through indexes, and with
    ``null_keys`` (an affected group key holds a NULL) a second that matches those keys null-safely.

    A key column its table's key determines (``ViewShape.determined_keys``) is left out of the
    match: the rows of the other keys are the same groups (and the join from AFFECTED drops any
    other), and PostgreSQL misestimates a match on both a key and what it determines (q39's
    ``(w_warehouse_name, w_warehouse_sk)``: estimated one warehouse a key, 5,819 scans of date_dim)."""
    matched = matched_keys(shape)
    names = [n for n, m in zip(key_names(len(shape.key_columns)), matched) if m]
    keys = [k for k, m in zip(key_exprs(shape), matched) if m]
    free = [f for f, m in zip(_padded(shape.null_free_keys, len(matched)), matched) if m]
    affected = exp.select(*[col(n) for n in names]).from_(AFFECTED)
    parts = [restricted_query(select_sql).where(in_query([k.copy() for k in keys], affected), copy=False)]
    if null_keys and not all(free):
        parts.append(restricted_query(select_sql).where(_null_safe_match(keys, names, AFFECTED, free), copy=False))
    return parts


def matched_keys(shape: ViewShape) -> list[bool]:
    """Per key column, whether the read matches it with the affected keys (not one another key determines)."""
    return [not d for d in _padded(shape.determined_keys, len(shape.key_columns))]


def nullable_matched_keys(shape: ViewShape) -> list[str]:
    """The names in AFFECTED of the matched key columns that can hold a NULL: a NULL in one of them
    needs the read's null-safe part (none: the read has none)."""
    free = _padded(shape.null_free_keys, len(shape.key_columns))
    return [n for n, m, f in zip(key_names(len(shape.key_columns)), matched_keys(shape), free) if m and not f]


def loosely_joined_keys(shape: ViewShape) -> list[bool]:
    """Per key column, whether the read joins it to AFFECTED null-safely where no matched key holds a
    NULL: a determined column that can be NULL (its rows were found by the keys that determine it)."""
    return [not m and not f for m, f in zip(matched_keys(shape), _padded(shape.null_free_keys, len(shape.key_columns)))]


def _padded(flags: Sequence[bool], width: int) -> list[bool]:
    return [bool(flags[i]) if i < len(flags) else False for i in range(width)]


def rows_of_roots(shape: ViewShape, select_sql: str) -> list[exp.Select]:
    """An outer-join view's rows of the roots in ROOTS, with PRESENT."""
    return [restricted_query(select_sql).where(in_roots(root_exprs(shape)), copy=False)]


def rows_of_units(shape: ViewShape, select_sql: str, null_keys: bool) -> list[exp.Select]:
    """A window view restricted to its affected partitions where its windows are computed (so each
    is computed over its whole partition), with PRESENT; disjoint parts (see :func:`unit_matches`)."""
    current = restricted_query(select_sql)
    parts = []
    for condition in unit_matches(shape, null_keys):
        restricted = current.copy()
        window_parts(restricted)[1].where(condition, copy=False)
        parts.append(restricted)
    return parts


def _null_safe_match(keys: Sequence[exp.Expr], names: list[str], cte: str = AFFECTED,
                     null_free: Sequence[bool] = ()) -> exp.Expr:
    """A row whose key holds a NULL and equals an affected key null-safely. Only such rows can
    match (an index on a key column finds them); the affected keys' alias must not shadow a
    table alias of the view's query (``a`` once did: ``a.branch`` then named the affected keys).

    It opens with a condition on ``cte`` alone, "some affected key holds a NULL": PostgreSQL
    evaluates it once, before the rest of the query level (an InitPlan's One-Time Filter), so
    where no key holds a NULL the null-safe part reads nothing, and the read needs no separate
    check computing the affected keys a second time (q80's took 49 s at TPC-DS scale 0.2).

    ``null_free``: per key, whether it can never be NULL (a NOT NULL column): matched by ``=``,
    which PostgreSQL can hash; ``IS NOT DISTINCT FROM`` cannot be, and over keys that nearly
    always hold a NULL somewhere (TPC-DS's ``c_login``) it compared every row with every key."""
    free = _padded(null_free, len(keys))
    nullable = [name for name, never in zip(names, free) if not never]
    if not nullable:
        return exp.false()  # no key can hold a NULL: the part reads nothing

    def affected() -> exp.Select:
        return exp.select(exp.Literal.number(1)).from_(
            exp.Table(this=ident(cte), alias=exp.TableAlias(this=ident(AFFECTED_ALIAS))))

    some_key_null = exp.Exists(this=affected().where(_any_null(nullable, AFFECTED_ALIAS)))
    matches = null_safe_matches([(k.copy(), col(n, AFFECTED_ALIAS)) for k, n in zip(keys, names)], free)
    key_has_null = exp.or_(*[exp.Is(this=k.copy(), expression=exp.Null()) for k, never in zip(keys, free) if not never])
    return exp.and_(some_key_null, key_has_null,
                    exp.Exists(this=affected().where(exp.and_(_any_null(nullable, AFFECTED_ALIAS), *matches))))


def join_affected(current: exp.Query, nullish: exp.Query | None, key_columns: tuple[str, ...],
                  loose: Sequence[bool] = ()) -> exp.Query:
    """AFFECTED LEFT JOIN ``current`` by the view key; with ``nullish``, the keys holding a NULL
    join those rows instead, null-safely (few keys and rows: the nested loop stays small).
    ``loose``: per key, null-safe in the first join too (see :func:`loosely_joined_keys`); the
    keys checked for a NULL are then the others."""
    if nullish is None:
        return left_join_keys(exp.select(exp.Star()).from_(AFFECTED), current, key_columns, null_safe=loose)
    loose = _padded(loose, len(key_columns))
    any_null = _any_null([n for n, lax in zip(key_names(len(key_columns)), loose) if not lax])
    with_nulls = exp.select(exp.Star()).from_(AFFECTED).where(any_null)
    without_nulls = exp.select(exp.Star()).from_(AFFECTED).where(exp.not_(any_null.copy()))
    return exp.union(
        left_join_keys(without_nulls, current, key_columns, null_safe=loose),
        left_join_keys(with_nulls, nullish, key_columns, null_safe_from=0),
        distinct=False,
    )


def any_null_exists(cte: str, names: list[str]) -> exp.Select:
    """``SELECT EXISTS (a row of cte where one of the columns ``names`` holds a NULL)``."""
    return exp.select(exp.Exists(this=exp.select(exp.Literal.number(1)).from_(cte).where(_any_null(names))))


def _any_null(names: list[str], table: str | None = None) -> exp.Expr:
    return exp.or_(*[exp.Is(this=col(n, table), expression=exp.Null()) for n in names])
