"""Refresh planning: from a view's shape and its state to a :class:`RefreshPlan`.

A plan is plain data — method, reason, window, key columns and the SQL to push down
to PostgreSQL — so it can be printed and tested without Spark or a database. It is
decided before anything is read (:func:`plan_refresh`); what the stamp reveals (a
truncated table, a large window) and how a complete read is split are pure functions
that return a new plan (:func:`after_stamp`, :func:`with_partitions`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from sqlglot import exp

from mvlog.config import ViewConfig
from mvlog.errors import RefreshRefused
from mvlog.model import NOT_BUILT, ROW_HASH_COLUMN, ColumnStats, FleetCost, LogInfo, Measured, RefreshMethod, WindowSize
from mvlog.pipeline import cost, readform, readscope
from mvlog.sql.generate import aggdelta, sqlgen
from mvlog.sql.parse.sqltree import sql_text
from mvlog.sql.pieces.shape import ViewShape, col
from mvlog.sql.rewrite import decorrelate
from mvlog.sql.strategies.registry import strategy_of

ROWS_PER_PARTITION = 500_000  # a complete refresh reads (and writes files of) about this many rows per partition
MAX_PARTITIONS = 64


class Write(StrEnum):
    """How a fast refresh writes its changed keys into the view's Delta table: one commit each."""

    MERGE = "merge"  # a Delta MERGE on the key
    REWRITE = "rewrite"  # the (small) table rewritten whole
    REPLACE = "replace"  # replaceWhere on the changed keys: a delete by the key columns and the new rows


WRITE_TEXT = {
    Write.MERGE: "one Delta MERGE of the affected keys",
    Write.REWRITE: "the table rewritten whole (a small view without a change feed)",
    Write.REPLACE: "the changed keys' rows replaced in one commit (replaceWhere on the key columns)",
}

WHOLE_WRITE_TEXT = "one Delta MERGE of the whole query's rows, deleting the rows it no longer has"


@dataclass(frozen=True)
class RefreshPlan:
    """One refresh of one view, decided before anything is read or written."""

    view: str
    location: str
    method: RefreshMethod  # FAST or COMPLETE
    reason: str
    logs: tuple[LogInfo, ...]
    since: datetime | None  # last_V: consume log rows with since < snaptime$$ <= S (the new stamp)
    key_columns: tuple[str, ...]
    shape: ViewShape
    partitions: tuple[str, ...] = ()  # complete refresh: one JDBC read per WHERE clause (empty: one read)
    row_hash: bool = True  # fast refresh: the Delta table stores row hashes (written before they existed: False)
    write: Write = Write.MERGE  # fast refresh: how the changed keys are written (see with_sized_write)
    window_keys: int | None = None  # force: the distinct keys the window changed (recorded: what it cost)
    requested: RefreshMethod = RefreshMethod.FORCE  # what was asked (the view's refresh:, or --complete)
    whole_read: str | None = None  # fast refresh: why it reads the view's whole query (None: its changed keys')

    def read_sql(self, null_keys: tuple[bool, ...] = ()) -> str:
        """The SQL whose rows the refresh reads from PostgreSQL, at the snapshot its stamp was taken in.

        ``null_keys``: per aggregate (the view, or each UNION ALL branch), whether its keys are
        matched null-safely too (see :meth:`mvlog.sql.strategies.strategy.Strategy.null_safe`).
        """
        if self.method is RefreshMethod.COMPLETE:
            return self.shape.select_sql
        if self.whole_read is not None:
            return sqlgen.whole_rows_sql(self.shape)
        return strategy_of(self.shape).read_sql(self.since, null_keys)

    def to_json(self) -> dict:
        """The plan as ``mvlog plan --json`` prints it (docs/json.md)."""
        key = self.shape.range_key
        return {
            "view": self.view, "method": self.method.value, "reason": self.reason, "location": self.location,
            "logs": [log.qualified_table for log in self.logs], "key": list(self.key_columns),
            "since": self.since.isoformat() if self.since else None,
            "partition_column": key.column if self.partitions and key else None,
            "partitions": list(self.partitions),
            # aggregate views: the aggregates kept by deltas, or why affected groups are recomputed
            "aggregate_deltas": list(self.shape.deltas.aggregates) if self.shape.deltas else None,
            "groups_recomputed": self.shape.recompute_reason,
            "write": None if self.method is RefreshMethod.COMPLETE else
            Write.MERGE.value if self.whole_read else self.write.value,
            # fast refresh: the changed keys' rows ("keys") or the view's whole query ("whole"), and why
            "read": None if self.method is RefreshMethod.COMPLETE else "whole" if self.whole_read else "keys",
            "read_reason": self.whole_read,
        }

    def describe(self) -> str:
        window = f"({self.since.isoformat() if self.since else '-infinity'}, S]"
        lines = [
            f"view {self.view} -> {self.location}",
            f"  method: {self.method} ({self.reason})",
            f"  logs: {', '.join(log.qualified_table for log in self.logs) or '-'}",
            f"  key: {', '.join(self.key_columns) or '-'}",
        ]
        if self.method is RefreshMethod.FAST:
            lines.append(f"  window: snaptime$$ in {window}")
            lines.append(f"  affected: {strategy_of(self.shape).how()}")
            if self.whole_read is not None:
                lines.append(f"  read: the whole query, its rows compared with the table's by one MERGE "
                             f"({self.whole_read})")
            lines.append(f"  write: {WRITE_TEXT[self.write] if self.whole_read is None else WHOLE_WRITE_TEXT}")
        elif self.partitions and self.shape.range_key:
            lines.append(f"  read: {len(self.partitions)} partitions by ranges of {self.shape.range_key.column}")
        if inlined := readform.inlined(self.shape.select_sql, self.read_sql()).inlined:  # as the refresh sends it
            lines.append(f"  read: CTE {', '.join(inlined)} inlined (NOT MATERIALIZED: every reference restricted "
                         f"by a constant)")
        if decorrelate.joined_form(self.read_sql()) is not None:
            lines.append("  read: as written, or its correlated aggregates joined where PostgreSQL estimates that "
                         "cheaper")
        return "\n".join(lines)


def requested_method(view: ViewConfig, complete: Collection[str]) -> RefreshMethod:
    """The method asked of a view's refresh: complete for the views named in ``complete`` (the
    views a ``--complete`` asked for), else the method its ``refresh:`` declares."""
    return RefreshMethod.COMPLETE if view.name in complete else view.refresh


def plan_refresh(
    shape: ViewShape,
    location: str,
    requested: RefreshMethod,
    since: datetime | None,
    needs_complete: str | None,
    table_exists: bool,
    row_hash: bool = True,
) -> RefreshPlan:
    """Decide fast or complete, and why (Oracle's FAST / COMPLETE / FORCE). ``row_hash``: the
    Delta table stores row hashes (see :class:`RefreshPlan`)."""

    def plan(method: RefreshMethod, reason: str) -> RefreshPlan:
        keys = shape.key_columns
        return RefreshPlan(shape.name, location, method, reason, shape.logs, since, keys, shape, row_hash=row_hash,
                           requested=requested)

    if requested is RefreshMethod.COMPLETE:
        return plan(RefreshMethod.COMPLETE, NOT_BUILT if since is None else "complete refresh requested")
    blocker = None
    if not shape.fast_possible:
        blocker = "; ".join(shape.fast_reasons)
    elif since is None or not table_exists:
        blocker = NOT_BUILT if since is None else "the Delta table is missing"
    elif needs_complete:
        blocker = needs_complete
    if blocker is None:
        return plan(RefreshMethod.FAST, "changed keys since the last refresh")
    if requested is RefreshMethod.FAST:
        raise RefreshRefused(f"view {shape.name} cannot be fast-refreshed: {blocker}", blocker)
    return plan(RefreshMethod.COMPLETE, blocker)


def with_sized_write(plan: RefreshPlan, row_count: int | None, change_feed: bool, rewrite_max_rows: int
                     ) -> RefreshPlan:
    """How a fast plan writes (:class:`Write`). A view with a change feed is merged, so that its
    readers see updates as updates; so is a table written before row hashes, whose unchanged
    rows only a MERGE can tell. Else the table is rewritten whole when it held at most
    ``rewrite_max_rows`` rows after its last refresh (``row_count``), and its changed keys are
    replaced (a delete by the key columns and the new rows in one commit) when it is larger:
    at 10M rows and 2,000 random keys, 2.6x / 4.0x faster than complete against 1.7x / 2.2x
    for a MERGE, without / with deletion vectors (docs/benchmarks-history.md session 32)."""
    write = Write.MERGE
    if plan.method is RefreshMethod.FAST and plan.row_hash and not change_feed:
        small = row_count is not None and row_count <= rewrite_max_rows
        write = Write.REWRITE if small else Write.REPLACE
    return dataclasses.replace(plan, write=write)


def with_read_scope(plan: RefreshPlan, measured: Sequence[Measured], row_count: int | None) -> RefreshPlan:
    """What a fast plan reads (:func:`mvlog.pipeline.readscope.whole_read`): its changed keys' rows,
    or its view's whole query where the view's refreshes measured that cheaper — never for a view
    whose record takes rows from its keyed read (a composed view: without them its record computes
    its pieces' reads again, TPC-DS q23's 0.9 s of them 149.9 s, BENCHMARKS.md session 66)."""
    if plan.method is not RefreshMethod.FAST or strategy_of(plan.shape).record_takes_read():
        return plan
    return dataclasses.replace(plan, whole_read=readscope.whole_read(measured, row_count))


def group_tables(shape: ViewShape) -> list[str]:
    """The group tables an aggregate kept by deltas (or each such UNION ALL branch) keeps its state in."""
    return [sql_text(aggdelta.groups_table(s)) for s in (shape, *shape.branches) if s.deltas is not None]


def without_missing_groups(plan: RefreshPlan, group_tables: Mapping[str, Sequence[str]]) -> RefreshPlan:
    """A fast plan of an aggregate kept by deltas (or of a UNION ALL branch) whose group table
    is missing or stale (built before aggregate deltas; ``group_tables``: their columns when the
    refresh was planned): its groups are recomputed until a complete refresh builds the state."""
    if plan.method is not RefreshMethod.FAST:
        return plan

    def kept(shape: ViewShape) -> ViewShape:
        if shape.deltas is None:
            return shape
        return aggdelta.kept_by_deltas(shape, group_table=group_tables.get(
            sql_text(aggdelta.groups_table(shape)), []))

    shape = kept(plan.shape)
    if shape.branches:
        shape = dataclasses.replace(shape, branches=tuple(kept(b) for b in shape.branches))
    return plan if shape == plan.shape else dataclasses.replace(plan, shape=shape)


def write_for(planned: Write, unreplaceable: str | None) -> Write:
    """The write of a fast refresh once its rows are read: a planned :data:`Write.REPLACE` merges
    when the changed keys cannot be named in its predicate (``unreplaceable`` says why)."""
    return Write.MERGE if planned is Write.REPLACE and unreplaceable else planned


def needs_complete(recorded: str | None, key_changed: Sequence[str], columns_changed: bool,
                   last_ddl: tuple[str, str] | None, redefined: str | None = None) -> str | None:
    """Why the next refresh must be complete, or None: a recorded reason, a base table whose
    primary key changed, a PostgreSQL view the query reads that was redefined (``redefined``), or
    query columns that differ from the last complete refresh's (``last_ddl``: the newest DDL on
    its tables since then, as command tag and object)."""
    if recorded:
        return recorded
    if key_changed:
        return f"the primary key of {key_changed[0]} changed"
    if redefined:  # PostgreSQL's views by qualified name, the project's by plain name
        return f"{'PostgreSQL view' if '.' in redefined else 'view'} {redefined} was redefined"
    if columns_changed:
        what = f" ({last_ddl[0]} on {last_ddl[1]})" if last_ddl else ""
        return f"the columns of its query changed{what}"
    return None


def schema_drift(location: str, table_columns: Sequence[str] | None, expected: Sequence[str]) -> str | None:
    """Why the Delta table cannot be merged into: its columns are not the ones the view's read
    produces (``table_columns`` None: there is no table, which the plan handles itself)."""
    if table_columns is not None and sorted(c for c in table_columns if c != ROW_HASH_COLUMN) != sorted(expected):
        return f"the columns of {location} differ from the query's columns"
    return None


def delta_fit(location: str, columns: Sequence[str] | None, expected: Sequence[str]) -> tuple[bool, bool, str | None]:
    """The view's Delta table (its ``columns``, None: there is none) for a fast refresh: whether it
    exists, whether it stores row hashes, and why its columns keep the refresh out (or None)."""
    return (columns is not None, columns is None or ROW_HASH_COLUMN in columns,
            schema_drift(location, columns, expected))


def after_stamp(plan: RefreshPlan, replaced: Sequence[str], windows: Sequence[WindowSize],
                measured: Sequence[Measured] = (), rows: int | None = None,
                fleet: Sequence[FleetCost] = ()) -> RefreshPlan:
    """A fast plan, looked at again once the window is known, by what was requested
    (``plan.requested``): rows changed in ways the logs could not record key by key
    (``replaced``: why, e.g. a table truncated) need a complete refresh (a ``fast`` view
    refuses); a ``force`` view takes the method predicted cheaper for this window from what its
    own refreshes cost (``measured``; the view holds ``rows``) and, for a method it never ran, what
    the other views' cost (``fleet``), by
    :func:`mvlog.pipeline.cost.choose`, and says why with both predictions."""
    if plan.method is not RefreshMethod.FAST:
        return plan
    if replaced:
        reason = replaced[0]
        if plan.requested is RefreshMethod.FAST:
            raise RefreshRefused(f"view {plan.view} cannot be fast-refreshed: {reason}; "
                                 f"run 'mvlog refresh --complete {plan.view}'", reason)
        return dataclasses.replace(plan, method=RefreshMethod.COMPLETE, reason=reason)
    if plan.requested is not RefreshMethod.FORCE or not windows:
        return plan
    choice = cost.choose(measured, windows, rows, plan.shape.view_class.value, fleet)
    keys = sum(window.changed_keys for window in windows)
    return dataclasses.replace(plan, method=RefreshMethod.COMPLETE if choice.complete else RefreshMethod.FAST,
                               reason=choice.reason, window_keys=None if choice.complete else keys)


def with_partitions(plan: RefreshPlan, stats: ColumnStats | None) -> RefreshPlan:
    """A complete refresh's plan with its read split by ranges of the view's first key column."""
    if plan.method is not RefreshMethod.COMPLETE or plan.shape.range_key is None:
        return plan
    return dataclasses.replace(plan, partitions=partition_predicates(plan.shape, stats))


def partition_predicates(shape: ViewShape, stats: ColumnStats | None) -> tuple[str, ...]:
    """How a complete refresh of ``shape`` splits its read: WHERE clauses on the view's first key
    column, one per partition of about ROWS_PER_PARTITION view rows; () to read in one piece.

    The bounds only balance the partitions; any bounds give a correct, complete read."""
    if shape.range_key is None or stats is None or len(stats.histogram) < 3:
        return ()
    rows = stats.distinct if shape.range_key.grouped else stats.rows
    buckets = len(stats.histogram) - 1
    wanted = min(MAX_PARTITIONS, math.ceil(rows / ROWS_PER_PARTITION), buckets)
    if wanted < 2:
        return ()
    splits = list(dict.fromkeys(stats.histogram[round(i * buckets / wanted)] for i in range(1, wanted)))
    return tuple(range_predicates(shape.range_key.column, splits))


def range_predicates(column: str, splits: list[str]) -> list[str]:
    """WHERE clauses cutting a view's rows into ``len(splits) + 1`` disjoint ranges of ``column``
    that together hold every row (NULLs in the first). ``splits`` are ascending values in
    PostgreSQL's text form; as untyped literals they take the column's type."""
    if not splits:
        return []
    column_ref = col(column)

    def value(text: str) -> exp.Literal:
        return exp.Literal.string(text)

    predicates: list[exp.Condition] = [
        exp.or_(exp.LT(this=column_ref.copy(), expression=value(splits[0])),
                exp.Is(this=column_ref.copy(), expression=exp.Null()))
    ]
    for low, high in zip(splits, splits[1:]):
        predicates.append(exp.and_(exp.GTE(this=column_ref.copy(), expression=value(low)),
                                   exp.LT(this=column_ref.copy(), expression=value(high))))
    predicates.append(exp.GTE(this=column_ref.copy(), expression=value(splits[-1])))
    return [sql_text(p) for p in predicates]
