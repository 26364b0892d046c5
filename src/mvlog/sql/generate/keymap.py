"""The key map of a join, aggregate or window view: ``mvlog."keys$_<view>_<hash>"``, base-row
keys -> view key (or partition), kept at the view's last refresh in PostgreSQL. The statements
that build, probe, update and drop it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from sqlglot import exp

from mvlog.model import HIDDEN_PREFIX
from mvlog.sql.analyze.analysis import DIALECT
from mvlog.sql.generate.changes import (
    ROOTS,
    changed_keys_sql,
    in_query,
    in_roots,
    keymap_items,
    keymap_key_columns,
    keymap_table,
    root_exprs,
    roots_ref,
    roots_sql,
    tied_inner,
    touched_rows,
    unit_exprs,
)
from mvlog.sql.parse.sqltree import identifier_name, parse_select, parsed, sql_text, union_of
from mvlog.sql.pieces.shape import SEMI_COLUMN, TableKey, Tie, ViewShape, col, ident, input_column, tie_column


def keymap_all_columns(shape: ViewShape) -> list[str]:
    """Every column of the key map, in order."""
    return [item.alias for item in _branch_items(shape, 0, set())] if shape.keymap_cores else [
        item.alias for item in keymap_items(shape)]


def _tie(shape: ViewShape, branch: int) -> Tie | None:
    return shape.keymap_ties[branch] if shape.keymap_ties else None


def _branch_items(shape: ViewShape, branch: int, own: set[str]) -> list[exp.Expr]:
    """A split key map's columns over its ``branch``'s query (0: the lineage without subqueries;
    ``own``: the aliases of the subquery tables it reads): the root's key, the other FROM items'
    in branch 0 only, the subquery's own tables' keys, the view key, a tied subquery's values
    (:class:`~mvlog.sql.pieces.shape.Tie`: its branch has no root, no group); NULL (typed) elsewhere."""
    tied = _tie(shape, branch) is not None
    items: list[exp.Expr] = []
    for i, table in enumerate(shape.tables):
        present = table.alias in own if table.semi else (branch == 0 or (i == 0 and not tied))
        for pk, name, type_ in zip(table.log.key_columns, table.keymap_columns, table.log.key_types):
            value = col(pk, table.alias) if present else exp.cast(
                exp.Null(), exp.DataType.build(type_, dialect=DIALECT, udt=True))
            items.append(exp.alias_(value, ident(name)))
    items += [exp.alias_(exp.Null() if tied else e, ident(n))
              for e, n in zip(unit_exprs(shape), keymap_key_columns(shape))]
    for b, tie in enumerate(shape.keymap_ties):
        if tie is None:
            continue
        for n, inner in enumerate(tie.inner):
            items.append(exp.alias_(_tie_value(shape, b, inner, b == branch), ident(tie_column(b, n))))
    return [*items, exp.alias_(exp.Literal.number(branch), ident(SEMI_COLUMN))]


def _tie_value(shape: ViewShape, branch: int, inner: str, present: bool) -> exp.Expr:
    """A tied branch's value ``inner``, or (not ``present``) a NULL of its type: a scalar subquery of
    no row (PostgreSQL types a nested UNION's columns pairwise: untyped NULLs in two branches are text)."""
    value: exp.Expr = parsed(inner)
    if present:
        return value
    typed = parse_select(shape.keymap_cores[branch])
    typed.set("expressions", [value])
    return exp.Subquery(this=typed.where(exp.false(), append=False))


def lineage_rows(shape: ViewShape, condition: Callable[[], exp.Expr] | None = None,
                 tied: Callable[[list[TableKey]], exp.Expr] | None = None) -> exp.Query:
    """The rows the key map holds, as one query (``condition``: on every branch's rows; ``tied``:
    on a tied branch's instead, given its tables — it has no root).

    An aggregate with subqueries (``shape.keymap_cores``) keeps its lineage without them and,
    per subquery, the distinct (root, subquery row, group) its lineage ties together: a change
    of a subquery row is traced to its roots by the latter, a change of an outer row by the
    former, and either gives the root's groups. The lineage with every subquery's rows in one
    row multiplies them (TPC-H Q18: a line item's order's other line items, ~16 rows per order).
    A subquery tied to the root by values alone keeps its rows' values instead (:class:`Tie`)."""
    if not shape.keymap_cores:
        core = parse_select(shape.core_sql)
        core.set("expressions", keymap_items(shape))
        return core.where(condition(), copy=False) if condition else core
    branches: list[exp.Query] = []
    for branch in range(len(shape.keymap_cores)):
        core, own = _branch_rows(shape, branch)
        if _tie(shape, branch) is not None:
            assert condition is None or tied is not None, "a tied branch has no root to restrict"
            branches.append(core.where(tied(own), copy=False) if tied else core)
        else:
            branches.append(core.where(condition(), copy=False) if condition else core)
    return union_of(branches, distinct=False)


def _branch_rows(shape: ViewShape, branch: int) -> tuple[exp.Select, list[TableKey]]:
    """A split key map's ``branch`` as a query of its columns, and the subquery tables it reads."""
    core = parse_select(shape.keymap_cores[branch])
    aliases = {identifier_name(t.args["alias"].this) if t.alias else t.name for t in core.find_all(exp.Table)}
    own = [t for t in shape.tables if t.semi and t.alias in aliases]
    core.set("expressions", _branch_items(shape, branch, {t.alias for t in own}))
    if own and _tie(shape, branch) is None:  # the lineage's rows with a row of this subquery (not NULL-extended)
        core.set("distinct", exp.Distinct())
        core.where(exp.not_(exp.Is(this=col(own[0].log.key_columns[0], own[0].alias), expression=exp.Null())),
                   copy=False)
    return core, own


def probe_indexes(shape: ViewShape) -> dict[str, tuple[str, ...]]:
    """The key map's indexes on (group, input) that an aggregate's MIN/MAX probe per group, by name."""
    if shape.deltas is None:
        return {}
    groups = tuple(keymap_key_columns(shape))
    return {f"{shape.keymap}_x{j}": (*groups, input_column(j)) for j in shape.deltas.probed}


def keymap_probe_sql(shape: ViewShape) -> str:
    """The key map's defining query (used to check, at apply time, that PostgreSQL accepts it)."""
    return sql_text(lineage_rows(shape))


def keymap_rebuild_sql(shape: ViewShape, exists: bool) -> list[str]:
    """Statements that rebuild the key map from the current base tables.

    An existing map is emptied and refilled (a refresh role may do that without owning
    it); a missing one is created with an index per FROM item's key columns.
    """
    table = sql_text(keymap_table(shape))
    core = lineage_rows(shape)
    if exists:
        statements = [f"TRUNCATE {table}", f"INSERT INTO {table} {sql_text(core)}"]
    else:
        statements = [f"CREATE TABLE {table} AS {sql_text(core)}"]
        indexes = [(f"{shape.keymap}_{i}", t.keymap_columns) for i, t in enumerate(shape.tables)]
        for name, index_columns in [*indexes, *probe_indexes(shape).items()]:
            columns = ", ".join(sql_text(ident(c)) for c in index_columns)
            statements.append(f"CREATE INDEX {sql_text(ident(name))} ON {table} ({columns})")
    return [*statements, analyze_sql(table)]


def analyze_sql(table: str) -> str:
    """``SELECT mvlog.analyze('<table>')``: ANALYZE by the catalog's function, which a refresh role
    may call on a table it does not own (``table``: its quoted, qualified name)."""
    regclass = exp.DataType.build("regclass", dialect=DIALECT, udt=True)
    analyze = exp.Anonymous(this="analyze", expressions=[exp.cast(exp.Literal.string(table), regclass)])
    return sql_text(exp.select(exp.Dot(this=exp.to_identifier("mvlog"), expression=analyze)))


def refill_sql(name: str, rows: exp.Query, columns: Sequence[str], current: Sequence[str] | None) -> list[str]:
    """State table ``name`` holding ``rows`` (of ``columns``): emptied and refilled if it has those
    columns now (``current``; a refresh role may do that without owning it), else made again."""
    table = state_table(name)
    if current is not None and list(current) == list(columns):
        return [sql_text(exp.TruncateTable(expressions=[table])),
                sql_text(exp.insert(rows, table.copy(), columns=[ident(c) for c in columns]))]
    return [drop_table_sql(name), sql_text(exp.Create(this=table, kind="TABLE", expression=rows))]


def keymap_update_sql(shape: ViewShape, since: datetime | None) -> list[str]:
    """Statements that bring the key map from the last refresh to the window's end: forget the
    rows of changed base keys, then add what those keys produce now."""
    table = keymap_table(shape)
    if tied_inner(shape):
        # No row of a root's: the lineage's rows and the subqueries' values that hold a changed key
        # are replaced, as an inner join's are (the lineage: a branch per table, for its index).
        deletes = [sql_text(exp.delete(table, where=_changed(t, since))) for t in shape.tables]
        rows: list[exp.Query] = []
        for t in shape.tables:
            if not t.semi:
                core, _ = _branch_rows(shape, 0)
                rows.append(core.where(_changed(t, since, t.alias), copy=False))
        for branch in range(1, len(shape.keymap_cores)):
            core, own = _branch_rows(shape, branch)
            rows.append(core.where(exp.or_(*[_changed(t, since, t.alias) for t in own]), copy=False))
        return [*deletes, sql_text(exp.insert(union_of(rows), table))]
    if shape.outer:
        # The roots' lineage rows are replaced: a partner that appears replaces the root's
        # NULL-extended row, which holds no key of the partner. One statement, so the roots are
        # found in the key map as it was (its sub-statements share one snapshot).
        root_columns = [col(c) for c in shape.tables[0].keymap_columns]
        forget = exp.CTE(this=exp.delete(table, where=in_query(root_columns, roots_ref())),
                         alias=exp.TableAlias(this=ident(HIDDEN_PREFIX + "forgotten")))
        roots = exp.CTE(this=roots_sql(shape, since), alias=exp.TableAlias(this=ident(ROOTS)))
        ctes = [roots, forget]
        tied = [t for t in shape.tables if t.semi and any(tie and t.alias in tie.aliases for tie in shape.keymap_ties)]
        if tied:  # a tied subquery's rows (they have no root) are replaced where they changed
            ctes.append(exp.CTE(this=exp.delete(table, where=exp.or_(*[_changed(t, since) for t in tied])),
                                alias=exp.TableAlias(this=ident(HIDDEN_PREFIX + "untied"))))
        insert = exp.insert(lineage_rows(shape, lambda: in_roots(root_exprs(shape)),
                                         lambda own: exp.or_(*[_changed(t, since, t.alias) for t in own])), table)
        insert.set("with_", exp.With(expressions=ctes))
        return [sql_text(insert)]
    statements = []
    for t in shape.tables:
        condition = in_query([col(c) for c in t.keymap_columns], changed_keys_sql(t.log, since))
        statements.append(sql_text(exp.delete(table, where=condition)))
    insert = exp.insert(touched_rows(shape, keymap_items(shape), since), table)
    statements.append(sql_text(insert))
    return statements


def _changed(table: TableKey, since: datetime | None, alias: str | None = None) -> exp.Expr:
    """``table``'s key (in the key map's columns, or with ``alias`` its own) among the window's changed keys."""
    keys = [col(pk, alias) for pk in table.log.key_columns] if alias else [col(c) for c in table.keymap_columns]
    return in_query(keys, changed_keys_sql(table.log, since))


def keymap_stand_in_sql(shape: ViewShape) -> list[str]:
    """An empty key map of today's columns in place of the view's (for checking statements
    in a transaction that is rolled back)."""
    empty = exp.select("*").from_(exp.Subquery(this=lineage_rows(shape), alias=exp.TableAlias(this=ident("m")))
                                  ).limit(0)
    create = exp.Create(this=keymap_table(shape), kind="TABLE", expression=empty)
    return [drop_table_sql(shape.keymap or ""), sql_text(create)]


def qualified(name: str) -> str:
    """``mvlog."<name>"``: a key map or one of its indexes."""
    return sql_text(exp.Table(this=ident(name), db=ident("mvlog")))


def state_table(name: str) -> exp.Table:
    """``mvlog."<name>"``: a key map, or another of the state mvlog keeps, as a table node."""
    return exp.Table(this=ident(name), db=ident("mvlog"))


def drop_table_sql(name: str) -> str:
    """``DROP TABLE IF EXISTS mvlog."<name>"``: a key map, or another of the state mvlog keeps."""
    return f"DROP TABLE IF EXISTS {qualified(name)}"

