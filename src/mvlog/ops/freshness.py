"""How far behind its tables a view is (its lag), and whether it keeps its ``freshness:`` target.

A view's lag is the time since the oldest change it has not applied *started*: each log row
carries its writer's ``transaction_timestamp()`` (``xact_time$$``), and the lag is now minus the
oldest of those among the rows of its logs after its stamp; 0 when nothing is pending. Measured
from the transaction's start, a long transaction counts from its beginning, so the lag is never
underestimated. Each refresh records the lag it ended (``refresh_history.oldest_change``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from mvlog.config import Config
from mvlog.model import LogInfo
from mvlog.postgres.catalog import Catalog, ViewStatusRow
from mvlog.postgres.logs import Logs
from mvlog.postgres.windows import Pending


class Freshness:
    """Lags of the views of one project, from its catalog and logs."""

    def __init__(self, config: Config, catalog: Catalog, logs: Logs):
        self.config = config
        self.catalog = catalog
        self.logs = logs

    def lag(self, last_snaptime: datetime | None, logs: list[LogInfo]) -> float | None:
        """Seconds since the oldest change after ``last_snaptime`` in ``logs`` started (0: none;
        None: the view was never refreshed)."""
        if last_snaptime is None:
            return None
        return _lag(self.logs.pending(logs, last_snaptime).oldest)

    def lags(self, names: list[str]) -> dict[str, float | None]:
        """The current lag of each named view (None: not built, or not registered)."""
        logs = self.logs.registered()
        rows = {row.name: row for row in self.catalog.view_status_rows() if row.name in names}
        return {name: self.lag(rows[name].last_snaptime, [logs[t] for t in rows[name].tables if t in logs])
                if name in rows else None for name in names}

    def status_fields(self, row: ViewStatusRow, pending: Pending) -> dict[str, Any]:
        """``mvlog status`` fields: the lag (from ``pending``, the view's unapplied changes), the
        target, and the worst lag of the last day (of the refreshes that finished in it, and now)
        against the target."""
        lag = None if row.last_snaptime is None else _lag(pending.oldest)
        try:
            target = self.config.view(row.name).freshness
        except KeyError:
            target = None
        day = self.catalog.lags_since(row.name, datetime.now(UTC) - timedelta(days=1))
        worst = max([*day, lag or 0.0])
        return {
            "lag_seconds": None if lag is None else round(lag, 3),
            "freshness_seconds": target.total_seconds() if target else None,
            "max_lag_last_day_seconds": round(worst, 3),
            "freshness_missed_last_day": (worst > target.total_seconds()) if target else None,
        }


def _lag(oldest: datetime | None) -> float:
    """Seconds since ``oldest`` (0: nothing pending)."""
    return max(0.0, (datetime.now(UTC) - oldest).total_seconds()) if oldest else 0.0
