"""The rows of mvlog's catalog as typed values: what a view's registration writes, what a refresh
starts from, what ``mvlog status`` and ``mvlog history`` show. Plain data; only the modules of
:mod:`mvlog.postgres.catalog` read and write the tables they come from.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from mvlog.model import LogInfo, RefreshMethod


@dataclass(frozen=True)
class ViewState:
    """What the catalog knows of a registered view between refreshes."""

    last_snaptime: datetime | None  # last_V: log rows up to it are consumed
    needs_complete: str | None  # why the next refresh must be complete, if it must
    row_count: int | None
    definition_hash: str
    output_signature: str | None  # the query's columns and types at the last complete refresh
    last_refresh_at: datetime | None
    read_at: datetime  # the database's clock when this state was read (before the view is checked)


@dataclass(frozen=True)
class ViewRegistration:
    """One view as ``mvlog apply`` registers it."""

    name: str
    query: str
    definition_hash: str
    location: str
    refresh: RefreshMethod
    view_class: str
    fast_reason: str | None
    group: str | None
    logs: tuple[LogInfo, ...]
    volatile: bool = False  # the query reads the clock or random numbers: never skipped as unchanged


@dataclass(frozen=True)
class ViewStatusRow:
    """A registered view as ``mvlog status`` starts from it."""

    name: str
    location: str
    refresh: str
    view_class: str
    fast_reason: str | None
    last_refresh_at: datetime | None
    last_method: str | None
    last_snaptime: datetime | None
    needs_complete: str | None
    row_count: int | None
    group: str | None
    tables: tuple[str, ...]  # qualified names of its logged base tables


@dataclass(frozen=True)
class LogStatusRow:
    """A log's size and backlog, for ``mvlog status``."""

    rows: int
    bytes: int
    oldest_unconsumed: datetime | None  # commit time of the oldest change some view has not consumed
    pinned_by: tuple[str, ...]  # views never refreshed: they keep every row of the log


@dataclass(frozen=True)
class HistoryRow:
    """One refresh of a view, as ``mvlog history`` shows it."""

    id: int
    started_at: datetime | None
    finished_at: datetime | None
    seconds: float | None
    status: str
    method: str | None
    reason: str | None
    snaptime: datetime | None
    keys_read: int | None
    rows_inserted: int | None
    rows_updated: int | None
    rows_deleted: int | None
    error: str | None
    delta_version: int | None = None  # the Delta version the view was left at (None: unknown, or failed)
    lag_seconds: float | None = None  # from the start of the oldest change applied to the finish

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("started_at", "finished_at", "snaptime"):
            data[key] = data[key].isoformat() if data[key] else None
        return data
