"""``mvlog explain``: Oracle EXPLAIN_MVIEW-style refresh capabilities of a view, each with its reason."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from mvlog.sql.analysis import Analysis, ViewClass
from mvlog.sql.rewrite import FULL_JOIN_PARTS
from mvlog.sql.shape import ViewShape

KEY_MAP_NOTE = ("old view keys come from mvlog's key map (base keys -> view key), because the logs hold "
                "primary keys only")


@dataclass
class Capability:
    name: str
    possible: bool
    reason: str


@dataclass
class Explanation:
    view: str
    view_class: str
    refresh: str
    base_tables: list[str]
    key: list[str]
    capabilities: list[Capability] = field(default_factory=list)
    pg_views: list[str] = field(default_factory=list)  # PostgreSQL views the query reads, expanded
    upstreams: list[str] = field(default_factory=list)  # the project's views it reads, expanded
    dependents: list[str] = field(default_factory=list)  # the project's views that read it directly
    # The Delta table features the view's table has, each with why ("column mapping: column 'a b'").
    table_features: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        data = asdict(self)
        data["class"] = data.pop("view_class")
        return data


def affected_keys_how(shape: ViewShape) -> str:
    """How a fast refresh of ``shape`` finds the view rows to recompute (explain and plan say it)."""
    if shape.full_join:
        with_root, without = shape.branches
        return (f"a FULL JOIN is refreshed as two outer-join views that never share a row: the rows holding a row "
                f"of {with_root.tables[0].log.qualified_table} ({affected_keys_how(with_root)}), and the rows of "
                f"{without.tables[0].log.qualified_table} without a partner ({affected_keys_how(without)})")
    if shape.over_union:
        where = ("either part of the FULL JOIN (its LEFT JOIN, and its right side's rows without a partner)"
                 if FULL_JOIN_PARTS in shape.select_sql else
                 "any branch of the UNION ALL, UNION or SELECT DISTINCT it aggregates")
        return (f"the groups that changed rows of {where} fall in, before (each part's key map) and "
                f"after the change, are recomputed by the whole query, every part restricted to them")
    if shape.distinct:
        return ("UNION: the output rows that changed rows of any branch yield, before (each branch's key map) and "
                "after the change, are recomputed from every branch; a row goes when no branch yields it any more")
    if shape.branches:
        return "; ".join(f"UNION ALL branch {i} ({b.view_class.value}): {affected_keys_how(b)}"
                         for i, b in enumerate(shape.branches, 1))
    if shape.view_class is ViewClass.SIMPLE:
        return "changed keys are joined back to the table through its primary key"
    if shape.global_aggregate:
        return "a global aggregate is recomputed whenever any of its tables changed"
    if shape.partition_exprs:
        return ("the partitions (PARTITION BY " + ", ".join(shape.partition_exprs) + ") of changed rows, before "
                "and after the change, are recomputed whole, their window functions included; " + KEY_MAP_NOTE)
    what = "groups" if shape.view_class is ViewClass.AGGREGATE else "view rows"
    if shape.outer:
        root = shape.tables[0]
        semi = [t.log.qualified_table for t in shape.tables if t.semi]
        tied = (f"; rows of {', '.join(dict.fromkeys(semi))} count for the rows their subquery's condition ties them "
                f"to" if semi else "")
        return (f"rows of {root.log.qualified_table} (the root, present in every row) whose joined rows "
                f"hold a changed row, before or after the change, are found first{tied}; their {what}, before and "
                f"after, are recomputed exactly (a partner that appears or goes replaces a NULL-extended row); "
                + KEY_MAP_NOTE)
    if shape.view_class is ViewClass.AGGREGATE and shape.deltas is not None:
        extremes = ("; MIN/MAX = the extreme of the changed rows now and of the group's unchanged rows in the key map "
                    "(an index probe per group, exact after the current extreme is deleted)"
                    if shape.deltas.extremes else "")
        return ("by deltas: each affected group's " + ", ".join(shape.deltas.aggregates) + " = its state at the last "
                "refresh + what the changed rows contribute now - what they contributed then (kept per row in the "
                "key map, per group in mvlog." + shape.deltas.groups + ")" + extremes + ", computed in PostgreSQL")
    if shape.view_class is ViewClass.AGGREGATE:
        return ("the groups of changed rows, before and after the change, are recomputed exactly"
                + (f" ({shape.recompute_reason})" if shape.recompute_reason else "") + "; " + KEY_MAP_NOTE)
    return "view rows involving a changed row of any table are recomputed; " + KEY_MAP_NOTE


def explain(view: str, refresh: str, analysis: Analysis, shape: ViewShape | None, missing_logs: list[str],
            pg_views: Sequence[str] = ()) -> Explanation:
    """Capabilities of a view. ``shape`` is None when a base table has no log (``missing_logs``);
    ``pg_views``: the PostgreSQL views its query reads (``analysis`` is of the expanded query)."""
    tables = [t.display for t in analysis.tables]
    result = Explanation(view, (shape.view_class if shape else analysis.view_class).value, refresh, tables,
                         list(shape.key_columns) if shape else [], pg_views=list(pg_views))
    add = lambda name, ok, why: result.capabilities.append(Capability(name, ok, why))  # noqa: E731
    add("REFRESH_COMPLETE", True, "the query can always be recomputed and the Delta table replaced atomically")
    if missing_logs:
        why = "; ".join(f"table {t} has no materialized view log" for t in missing_logs)
        fast = False
    else:
        assert shape is not None  # None only when a table has no log
        if not shape.fast_possible:
            why, fast = "; ".join(shape.fast_reasons), False
        elif shape.view_class is ViewClass.SIMPLE:
            why, fast = "changed keys are joined back to the table through its primary key", True
        elif shape.global_aggregate:
            why, fast = "a global aggregate is recomputed whenever any of its tables changed", True
        else:
            why, fast = affected_keys_how(shape), True
    add("REFRESH_FAST", fast, why)
    add("REFRESH_FAST_AFTER_INSERT", fast, why if not fast else "inserts are handled like any change")
    add("REFRESH_FAST_AFTER_ONETAB_DML", fast, why if not fast else "DML on one table is handled like any change")
    any_dml = "inserts, updates (including primary-key updates) and deletes on every table"
    if shape is not None and shape.view_class is ViewClass.AGGREGATE and shape.deltas is None:
        any_dml += "; MIN and MAX stay exact after deletes because affected groups are recomputed"
    add("REFRESH_FAST_AFTER_ANY_DML", fast, why if not fast else any_dml)
    add("REFRESH_FAST_PCT", False, "partition change tracking does not apply: changes are tracked per primary key")
    return result
