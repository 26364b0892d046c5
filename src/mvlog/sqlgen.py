"""SQL that a refresh pushes down to PostgreSQL, built as sqlglot trees.

Every fast read has the same form: *affected view keys* LEFT JOIN *the view
restricted to those keys*. A key whose right side is missing is deleted from the
view. Over-approximating the affected keys is always safe (the restricted view is
exact), so for join and aggregate views they are the union of

- the view keys that the changed base rows produce now (from the base tables), and
- the view keys they produced at the last refresh (from the view's key map).
"""

from __future__ import annotations

from datetime import datetime

from sqlglot import exp

from mvlog.analysis import DIALECT, ViewClass, window_parts
from mvlog.model import CHANGED_KEY_PREFIX, HIDDEN_PREFIX, PRESENT, LogInfo
from mvlog.shape import ViewShape, col, ident


AFFECTED_ALIAS = HIDDEN_PREFIX + "affected"
# CTE names of a fast read: prefixed, so that they cannot shadow a table the view's query reads.
AFFECTED = HIDDEN_PREFIX + "affected_keys"
ROOTS = HIDDEN_PREFIX + "roots"


def _timestamptz(value: datetime) -> exp.Expression:
    return exp.cast(exp.Literal.string(value.isoformat()), exp.DataType.build("timestamptz", dialect=DIALECT))


def _parse(sql: str) -> exp.Select:
    tree = exp.maybe_parse(sql, dialect=DIALECT)
    assert isinstance(tree, exp.Select)
    return tree


def _key_names(n: int) -> list[str]:
    return [f"{CHANGED_KEY_PREFIX}{i}" for i in range(n)]


def _in(expressions: list[exp.Expression], query: exp.Query) -> exp.Expression:
    """``(a, b) IN (SELECT ...)``, or ``a IN (SELECT ...)`` for one expression. An expression
    other than a column or literal is parenthesized: IN binds tighter than a comparison in
    PostgreSQL, so ``amount > 50 IN (…)`` would mean ``amount > (50 IN (…))``."""
    if len(expressions) > 1:
        return exp.In(this=exp.Tuple(expressions=expressions), query=exp.Subquery(this=query))
    this = expressions[0]
    if not isinstance(this, (exp.Column, exp.Literal, exp.Paren, exp.Tuple)):
        this = exp.Paren(this=this.copy())
    return exp.In(this=this, query=exp.Subquery(this=query))


def changed_keys_sql(log: LogInfo, since: datetime | None, names: list[str] | tuple[str, ...] = ()) -> exp.Select:
    """DISTINCT primary keys logged after ``since``: many changes of one key collapse into one.

    Run at the refresh's snapshot, ``snaptime$$ > since`` is exactly the window (since, S]: the
    snapshot was taken under the stamping lock, so it sees the rows this refresh stamps with S
    still holding the sentinel, and no row of a later stamp or of a transaction it does not see.
    """
    condition = exp.NEQ(this=col("dmltype$$"), expression=exp.Literal.string("T"))
    if since is not None:
        condition = exp.and_(condition, exp.GT(this=col("snaptime$$"), expression=_timestamptz(since)))
    return (
        exp.select(*[exp.alias_(col(k), ident(n)) for k, n in zip(log.key_columns, names or _key_names(len(log.key_columns)))])
        .distinct()
        .from_(exp.Table(this=ident(log.log_name), db=ident("mvlog")))
        .where(condition)
    )


def changed_key_count_sql(log: LogInfo, since: datetime | None) -> str:
    """How many distinct keys the window holds (the size of the change, for planning)."""
    keys = exp.Subquery(this=changed_keys_sql(log, since), alias=exp.TableAlias(this=ident("k")))
    return exp.select(exp.Count(this=exp.Star())).from_(keys).sql(dialect=DIALECT)


def _left_join_keys(keys: exp.Query, current: exp.Query, key_columns: tuple[str, ...],
                    null_safe_from: int | None = None) -> exp.Select:
    """SELECT k.*, v.* FROM keys k LEFT JOIN current v ON v.<key i> = k._mvlog_key_<i>.

    Key columns from ``null_safe_from`` on compare with IS NOT DISTINCT FROM, which PostgreSQL
    cannot hash: with none before them it joins by a nested loop (every key against every
    row), so use it for few rows only; after an equality it only filters the equal pairs."""
    on = exp.and_(*[
        (exp.NullSafeEQ if null_safe_from is not None and i >= null_safe_from else exp.EQ)(
            this=col(name, "v"), expression=col(key, "k"))
        for i, (name, key) in enumerate(zip(key_columns, _key_names(len(key_columns))))
    ])
    return (
        exp.select(exp.column(exp.Star(), table=ident("k")), exp.column(exp.Star(), table=ident("v")))
        .from_(exp.Subquery(this=keys, alias=exp.TableAlias(this=ident("k"))))
        .join(exp.Subquery(this=current, alias=exp.TableAlias(this=ident("v"))), on=on, join_type="left")
    )


def _with_present(select: exp.Select) -> exp.Select:
    return select.copy().select(exp.alias_(exp.true(), ident(PRESENT)), copy=False)


# -- simple views -------------------------------------------------------------------------

def fast_simple_sql(shape: ViewShape, since: datetime | None) -> str:
    """Changed keys LEFT JOIN the view: PostgreSQL flattens the view subquery and probes the
    base table's primary key once per changed key, so only changed rows are read."""
    (log,) = shape.logs
    return _left_join_keys(changed_keys_sql(log, since), _with_present(_parse(shape.select_sql)),
                           shape.key_columns).sql(dialect=DIALECT)


# -- join and aggregate views ----------------------------------------------------------------

def keymap_table(shape: ViewShape) -> exp.Table:
    assert shape.keymap is not None
    return exp.Table(this=ident(shape.keymap), db=ident("mvlog"))


def keymap_key_columns(shape: ViewShape) -> list[str]:
    """Key-map columns holding the view key (join views: the base keys themselves), or a window
    view's partition."""
    if shape.view_class is ViewClass.JOIN:
        return [c for table in shape.tables if not table.semi for c in table.keymap_columns]
    return [f"{HIDDEN_PREFIX}k{i}" for i in range(len(_unit_exprs(shape)))]


def _key_exprs(shape: ViewShape) -> list[exp.Expression]:
    return [exp.maybe_parse(e, dialect=DIALECT) for e in shape.key_exprs]


def _unit_exprs(shape: ViewShape) -> list[exp.Expression]:
    """What the key map maps base rows to: the view key, or a window view's partition."""
    return [exp.maybe_parse(e, dialect=DIALECT) for e in shape.partition_exprs or shape.key_exprs]


def _touched(shape: ViewShape, items: list[exp.Expression], since: datetime | None) -> exp.Query:
    """``items`` over the view's rows that involve a changed base row (one branch per FROM item)."""
    branches = []
    for table in shape.tables:
        core = _parse(shape.core_sql)
        core.set("expressions", [item.copy() for item in items])
        pks = [col(pk, table.alias) for pk in table.log.key_columns]
        branches.append(core.where(_in(pks, changed_keys_sql(table.log, since)), copy=False))
    return union_distinct(branches)


def union_distinct(branches: list[exp.Query]) -> exp.Query:
    """``branches[0] UNION branches[1] UNION …``."""
    query = branches[0]
    for branch in branches[1:]:
        query = exp.union(query, branch, distinct=True)
    return query


def _root_exprs(shape: ViewShape) -> list[exp.Expression]:
    root = shape.tables[0]
    return [col(pk, root.alias) for pk in root.log.key_columns]


def _roots() -> exp.Select:
    return exp.select(exp.Star()).from_(ROOTS)


def roots_sql(shape: ViewShape, since: datetime | None) -> exp.Query:
    """An outer-join view's roots whose lineage rows hold a changed base row, now (from the
    base tables) or at the last refresh (from the key map); a changed root row is its own."""
    root = shape.tables[0]
    names = list(root.keymap_columns)
    branches: list[exp.Query] = [changed_keys_sql(root.log, since, names)]
    for table in shape.tables[1:]:
        changed = changed_keys_sql(table.log, since)
        core = _parse(shape.core_sql)
        core.set("expressions", [exp.alias_(e, ident(n)) for e, n in zip(_root_exprs(shape), names)])
        pks = [col(pk, table.alias) for pk in table.log.key_columns]
        branches.append(core.where(_in(pks, changed), copy=False))
        branches.append(exp.select(*[col(n) for n in names]).from_(keymap_table(shape))
                        .where(_in([col(c) for c in table.keymap_columns], changed.copy())))
    return union_distinct(branches)


def _outer_affected(shape: ViewShape) -> exp.Query:
    """The view keys of the roots' lineage rows, now and at the last refresh (the CTE ROOTS)."""
    names = _key_names(len(shape.key_columns))
    now = _parse(shape.core_sql)
    now.set("expressions", [exp.alias_(e, ident(n)) for e, n in zip(_key_exprs(shape), names)])
    now.where(_in(_root_exprs(shape), _roots()), copy=False)
    before = (exp.select(*[exp.alias_(col(c), ident(n)) for c, n in zip(keymap_key_columns(shape), names)])
              .from_(keymap_table(shape))
              .where(_in([col(c) for c in shape.tables[0].keymap_columns], _roots())))
    return union_distinct([now, before])


def with_affected(query: exp.Query, shape: ViewShape, since: datetime | None, null_keys: bool = False) -> exp.Query:
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
    names = _key_names(len(shape.key_columns))
    keys = _key_exprs(shape)
    current = _with_present(_parse(select_sql))
    if shape.partition_exprs:
        parts = []
        for condition in _unit_matches(shape, null_keys):
            restricted = current.copy()
            window_parts(restricted)[1].where(condition, copy=False)
            parts.append(restricted)
        return parts
    if shape.outer and shape.view_class is ViewClass.JOIN:
        return [current.where(_in(_root_exprs(shape), _roots()), copy=False)]
    affected = exp.select(*[col(n) for n in names]).from_(AFFECTED)
    parts = [current.where(_in([k.copy() for k in keys], affected), copy=False)]
    if null_keys and shape.view_class is ViewClass.AGGREGATE and not shape.global_aggregate:
        parts.append(_with_present(_parse(select_sql)).where(_null_safe_match(keys, names), copy=False))
    return parts


def _unit_matches(shape: ViewShape, null_keys: bool) -> list[exp.Expression]:
    """Conditions on a window view's base rows: its partition is in ROOTS, and with ``null_keys``
    (a NULL in an affected partition) a second, disjoint one that matches those null-safely."""
    units = _unit_exprs(shape)
    names = _key_names(len(units))
    conditions = [_in([u.copy() for u in units], _roots())]
    if null_keys:
        conditions.append(_null_safe_match(units, names, ROOTS))
    return conditions


def _window_affected(shape: ViewShape, null_keys: bool) -> exp.Query:
    """A window view's keys: of the rows in the affected partitions (ROOTS), now and at the last refresh."""
    names = _key_names(len(shape.key_columns))
    branches: list[exp.Query] = []
    keymap_units = [col(c) for c in keymap_key_columns(shape)]
    pk_columns = [c for table in shape.tables for c in table.keymap_columns]
    for condition in _unit_matches(shape, null_keys):
        now = _parse(shape.core_sql)
        now.set("expressions", [exp.alias_(e, ident(n)) for e, n in zip(_key_exprs(shape), names)])
        branches.append(now.where(condition, copy=False))
    before = exp.select(*[exp.alias_(col(c), ident(n)) for c, n in zip(pk_columns, names)]).from_(keymap_table(shape))
    branches.append(before.copy().where(_in(keymap_units, _roots())))
    if null_keys:
        branches.append(before.where(_null_safe_match(keymap_units, _key_names(len(keymap_units)), ROOTS)))
    return union_distinct(branches)


def _null_safe_match(keys: list[exp.Expression], names: list[str], cte: str = AFFECTED) -> exp.Expression:
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
    names = _key_names(len(_unit_exprs(shape)))
    if shape.outer:
        return _outer_affected(shape)
    if shape.global_aggregate:
        changed = [exp.Exists(this=changed_keys_sql(log, since)) for log in shape.logs]
        return exp.select(exp.alias_(exp.true(), ident(names[0]))).where(exp.or_(*changed))
    now = _touched(shape, [exp.alias_(e, ident(n)) for e, n in zip(_unit_exprs(shape), names)], since)
    before = []
    for table in shape.tables:
        before.append(
            exp.select(*[exp.alias_(col(c), ident(n)) for c, n in zip(keymap_key_columns(shape), names)])
            .from_(keymap_table(shape))
            .where(_in([col(c) for c in table.keymap_columns], changed_keys_sql(table.log, since)))
        )
    return union_distinct([now, *before])


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
        rows: exp.Query = current
        for part in nullish:
            rows = exp.union(rows, part, distinct=False)
        query = _left_join_keys(exp.select(exp.Star()).from_(AFFECTED), rows, shape.key_columns)
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
    any_null = _any_null(_key_names(len(key_columns)))
    with_nulls = exp.select(exp.Star()).from_(AFFECTED).where(any_null)
    without_nulls = exp.select(exp.Star()).from_(AFFECTED).where(exp.not_(any_null.copy()))
    return exp.union(
        _left_join_keys(without_nulls, current, key_columns),
        _left_join_keys(with_nulls, nullish, key_columns, null_safe_from=0),
        distinct=False,
    )


def any_null_exists(cte: str, width: int) -> exp.Select:
    """``SELECT EXISTS (a row of cte whose _mvlog_key_<i>, i < width, holds a NULL)``."""
    names = _key_names(width)
    return exp.select(exp.Exists(this=exp.select(exp.Literal.number(1)).from_(cte).where(_any_null(names))))


def null_keys_check_sql(shape: ViewShape, since: datetime | None) -> str:
    """Whether an affected view key (a window view's: an affected partition) holds a NULL (then
    the null-safe branch is needed)."""
    cte = ROOTS if shape.partition_exprs else AFFECTED
    query = any_null_exists(cte, len(shape.partition_exprs or shape.key_columns))
    if shape.partition_exprs:  # the partitions alone: the view keys are derived from them
        return query.with_(ROOTS, as_=affected_keys_sql(shape, since)).sql(dialect=DIALECT)
    return with_affected(query, shape, since).sql(dialect=DIALECT)


def _any_null(names: list[str], table: str | None = None) -> exp.Expression:
    return exp.or_(*[exp.Is(this=col(n, table), expression=exp.Null()) for n in names])


# -- the key map ------------------------------------------------------------------------------

def _keymap_items(shape: ViewShape) -> list[exp.Expression]:
    items = [
        exp.alias_(col(pk, table.alias), ident(c))
        for table in shape.tables for pk, c in zip(table.log.key_columns, table.keymap_columns)
    ]
    if shape.view_class is not ViewClass.JOIN:
        items += [exp.alias_(e, ident(n)) for e, n in zip(_unit_exprs(shape), keymap_key_columns(shape))]
    return items


def keymap_all_columns(shape: ViewShape) -> list[str]:
    """Every column of the key map, in order."""
    return [item.alias for item in _keymap_items(shape)]


def keymap_probe_sql(shape: ViewShape) -> str:
    """The key map's defining query (used to check, at apply time, that PostgreSQL accepts it)."""
    core = _parse(shape.core_sql)
    core.set("expressions", _keymap_items(shape))
    return core.sql(dialect=DIALECT)


def keymap_rebuild_sql(shape: ViewShape, exists: bool) -> list[str]:
    """Statements that rebuild the key map from the current base tables.

    An existing map is emptied and refilled (a refresh role may do that without owning
    it); a missing one is created with an index per FROM item's key columns.
    """
    table = keymap_table(shape).sql(dialect=DIALECT)
    core = _parse(shape.core_sql)
    core.set("expressions", _keymap_items(shape))
    if exists:
        statements = [f"TRUNCATE {table}", f"INSERT INTO {table} {core.sql(dialect=DIALECT)}"]
    else:
        statements = [f"CREATE TABLE {table} AS {core.sql(dialect=DIALECT)}"]
        for i, t in enumerate(shape.tables):
            index = ident(f"{shape.keymap}_{i}")
            columns = ", ".join(ident(c).sql(dialect=DIALECT) for c in t.keymap_columns)
            statements.append(f"CREATE INDEX {index.sql(dialect=DIALECT)} ON {table} ({columns})")
    regclass = exp.DataType.build("regclass", dialect=DIALECT, udt=True)
    analyze = exp.Anonymous(this="analyze", expressions=[exp.cast(exp.Literal.string(table), regclass)])
    statements.append(exp.select(exp.Dot(this=exp.to_identifier("mvlog"), expression=analyze)).sql(dialect=DIALECT))
    return statements


def keymap_update_sql(shape: ViewShape, since: datetime | None) -> list[str]:
    """Statements that bring the key map from the last refresh to the window's end: forget the
    rows of changed base keys, then add what those keys produce now."""
    table = keymap_table(shape)
    if shape.outer:
        # The roots' lineage rows are replaced: a partner that appears replaces the root's
        # NULL-extended row, which holds no key of the partner. One statement, so the roots are
        # found in the key map as it was (its sub-statements share one snapshot).
        root_columns = [col(c) for c in shape.tables[0].keymap_columns]
        forget = exp.CTE(this=exp.delete(table, where=_in(root_columns, _roots())),
                         alias=exp.TableAlias(this=ident(HIDDEN_PREFIX + "forgotten")))
        core = _parse(shape.core_sql)
        core.set("expressions", _keymap_items(shape))
        insert = exp.insert(core.where(_in(_root_exprs(shape), _roots()), copy=False), table)
        roots = exp.CTE(this=roots_sql(shape, since), alias=exp.TableAlias(this=ident(ROOTS)))
        insert.set("with_", exp.With(expressions=[roots, forget]))
        return [insert.sql(dialect=DIALECT)]
    statements = []
    for t in shape.tables:
        condition = _in([col(c) for c in t.keymap_columns], changed_keys_sql(t.log, since))
        statements.append(exp.delete(table, where=condition).sql(dialect=DIALECT))
    insert = exp.insert(_touched(shape, _keymap_items(shape), since), table)
    statements.append(insert.sql(dialect=DIALECT))
    return statements


def fast_refresh_statements(shape: ViewShape, since: datetime) -> list[str]:
    """Every statement a fast refresh of ``shape`` sends to PostgreSQL for a window after
    ``since``: its reads and, for a view with a key map, the null-key check and the map's
    update (checked by PostgreSQL at apply time, against :func:`keymap_stand_in_sql`)."""
    if not shape.keyed:
        return [fast_simple_sql(shape, since)]
    statements = [fast_keyed_sql(shape, since)]
    if shape.keymap is not None and not shape.global_aggregate:
        statements += keymap_update_sql(shape, since)
        if shape.view_class is ViewClass.AGGREGATE or shape.partition_exprs:
            statements += [null_keys_check_sql(shape, since), fast_keyed_sql(shape, since, null_keys=True)]
    return statements


def keymap_stand_in_sql(shape: ViewShape) -> list[str]:
    """An empty key map of today's columns in place of the view's (for checking statements
    in a transaction that is rolled back)."""
    core = _parse(shape.core_sql)
    core.set("expressions", _keymap_items(shape))
    empty = exp.select("*").from_(exp.Subquery(this=core, alias=exp.TableAlias(this=ident("m")))).limit(0)
    create = exp.Create(this=keymap_table(shape), kind="TABLE", expression=empty)
    return [drop_keymap_sql(shape.keymap or ""), create.sql(dialect=DIALECT)]


def drop_keymap_sql(name: str) -> str:
    return f"DROP TABLE IF EXISTS {exp.Table(this=ident(name), db=ident('mvlog')).sql(dialect=DIALECT)}"
