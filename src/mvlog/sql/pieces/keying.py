"""Shaping a view: its analysis joined with its tables' logs gives its :class:`~mvlog.sql.pieces.shape.ViewShape`
(simple, join, aggregate, window; UNION ALL, UNION and FULL JOIN views as shapes of their parts).

One builder per shape; :func:`mvlog.sql.pieces.choice.shape_view` chooses it (and shapes a set
operation's branches through it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from sqlglot import exp

from mvlog.model import HIDDEN_PREFIX, LogInfo
from mvlog.sql.analyze.analysis import (
    Analysis,
    NotKeyable,
    ViewClass,
    group_expressions,
    identifier_name,
    join_side,
    partition_by,
    window_parts,
)
from mvlog.sql.parse.sqltree import TableRef, full_join_parts, parsed, projected_columns, root_first, sql_text, union_of
from mvlog.sql.pieces.aggplan import plan_deltas
from mvlog.sql.pieces.lineage import lineage, select_core, semi_root, split_lineage, with_root_first
from mvlog.sql.pieces.shape import (
    BRANCH_COLUMN,
    ROW_KEY_COLUMN,
    RangeKey,
    TableKey,
    Tie,
    ViewShape,
    add_hidden,
    col,
    downgrade,
    groups_name,
    keymap_name,
)

ShapeBranch = Callable[[str, Analysis, dict[str, LogInfo]], ViewShape]  # shapes a branch (choice.shape_view)


def complete_only(name: str, analysis: Analysis, logs: tuple[LogInfo, ...]) -> ViewShape:
    """A view refreshed completely only, with the analysis's reasons."""
    text = analysis.query.strip().rstrip(";").strip()
    return ViewShape(name, analysis.view_class, tuple(analysis.reasons), logs, (), (), text)


def has_full_join(analysis: Analysis) -> bool:
    """Whether the (single SELECT) query has a FULL JOIN: shaped as two parts (:func:`full_join`)."""
    return any(join_side(j) == "FULL" for j in analysis.tree.args.get("joins") or [])


def union_all(name: str, analysis: Analysis, logs_by_alias: dict[str, LogInfo], logs: tuple[LogInfo, ...],
              shape_branch: ShapeBranch) -> ViewShape:
    """UNION ALL of keyable branches."""
    branches = analysis.branches
    return _shape_union(name, analysis.query, branches,
                        [{ref.alias: logs_by_alias[ref.display] for ref in b.tables} for b in branches], logs,
                        shape_branch)


def simple(name: str, analysis: Analysis, logs_by_alias: dict[str, LogInfo], logs: tuple[LogInfo, ...]) -> ViewShape:
    """One table, filtered and projected: keyed by its primary key."""
    select = analysis.tree.copy()
    assert isinstance(select, exp.Select)
    ref = analysis.tables[0]
    log = logs_by_alias[ref.alias]
    outputs = projected_columns(select, ref.alias, list(log.key_columns))
    key_columns, hidden = [], []
    for pk in log.key_columns:
        if pk in outputs:
            key_columns.append(outputs[pk])
        else:
            add_hidden(select, col(pk, ref.alias), HIDDEN_PREFIX + pk)
            key_columns.append(HIDDEN_PREFIX + pk)
            hidden.append(HIDDEN_PREFIX + pk)
    return ViewShape(name, ViewClass.SIMPLE, (), logs, tuple(key_columns), tuple(hidden), sql_text(select),
                     key_exprs=tuple(sql_text(col(pk, ref.alias)) for pk in log.key_columns),
                     range_key=RangeKey(key_columns[0], log, log.key_columns[0]))


def _shape_union(name: str, query: str, analyses: list[Analysis], logs_by_alias: list[dict[str, LogInfo]],
                 logs: tuple[LogInfo, ...], shape_branch: ShapeBranch, full_join: bool = False) -> ViewShape:
    """UNION ALL: every branch keyed on its own (``logs_by_alias[i]``: branch i's tables' logs);
    the view key is (branch number, the branch's key as row text)."""
    what = "FULL JOIN part" if full_join else "UNION ALL branch"
    branches, selects = [], []
    for i, (branch, by_alias) in enumerate(zip(analyses, logs_by_alias), 1):
        shape = shape_branch(name, branch, by_alias)
        if shape.branches:
            return downgrade(shape, query, f"{what} {i}: a FULL JOIN inside a UNION ALL branch is not "
                                           f"incrementally maintainable")
        if not shape.fast_possible:
            return downgrade(shape, query, f"{what} {i}: {'; '.join(shape.fast_reasons)}")
        # A branch keeps its own key map (and group table: an aggregate kept by state).
        keymap = keymap_name(name, i) if shape.keymap else None
        deltas = dataclasses.replace(shape.deltas, groups=groups_name(keymap)) if shape.deltas and keymap else None
        shape = dataclasses.replace(shape, keymap=keymap, deltas=deltas)
        select = branch.tree.copy()
        assert isinstance(select, exp.Select)  # every branch (of a UNION ALL, or a FULL JOIN's part) is a SELECT
        key = exp.Anonymous(this="ROW", expressions=[parsed(e) for e in shape.key_exprs])
        add_hidden(select, exp.Literal.number(i), BRANCH_COLUMN)
        add_hidden(select, exp.cast(key, exp.DataType.build("text")), ROW_KEY_COLUMN)
        branches.append(shape)
        selects.append(select)
    union = union_of(selects, distinct=False)
    return ViewShape(name, ViewClass.JOIN if full_join else ViewClass.UNION, (), logs,
                     (BRANCH_COLUMN, ROW_KEY_COLUMN), (BRANCH_COLUMN, ROW_KEY_COLUMN), sql_text(union),
                     branches=tuple(branches), branch_selects=tuple(sql_text(s) for s in selects),
                     full_join=full_join)


def union_distinct(name: str, analysis: Analysis, logs_by_alias: dict[str, LogInfo],
                   logs: tuple[LogInfo, ...], shape_branch: ShapeBranch) -> ViewShape:
    """UNION: a DISTINCT over the UNION ALL of its branches, each a ``SELECT DISTINCT`` keyed by its
    output rows and key-mapped on its own (base rows -> output row). The view key is the output
    row; an affected row is recomputed from every branch, and goes when no branch yields it."""
    branches = _branch_shapes(name, analysis, logs_by_alias, "UNION branch", len(analysis.branches[0].tree.selects),
                              shape_branch)
    if isinstance(branches, str):
        return downgrade(ViewShape(name, ViewClass.OTHER, (), logs, (), (), ""), analysis.query, branches)
    if branches[0].hidden_columns:
        return downgrade(branches[0], analysis.query, "UNION: give every output expression of the first branch a "
                                                      "name (AS …)")
    return ViewShape(name, ViewClass.UNION, (), logs, branches[0].key_columns, (), sql_text(analysis.tree),
                     branches=tuple(branches), branch_selects=tuple(sql_text(b.tree)
                                                                    for b in analysis.branches), distinct=True)


def _branch_shapes(name: str, analysis: Analysis, logs_by_alias: dict[str, LogInfo], what: str,
                   width: int, shape_branch: ShapeBranch) -> list[ViewShape] | str:
    """Each of ``analysis.branches`` (a SELECT DISTINCT of ``width`` outputs) shaped with its own
    key map, or why one cannot be."""
    shapes = []
    for i, branch in enumerate(analysis.branches, 1):
        shape = shape_branch(name, branch, {ref.alias: logs_by_alias[ref.display] for ref in branch.tables})
        if not shape.fast_possible:
            return f"{what} {i}: {'; '.join(shape.fast_reasons)}"
        if len(shape.key_exprs) != width:
            return f"{what} {i} outputs one expression twice: not incrementally maintainable yet"
        shapes.append(dataclasses.replace(shape, keymap=keymap_name(name, i), deltas=None))
    return shapes


def over_union(name: str, analysis: Analysis, logs_by_alias: dict[str, LogInfo],
               logs: tuple[LogInfo, ...], shape_branch: ShapeBranch) -> ViewShape:
    """An aggregate over a UNION ALL: keyed by its groups like any aggregate; its branches (each a
    SELECT DISTINCT of the groups of its rows) find the affected groups, which the whole query,
    restricted to them, recomputes."""
    select = analysis.tree.copy()
    assert isinstance(select, exp.Select)  # the aggregate (analysis._analyze_over_union)
    groups = group_expressions(select)
    branches = _branch_shapes(name, analysis, logs_by_alias, "UNION ALL branch", len(groups), shape_branch)
    if isinstance(branches, str):
        return downgrade(ViewShape(name, ViewClass.OTHER, (), logs, (), (), ""), analysis.query, branches)
    key_columns, hidden = [], []
    for i, group in enumerate(groups):
        output = _output_for(select, group)
        if output is None:
            output = f"{HIDDEN_PREFIX}g{i}"
            add_hidden(select, group.copy(), output)
            hidden.append(output)
        key_columns.append(output)
    return ViewShape(name, ViewClass.AGGREGATE, (), logs, tuple(key_columns), tuple(hidden),
                     sql_text(select), key_exprs=tuple(sql_text(g) for g in groups),
                     branches=tuple(branches), over_union=True)


def full_join(name: str, analysis: Analysis, logs_by_alias: dict[str, LogInfo],
              logs: tuple[LogInfo, ...], shape_branch: ShapeBranch) -> ViewShape:
    """``P FULL JOIN b ON c …`` (``P``: the first table ``a`` and the tables inner-joined to it): its
    rows that hold a row of ``a`` are those of ``P LEFT JOIN b ON c …`` (root ``a``), the others
    those of ``P RIGHT JOIN b ON c … WHERE <a's key> IS NULL`` (root ``b``: the ``b`` rows without a
    partner). The two parts never share a row, so the view is their UNION ALL, each part
    refreshed as an outer-join view of its own."""
    first = analysis.tables[0]
    a_key = col(logs_by_alias[first.alias].key_columns[0], first.alias)
    select = analysis.tree
    assert isinstance(select, exp.Select)  # a join or aggregate view (see shape_view)
    parts = [dataclasses.replace(analysis, query=sql_text(tree), tree=tree)
             for tree in full_join_parts(select, a_key)]
    return _shape_union(name, analysis.query, parts, [logs_by_alias] * 2, logs, shape_branch, full_join=True)


def keyed(name: str, analysis: Analysis, logs_by_alias: dict[str, LogInfo], logs: tuple[LogInfo, ...],
          aggregate: bool) -> ViewShape:
    """Joins (inner, outer, with subqueries) and aggregates over them: keyed by the tables'
    primary keys, or (``aggregate``) by the groups."""
    select = analysis.tree.copy()
    assert isinstance(select, exp.Select)
    try:
        groups = group_expressions(select) if aggregate else []
    except NotKeyable as exc:
        text = analysis.query.strip().rstrip(";").strip()
        return ViewShape(name, ViewClass.OTHER, (str(exc),), logs, (), (), text)

    # an aggregate's (its key map is split and marked, so one kept with another root is not read)
    root = semi_root(select, analysis.semi_joins) if aggregate else None
    if root is not None:
        with_root_first(select, root)
    joins = select.args.get("joins") or []
    sides = [join_side(j) for j in joins]
    outer = any(side in ("LEFT", "RIGHT") for side in sides) or bool(analysis.semi_joins)
    refs = root_first(analysis.tables, joins)
    if root is not None:
        refs.insert(0, refs.pop(next(i for i, r in enumerate(refs) if r.alias == root)))
    from_items = len(refs) - sum(len(semi.tables) for semi in analysis.semi_joins)
    tables = _table_keys(refs, logs_by_alias, from_items)

    key_exprs: list[exp.Expr]
    key_columns, hidden, key_exprs = [], [], []
    if aggregate and not groups:  # a global aggregate: one row, keyed by a constant
        key_exprs.append(exp.true())
        add_hidden(select, exp.true(), HIDDEN_PREFIX + "group")
        key_columns.append(HIDDEN_PREFIX + "group")
        hidden.append(HIDDEN_PREFIX + "group")
    elif aggregate:
        for i, group in enumerate(groups):
            output = _output_for(select, group)
            key_exprs.append(group)
            if output is None:
                output = f"{HIDDEN_PREFIX}g{i}"
                add_hidden(select, group.copy(), output)
                hidden.append(output)
            key_columns.append(output)
    else:
        key_columns, hidden, key_exprs = _row_keys(select, tables[:from_items])

    keymap_cores: tuple[str, ...] = ()
    keymap_ties: tuple[Tie | None, ...] = ()
    if outer:
        core = lineage(select, sides, analysis.semi_joins)
        if aggregate and analysis.semi_joins:
            keymap_cores, keymap_ties = split_lineage(select, sides, analysis.semi_joins, tables[0].alias)
    else:
        core = select_core(select)
    deltas = None
    recompute_reason = None
    if aggregate:
        planned = (plan_deltas(select, groups, keymap_name(name)) if not outer
                   else "an aggregate over outer joins or subqueries is recomputed per affected group")
        deltas, recompute_reason = (None, planned) if isinstance(planned, str) else (planned, None)
    return ViewShape(
        name, analysis.view_class, (), logs, tuple(key_columns), tuple(hidden), sql_text(select),
        tables=tuple(tables), key_exprs=tuple(sql_text(e) for e in key_exprs),
        core_sql=sql_text(core), keymap=keymap_name(name), global_aggregate=aggregate and not groups,
        range_key=None if aggregate and not groups else _range_key(key_columns, tables, groups), outer=outer,
        deltas=deltas, recompute_reason=recompute_reason, row_keyed=not aggregate, keymap_cores=keymap_cores,
        keymap_ties=keymap_ties,
        null_free_keys=tuple(analysis.never_null(g) for g in groups),
        determined_keys=determined_groups(groups, tables[:from_items], analysis),
    )


def determined_groups(groups: list[exp.Expr], tables: list[TableKey], analysis: Analysis) -> tuple[bool, ...]:
    """Per group expression, whether it is a column of a table whose whole primary key is among
    the groups (so that key determines it: q39's ``w_warehouse_name`` beside ``w_warehouse_sk``).
    Also over an outer join: a row the join extends has NULL in the key and the column alike."""
    owners = [(analysis.owner(g), g.name) if isinstance(g, exp.Column) else (None, "") for g in groups]
    keyed = {t.alias: t.log.key_columns for t in tables
             if all((t.alias, pk) in owners for pk in t.log.key_columns)}
    if not keyed:
        return ()
    return tuple(alias in keyed and name not in keyed[alias] for alias, name in owners)


def _table_keys(refs: list[TableRef], logs_by_alias: dict[str, LogInfo], from_items: int | None = None
                ) -> list[TableKey]:
    """The FROM items' (and from ``from_items`` on, the subqueries' tables') keys and key-map columns."""
    tables = []
    for i, ref in enumerate(refs):
        log = logs_by_alias[ref.alias]
        tables.append(TableKey(ref.alias, log, tuple(f"{HIDDEN_PREFIX}r{i}_{j}" for j in range(len(log.key_columns))),
                               semi=from_items is not None and i >= from_items))
    return tables


def _row_keys(select: exp.Select, tables: list[TableKey], through: exp.Select | None = None
              ) -> tuple[list[str], list[str], list[exp.Expr]]:
    """A view keyed by its tables' primary keys: (key columns, hidden columns, key expressions).
    A key column ``select`` outputs unchanged is used as it is; the others are added hidden (to
    ``select`` and passed on by ``through``, the outer query of a window view)."""
    key_exprs: list[exp.Expr]
    key_columns, hidden, key_exprs = [], [], []
    for table in tables:
        projected = projected_columns(select, table.alias, list(table.log.key_columns)) if through is None else {}
        for pk in table.log.key_columns:
            expression = col(pk, table.alias)
            key_exprs.append(expression)
            output = projected.get(pk) if _unambiguous(select, table.alias, pk) else None
            if output is None or output in key_columns:
                output = f"{HIDDEN_PREFIX}{table.alias}_{pk}"
                add_hidden(select, expression.copy(), output)
                if through is not None:
                    source = through.args["from_"].this
                    add_hidden(through, col(output, identifier_name(source.args["alias"].this)), output)
                hidden.append(output)
            key_columns.append(output)
    return key_columns, hidden, key_exprs


def window(name: str, analysis: Analysis, logs_by_alias: dict[str, LogInfo], logs: tuple[LogInfo, ...]) -> ViewShape:
    """Window functions over a simple or join query: keyed by its tables' primary keys; the key
    map maps base rows (an outer join's: lineage rows) to their partition, and an affected
    partition is recomputed whole."""
    select = analysis.tree.copy()
    assert isinstance(select, exp.Select)
    outer, inner = window_parts(select)
    sides = [join_side(j) for j in inner.args.get("joins") or []]
    outer_join = any(side in ("LEFT", "RIGHT") for side in sides)
    tables = _table_keys(root_first(analysis.tables, inner.args.get("joins") or []), logs_by_alias)
    key_columns, hidden, key_exprs = _row_keys(inner, tables, through=outer)
    core = lineage(inner, sides, []) if outer_join else select_core(inner)
    return ViewShape(
        name, ViewClass.WINDOW, (), logs, tuple(key_columns), tuple(hidden), sql_text(select),
        tables=tuple(tables), key_exprs=tuple(sql_text(e) for e in key_exprs),
        core_sql=sql_text(core), keymap=keymap_name(name), outer=outer_join,
        range_key=RangeKey(key_columns[0], tables[0].log, tables[0].log.key_columns[0]),
        partition_exprs=tuple(sql_text(e) for e in partition_by(inner)),
    )


def _range_key(key_columns: list[str], tables: list[TableKey], groups: list[exp.Expr]) -> RangeKey | None:
    if not groups:  # a join: the first key column is the first FROM item's first primary key column
        return RangeKey(key_columns[0], tables[0].log, tables[0].log.key_columns[0])
    first = groups[0]
    if not (isinstance(first, exp.Column) and isinstance(first.this, exp.Identifier)):
        return None
    alias = first.args.get("table")
    if alias is None:
        table = tables[0] if len(tables) == 1 else None
    else:
        table = next((t for t in tables if t.alias == identifier_name(alias)), None)
    return RangeKey(key_columns[0], table.log, identifier_name(first.this), grouped=True) if table else None


def _unambiguous(select: exp.Select, alias: str, column: str) -> bool:
    """A projected key column counts only when it is qualified by its alias (joins reuse names)."""
    for projection in select.selects:
        target = projection.this if isinstance(projection, exp.Alias) else projection
        if (isinstance(target, exp.Column) and isinstance(target.this, exp.Identifier)
                and identifier_name(target.this) == column and target.args.get("table")
                and identifier_name(target.args["table"]) == alias):
            return True
    return False


def _output_for(select: exp.Select, group: exp.Expr) -> str | None:
    """The output column that carries a GROUP BY expression unchanged, if any."""
    for projection in select.selects:
        target = projection.this if isinstance(projection, exp.Alias) else projection
        if target == group:
            if isinstance(projection, exp.Alias):
                return identifier_name(projection.args["alias"])
            if isinstance(target, exp.Column) and isinstance(target.this, exp.Identifier):
                return identifier_name(target.this)
    return None
