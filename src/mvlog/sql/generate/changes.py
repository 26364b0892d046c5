"""The changes a fast refresh starts from, as sqlglot trees: the keys a window changed, the view
rows they touch now (the base tables) and at the last refresh (the key map), and an outer-join
view's affected *roots*. :mod:`mvlog.sql.generate.sqlgen` builds the reads on them, :mod:`mvlog.sql.generate.keymap` the
key map's upkeep.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlglot import exp

from mvlog.model import CHANGED_KEY_PREFIX, HIDDEN_PREFIX, MVLOG_SCHEMA, LogInfo
from mvlog.sql.analyze.analysis import DIALECT
from mvlog.sql.parse.sqltree import join_side, parse_select, parsed, sql_text, union_of
from mvlog.sql.pieces.shape import ViewShape, col, ident, input_column, tie_column, unit_column

# CTE names of a fast read: prefixed, so that they cannot shadow a table the view's query reads.
AFFECTED = HIDDEN_PREFIX + "affected_keys"  # the view keys to recompute (_mvlog_key_<i>)
ROOTS = HIDDEN_PREFIX + "roots"  # an outer-join view's affected roots, a window view's partitions


def _timestamptz(value: datetime) -> exp.Expr:
    return exp.cast(exp.Literal.string(value.isoformat()), exp.DataType.build("timestamptz", dialect=DIALECT))


def key_names(n: int) -> list[str]:
    """The columns ``_mvlog_key_<i>`` of affected or changed keys."""
    return [f"{CHANGED_KEY_PREFIX}{i}" for i in range(n)]


def keys_match(keys: Sequence[str], keyed: str, rows: str) -> exp.Expr:
    """``keyed``'s ``_mvlog_key_<i>`` equal to ``rows``' ``keys``, a NULL equal to a NULL: compared as
    row texts (``CAST(ROW(…) AS TEXT)``), which PostgreSQL hashes. ``IS NOT DISTINCT FROM`` it
    cannot hash: a NOT EXISTS over a nested view's 150,000 inner rows and 16,000 changed ones ran
    every pair (TPC-H Q13 at SF 1: 200 s). Both sides are the same expressions of the same types,
    so equal values have equal texts."""
    def text(columns: list[exp.Column]) -> exp.Expr:
        return exp.cast(exp.Anonymous(this="ROW", expressions=columns), exp.DataType.build("text"))

    return exp.EQ(this=text([col(n, keyed) for n in key_names(len(keys))]),
                  expression=text([col(k, rows) for k in keys]))


def null_safe_matches(pairs: Sequence[tuple[exp.Expr, exp.Expr]], null_free: Sequence[bool]) -> list[exp.Expr]:
    """Per key (a pair of sides), ``=`` where it can never be NULL (``null_free``, per key, as
    ``ViewShape.null_free_keys``: a key past its end may be NULL) and ``IS NOT DISTINCT FROM``
    otherwise: PostgreSQL hashes or indexes ``=``, never ``IS NOT DISTINCT FROM``."""
    return [(exp.EQ if i < len(null_free) and null_free[i] else exp.NullSafeEQ)(this=this, expression=that)
            for i, (this, that) in enumerate(pairs)]


def in_query(expressions: Sequence[exp.Expr], query: exp.Query) -> exp.Expr:
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
    # rows of keys: not T (a TRUNCATE) or P (a partition dropped or unwatched), which have none
    condition: exp.Condition = exp.In(this=col("dmltype$$"), expressions=[exp.Literal.string(t) for t in "IUD"])
    if since is not None:
        condition = exp.and_(condition, logged_after(since))
    return (
        exp.select(*[exp.alias_(col(k), ident(n))
                     for k, n in zip(log.key_columns, names or key_names(len(log.key_columns)))])
        .distinct()
        .from_(log_table(log))
        .where(condition)
    )


def log_table(log: LogInfo) -> exp.Table:
    """The log's table, ``mvlog.<log>``."""
    return exp.Table(this=ident(log.log_name), db=ident("mvlog"))


def base_table(log: LogInfo, alias: str) -> exp.Table:
    """The table the log is on, ``<schema>.<table> AS <alias>``."""
    return exp.Table(this=ident(log.table_name), db=ident(log.table_schema), alias=exp.TableAlias(this=ident(alias)))


def log_rows(log: LogInfo) -> exp.Select:
    """The log's rows as a union with rows of another source reads them: its keys, ``snaptime$$``,
    ``dmltype$$`` and ``old_new$$`` as text, ``xact_time$$``."""
    return exp.select(
        *[col(c) for c in log.key_columns], col("snaptime$$"),
        *[exp.alias_(exp.cast(col(c), "text"), ident(c)) for c in ("dmltype$$", "old_new$$")],
        col("xact_time$$"),
    ).from_(log_table(log))


def read_logs_as(statement: str, logs: dict[str, exp.Query]) -> str:
    """``statement`` with each log named in ``logs`` (by its table's name) read as that query,
    under the log's alias or name."""
    tree: exp.Expr = parsed(statement)
    for table in list(tree.find_all(exp.Table)):
        if table.db == MVLOG_SCHEMA and table.name in logs:
            table.replace(exp.Subquery(this=logs[table.name].copy(),
                                       alias=exp.TableAlias(this=ident(table.alias or table.name))))
    return sql_text(tree)


def logged_after(since: datetime) -> exp.Condition:
    """A log row of the window that starts after ``since`` (at the refresh's snapshot: up to its stamp)."""
    return exp.GT(this=col("snaptime$$"), expression=_timestamptz(since))


def changed_key_count_sql(log: LogInfo, since: datetime | None) -> str:
    """How many distinct keys the window holds (the size of the change, for planning)."""
    keys = exp.Subquery(this=changed_keys_sql(log, since), alias=exp.TableAlias(this=ident("k")))
    return sql_text(exp.select(exp.Count(this=exp.Star())).from_(keys))


def keymap_table(shape: ViewShape) -> exp.Table:
    assert shape.keymap is not None
    return exp.Table(this=ident(shape.keymap), db=ident("mvlog"))


def keymap_key_columns(shape: ViewShape) -> list[str]:
    """Key-map columns holding the view key (join views: the base keys themselves), or a window
    view's partition."""
    if shape.row_keyed:
        return [c for table in shape.tables if not table.semi for c in table.keymap_columns]
    return [unit_column(i) for i in range(len(unit_exprs(shape)))]


def keymap_items(shape: ViewShape) -> list[exp.Expr]:
    """What the key map holds per lineage row: each FROM item's primary key, the view key (or
    partition) it maps to unless that is the keys themselves, and the aggregate inputs of a view
    maintained by deltas (a counted-only input as 1 for a value, 0 for NULL)."""
    items: list[exp.Expr] = [
        exp.alias_(col(pk, table.alias), ident(c))
        for table in shape.tables for pk, c in zip(table.log.key_columns, table.keymap_columns)
    ]
    if not shape.row_keyed:
        items += [exp.alias_(e, ident(n)) for e, n in zip(unit_exprs(shape), keymap_key_columns(shape))]
    if shape.deltas is not None:
        for j, text in enumerate(shape.deltas.inputs):
            value: exp.Expr = parsed(text)
            if not shape.deltas.raw(j):
                value = exp.Case(ifs=[exp.If(this=exp.Is(this=exp.Paren(this=value), expression=exp.Null()),
                                             true=exp.Literal.number(0))], default=exp.Literal.number(1))
            items.append(exp.alias_(value, ident(input_column(j))))
    return items


def key_exprs(shape: ViewShape) -> list[exp.Expr]:
    return [parsed(e) for e in shape.key_exprs]


def unit_exprs(shape: ViewShape) -> list[exp.Expr]:
    """What the key map maps base rows to: the view key, or a window view's partition."""
    return [parsed(e) for e in shape.partition_exprs or shape.key_exprs]


def touched_rows(shape: ViewShape, items: list[exp.Expr], since: datetime | None) -> exp.Query:
    """``items`` over the view's rows that involve a changed base row (one branch per FROM item)."""
    branches = []
    for table in shape.tables:
        core = parse_select(shape.core_sql)
        core.set("expressions", [item.copy() for item in items])
        pks = [col(pk, table.alias) for pk in table.log.key_columns]
        branches.append(core.where(in_query(pks, changed_keys_sql(table.log, since)), copy=False))
    return union_of(branches)


def root_exprs(shape: ViewShape) -> list[exp.Expr]:
    root = shape.tables[0]
    return [col(pk, root.alias) for pk in root.log.key_columns]


def in_roots(expressions: list[exp.Expr], roots: exp.Query | None = None) -> exp.Expr:
    """``expressions`` are among the roots (``roots``, else the CTE ROOTS). One key column: ``= ANY(ARRAY(…))``, which
    PostgreSQL plans for a few values (it cannot know how many roots the CTE yields, and a
    changed dimension row in the lineage makes it expect many): driven by the root's primary
    key and the joins' indexes, instead of hash joins over whole tables."""
    roots = roots if roots is not None else roots_ref()
    if len(expressions) > 1:
        return in_query(expressions, roots)
    array = exp.Array(expressions=[roots])
    return exp.EQ(this=expressions[0], expression=exp.Any(this=exp.Paren(this=array)))


def roots_ref() -> exp.Select:
    return exp.select(exp.Star()).from_(ROOTS)


def tied_inner(shape: ViewShape) -> bool:
    """Whether an aggregate's FROM items are inner-joined and each of its subqueries is tied to the
    root by values alone (:class:`~mvlog.sql.pieces.shape.Tie`): its key map then holds no row of a
    root's but its lineage's (branch 0) and its subqueries' values, so a changed outer row is traced
    to its groups directly, as an inner join's is, and only a changed subquery row through roots."""
    if not shape.keymap_ties or not all(shape.keymap_ties[1:]):
        return False
    return all(join_side(j) in ("INNER", "CROSS") for j in parse_select(shape.keymap_cores[0]).args.get("joins") or [])


def roots_sql(shape: ViewShape, since: datetime | None, subqueries_only: bool = False) -> exp.Query:
    """An outer-join view's roots whose lineage rows hold a changed base row, now (from the
    base tables) or at the last refresh (from the key map); a changed root row is its own.
    ``subqueries_only``: the roots of changed rows of its subqueries' tables only."""
    root = shape.tables[0]
    names = list(root.keymap_columns)
    branches: list[exp.Query] = [] if subqueries_only else [changed_keys_sql(root.log, since, names)]
    for table in shape.tables[1:]:
        if subqueries_only and not table.semi:
            continue
        changed = changed_keys_sql(table.log, since)
        core = parse_select(shape.core_sql)
        core.set("expressions", [exp.alias_(e, ident(n)) for e, n in zip(root_exprs(shape), names)])
        pks = [col(pk, table.alias) for pk in table.log.key_columns]
        branches.append(core.where(in_query(pks, changed), copy=False))
        before = in_query([col(c) for c in table.keymap_columns], changed.copy())
        tie = next(((b, t) for b, t in enumerate(shape.keymap_ties) if t and table.alias in t.aliases), None)
        if tie is None:
            branches.append(exp.select(*[col(n) for n in names]).from_(keymap_table(shape)).where(before))
            continue
        # A tied subquery's changed rows had the values the key map kept: the roots of those values
        # (a root's own values have not moved, or the root is changed itself and a root already).
        branch, kept = tie
        values = exp.select(*[col(tie_column(branch, n)) for n in range(len(kept.inner))]) \
            .from_(keymap_table(shape)).where(before)
        branches.append(exp.select(*[exp.alias_(e, ident(n)) for e, n in zip(root_exprs(shape), names)])
                        .from_(base_table(root.log, root.alias))
                        .where(in_query([parsed(o) for o in kept.outer], values)))
    return union_of(branches)
