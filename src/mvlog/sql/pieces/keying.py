"""Shaping a view: its analysis joined with its tables' logs gives its :class:`~mvlog.sql.pieces.shape.ViewShape`
(simple, join, aggregate, window; UNION ALL, UNION and FULL JOIN views as shapes of their parts:
:mod:`mvlog.sql.pieces.unions`).

One builder per shape; :func:`mvlog.sql.pieces.choice.shape_view` chooses it.
"""

from __future__ import annotations

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
from mvlog.sql.parse.sqltree import TableRef, projected_columns, root_first, sql_text
from mvlog.sql.pieces.aggplan import plan_deltas
from mvlog.sql.pieces.lineage import lineage, select_core, semi_root, split_lineage, with_root_first
from mvlog.sql.pieces.shape import (
    RangeKey,
    TableKey,
    Tie,
    ViewShape,
    add_hidden,
    col,
    keymap_name,
)


def complete_only(name: str, analysis: Analysis, logs: tuple[LogInfo, ...]) -> ViewShape:
    """A view refreshed completely only, with the analysis's reasons."""
    text = analysis.query.strip().rstrip(";").strip()
    return ViewShape(name, analysis.view_class, tuple(analysis.reasons), logs, (), (), text)


def has_full_join(analysis: Analysis) -> bool:
    """Whether the (single SELECT) query has a FULL JOIN: shaped as two parts (:func:`full_join`)."""
    return any(join_side(j) == "FULL" for j in analysis.tree.args.get("joins") or [])


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
        key_columns, hidden = group_key_columns(select, groups)
        key_exprs = list(groups)
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


def group_key_columns(select: exp.Select, groups: list[exp.Expr]) -> tuple[list[str], list[str]]:
    """An aggregate's key columns, one per group expression (the output that carries it unchanged,
    else one added hidden to ``select``), and the hidden ones."""
    key_columns, hidden = [], []
    for i, group in enumerate(groups):
        output = _output_for(select, group)
        if output is None:
            output = f"{HIDDEN_PREFIX}g{i}"
            add_hidden(select, group.copy(), output)
            hidden.append(output)
        key_columns.append(output)
    return key_columns, hidden


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
