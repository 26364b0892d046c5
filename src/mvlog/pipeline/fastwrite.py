"""A fast refresh's staged rows into the view's Delta table (by the write its plan chose), and what
those rows can spare the state's update (a part of :class:`mvlog.pipeline.refresh.Refresher`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mvlog.pipeline import plan as planner
from mvlog.pipeline.plan import RefreshPlan, Write
from mvlog.spark.warehouse import Staged, Warehouse, WriteCounts
from mvlog.sql.strategies.registry import strategy_of
from mvlog.sql.strategies.strategy import KeptKeys

# Staged rows up to which a fast read's rows are carried to the state's update (a composed view's
# keys: its whole result, small as a report's is; above, the update computes them again).
KEPT_ROWS_MAX = 200_000
# Rows a carrying read returned for the record's scratch tables, up to which they are collected to
# the driver and sent back (above, the record computes the pieces' reads again).
CARRIED_ROWS_MAX = 200_000


@dataclass(frozen=True)
class KeptRows:
    """What a fast read's rows give the state's update: ``keys``' statement and its parameters
    (None: the update computes the keys itself), and the rows of the record's scratch tables a
    carrying read returned (``carried``: their texts per table number, from 1; see
    :meth:`Strategy.carrying_read_sql`). Each is kept without the other."""

    keys: KeptKeys | None = None
    values: dict[str, list] | None = None
    carried: dict[int, list[str]] | None = None  # None: not carried (a table with none: no rows)


def write_staged(warehouse: Warehouse, plan: RefreshPlan, staged: Staged, metadata: dict, txn: tuple[str, int],
                 progress: Callable[[str], None]) -> WriteCounts:
    """The staged rows written by the plan's write (a rewrite, a key-only replace, or a MERGE when
    the keys cannot be replaced; after a whole read, a MERGE that also deletes the rows the query
    no longer has): one Delta commit."""
    if plan.whole_read is not None:
        return warehouse.merge(plan.location, staged, plan.key_columns, metadata, txn, plan.row_hash, whole=True)
    unreplaceable = warehouse.unreplaceable(staged) if plan.write is Write.REPLACE else None
    write = planner.write_for(plan.write, unreplaceable)
    if write is not plan.write:
        progress(f"{plan.view}: merged, not replaced by key ({unreplaceable})")
    if write is Write.REWRITE:
        return warehouse.rewrite(plan.location, staged, plan.key_columns, metadata, txn)
    if write is Write.REPLACE:
        return warehouse.replace_keys(plan.location, staged, plan.key_columns, metadata, txn)
    return warehouse.merge(plan.location, staged, plan.key_columns, metadata, txn, plan.row_hash)


def kept_rows(warehouse: Warehouse, plan: RefreshPlan, staged: Staged) -> KeptRows | None:
    """What the state's update can take from the staged rows (a composed view's keys: the query's
    rows now, which it would otherwise compute again, if they are few enough to carry; the rows
    its read carried for the scratch tables, however many the view's own rows are)."""
    kept = strategy_of(plan.shape).kept_keys(plan.since)
    if kept is None or staged.rows > KEPT_ROWS_MAX:
        return KeptRows(carried=staged.carried) if staged.carried is not None else None
    values = warehouse.present_values(staged, kept.columns)
    return KeptRows(kept, dict(zip(kept.parameters, values, strict=True)), staged.carried)
