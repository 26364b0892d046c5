"""The catalog facts every layer shares, as plain data: no driver, no Spark.

Tables and their primary keys, materialized view logs, column statistics, the names
of mvlog's own columns, the refresh method, and what a view's warehouse location holds.
The adapters (:mod:`mvlog.postgres.source`, :mod:`mvlog.postgres.catalog`,
:mod:`mvlog.spark.warehouse`) build and consume these; the pure layers
(:mod:`mvlog.sql.pieces.shape`, :mod:`mvlog.sql.generate.sqlgen`, :mod:`mvlog.pipeline.plan`) only read them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from mvlog.errors import SourceError

MVLOG_SCHEMA = "mvlog"  # the PostgreSQL schema holding mvlog's catalog, logs and key maps
HIDDEN_PREFIX = "_mvlog_"  # Delta columns mvlog adds to a view (hidden keys); reserved in view queries
PRESENT = "_mvlog_present"  # fast reads: NULL where an affected key has no view row any more
CHANGED_KEY_PREFIX = "_mvlog_key_"  # fast reads: the affected view key, one column per key column
# Delta: a hash of each view row's other columns, written with the row, so that a MERGE can tell
# an unchanged row from a changed one by reading this one column instead of every column.
ROW_HASH_COLUMN = "_mvlog_row_hash"
NOT_BUILT = "the view has not been built yet"  # the reason of a view's first refresh, its build
SENTINEL = "4000-01-01 00:00:00+00"  # snaptime$$ of log rows not stamped yet
SENTINEL_TIME = datetime.fromisoformat(SENTINEL)
SNAPSHOT_ID = re.compile(r"^[0-9A-F]+-[0-9A-F]+(-[0-9]+)?$")


UNCHANGED: Final = "fresh"  # what a refresh that found nothing to apply records as its method (no plan, no Spark)


class RefreshMethod(StrEnum):
    """Oracle's refresh methods: what a view asks for (``force``: fast when possible), and what
    a plan does (``fast`` or ``complete``)."""

    FAST = "fast"
    COMPLETE = "complete"
    FORCE = "force"


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # format_type(), e.g. "numeric(12,2)"
    not_null: bool = False


@dataclass(frozen=True)
class TableInfo:
    """A base table as the catalog describes it."""

    schema: str
    name: str
    oid: int
    columns: tuple[Column, ...]
    key: tuple[Column, ...]  # primary-key columns in key order; empty if none

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"


@dataclass(frozen=True)
class LogInfo:
    """A registered materialized view log: table ``mvlog.<log_name>`` on a base table."""

    table_schema: str
    table_name: str
    log_name: str
    key_columns: tuple[str, ...]
    key_types: tuple[str, ...]
    table_oid: int
    # Who fills it: "trigger", "logical" (the capture step), or "handover" (triggers again, while the
    # capture still writes rows of transactions from before the switch); see mvlog.postgres.capture.
    capture: str = field(default="trigger", compare=False)

    @property
    def qualified_table(self) -> str:
        return f"{self.table_schema}.{self.table_name}"

    @classmethod
    def for_table(cls, table: TableInfo, log_name: str) -> LogInfo:
        """The log ``log_name`` of ``table``, keyed by the table's primary key."""
        return cls(table.schema, table.name, log_name, tuple(c.name for c in table.key),
                   tuple(c.type for c in table.key), table.oid)


@dataclass(frozen=True)
class ColumnStats:
    """PostgreSQL's statistics of one base-table column (pg_stats, pg_class)."""

    histogram: tuple[str, ...]  # equal-population bucket bounds, ascending, in text form
    rows: float  # the table's estimated rows
    distinct: float  # estimated distinct values


def log_name_for(table: TableInfo) -> str:
    """A readable, unique, ASCII log table name: mlog$_<table>_<oid>."""
    stem = re.sub(r"[^a-z0-9_]+", "_", table.name.lower()).strip("_")[:36] or "t"
    return f"mlog$_{stem}_{table.oid}"


def checked_snapshot_id(snapshot: str) -> str:
    """``snapshot`` if it has the form of a PostgreSQL exported snapshot id (it is pasted into
    JDBC session statements), else SourceError."""
    if not SNAPSHOT_ID.match(snapshot):
        raise SourceError(f"unexpected snapshot id {snapshot!r}")
    return snapshot


# Delta's data file names; a first build that died before its commit leaves only these.
DELTA_DATA_FILE = re.compile(r"/part-\d{5}-[0-9a-f-]{36}[^/]*\.parquet$")
FOREIGN_FILES_SHOWN = 3  # files named when a location holds something else


@dataclass(frozen=True)
class Occupant:
    """What a view's location holds: a Delta table (``view``: the view mvlog's commit metadata
    says it was written for; None: not written by mvlog), other files (a few of their paths), or
    nothing (both empty)."""

    delta: bool = False
    view: str | None = None
    mvlog: bool = False  # some recent commit carries mvlog's metadata (older versions named no view in some)
    files: tuple[str, ...] = ()
    detail: dict[str, Any] | None = field(default=None, compare=False)  # the Delta table's DESCRIBE DETAIL

    def refusal(self, view: str, location: str, registered_here: bool = False,
                build_started: bool = False) -> str | None:
        """Why mvlog must not write ``view`` at ``location``, or None: it writes only where nothing,
        or the view's own Delta table, is. ``registered_here``: the catalog has the view at this
        location, so a table mvlog wrote without naming the view is its own. ``build_started``:
        besides, its first build has not finished, so Delta data files without a log are that build's."""
        if self.delta:
            if self.view == view or (self.view is None and self.mvlog and registered_here):
                return None
            whose = f"view {self.view}'s Delta table" if self.view else "a Delta table that mvlog did not write"
            return f"{location} holds {whose}, not view {view}'s"
        if not self.files or (build_started and all(DELTA_DATA_FILE.search(f) for f in self.files)):
            return None
        shown = ", ".join(f.rsplit("/", 1)[-1] for f in self.files)
        more = ", ..." if len(self.files) >= FOREIGN_FILES_SHOWN else ""
        return f"{location} is not empty and holds no Delta table ({shown}{more})"


@dataclass(frozen=True)
class WindowSize:
    """How much of one base table a refresh window changed."""

    table: str
    changed_keys: int
    table_rows: float  # the planner's estimate (pg_class.reltuples); <= 0 when unknown


@dataclass(frozen=True)
class Measured:
    """What one succeeded refresh of a view cost (:mod:`mvlog.pipeline.cost` predicts the next from these)."""

    method: RefreshMethod  # FAST or COMPLETE
    seconds: float
    window_keys: int | None  # distinct keys its window changed (fast refreshes of force views)
    rows: int | None  # rows of the view it left
    build: bool = False  # the view's first refresh (its table created, its state built)
    first_after_build: bool = False  # its method's first refresh after the build, the build apart (caches, plans cold)
    phases: Mapping[str, float] = field(default_factory=dict)  # seconds by phase (none before catalog version 9)


@dataclass(frozen=True)
class FleetCost:
    """What another view's refreshes cost, for predicting a method a view has not run yet
    (:func:`mvlog.pipeline.cost.choose`): medians of its latest fast and complete refreshes (its
    build apart) and its latest build's seconds; None where not measured."""

    view_class: str
    fast: float | None
    complete: float | None
    build: float | None
