"""Prometheus metrics of ``mvlog schedule --metrics-port N`` (served by ``prometheus_client``).

Counters follow every refresh the scheduler runs; gauges (lag, log backlog) are brought up to
date by the scheduler's loop at most every ``GAUGE_SECONDS``, never by a scrape, so a scrape
costs the database nothing and never shares the scheduler's connection.

    mvlog_view_lag_seconds{view}                     since the oldest unapplied change started
    mvlog_view_freshness_target_seconds{view}        the view's freshness target, if it has one
    mvlog_view_last_refresh_seconds{view}            how long the last refresh took
    mvlog_view_last_refresh_timestamp_seconds{view}  when it finished (Unix time)
    mvlog_refreshes_total{view,method,status}        status: ok, failed, skipped
    mvlog_refresh_keys_read_total{view}              view keys read by fast refreshes (rows by complete)
    mvlog_refresh_rows_total{view,change}            change: inserted, updated, deleted
    mvlog_log_rows{table}, mvlog_log_bytes{table}    a log's backlog: rows not yet purged, and its size
    mvlog_log_oldest_change_age_seconds{table}       age of the oldest change some view has not consumed
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from mvlog.errors import MvlogError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from mvlog.config import ViewConfig
    from mvlog.ops.freshness import Freshness
    from mvlog.ops.status import Status
    from mvlog.pipeline.results import RefreshResult

GAUGE_SECONDS = 5.0


class SchedulerMetrics:
    """The scheduler's metrics, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.lag = Gauge("mvlog_view_lag_seconds", "Seconds since the oldest change the view has not applied started",
                         ["view"], registry=r)
        self.target = Gauge("mvlog_view_freshness_target_seconds", "The view's freshness target", ["view"], registry=r)
        self.duration = Gauge("mvlog_view_last_refresh_seconds", "Seconds the view's last refresh took", ["view"],
                              registry=r)
        self.finished = Gauge("mvlog_view_last_refresh_timestamp_seconds", "When the view's last refresh finished",
                              ["view"], registry=r)
        self.refreshes = Counter("mvlog_refreshes", "Refreshes by method and outcome (ok, failed, skipped)",
                                 ["view", "method", "status"], registry=r)
        self.keys = Counter("mvlog_refresh_keys_read", "View keys read by refreshes", ["view"], registry=r)
        self.rows = Counter("mvlog_refresh_rows", "View rows changed by refreshes", ["view", "change"], registry=r)
        self.log_rows = Gauge("mvlog_log_rows", "Rows in the table's log", ["table"], registry=r)
        self.log_bytes = Gauge("mvlog_log_bytes", "Size of the table's log, with its TOAST", ["table"], registry=r)
        self.log_age = Gauge("mvlog_log_oldest_change_age_seconds",
                             "Age of the oldest change in the log some view has not consumed", ["table"], registry=r)
        self._gauges_at = 0.0

        self.slot_retained = Gauge("mvlog_capture_retained_bytes",
                                   "WAL the logical capture's replication slot keeps from being removed", ["slot"],
                                   registry=r)
        self.slot_lag = Gauge("mvlog_capture_lag_bytes", "WAL written since the logical capture's position",
                              ["slot"], registry=r)
        self.slot_lag_seconds = Gauge("mvlog_capture_lag_seconds",
                                      "Seconds since the logical capture last wrote its position while behind",
                                      ["slot"], registry=r)
        self.slot_lost = Gauge("mvlog_capture_slot_lost", "1 if PostgreSQL invalidated the capture's slot",
                               ["slot"], registry=r)

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        """Serve ``/metrics`` on ``host:port`` from a daemon thread."""
        try:
            start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise MvlogError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None

    def observe(self, result: RefreshResult) -> None:
        """Count one refresh result."""
        view = result.view
        status = "failed" if result.error else "skipped" if result.skipped else "ok"
        self.refreshes.labels(view, result.method or "-", status).inc()
        if status != "ok":
            return
        self.duration.labels(view).set(result.seconds)
        self.finished.labels(view).set(time.time())
        self.keys.labels(view).inc(result.keys_read)
        for change, n in (("inserted", result.rows_inserted), ("updated", result.rows_updated),
                          ("deleted", result.rows_deleted)):
            self.rows.labels(view, change).inc(n)

    def update_gauges(self, views: Sequence[ViewConfig], freshness: Freshness, status: Status,
                      force: bool = False) -> None:
        """Lag per view (from ``freshness``) and backlog per log (from ``status``), at most every
        GAUGE_SECONDS."""
        if not force and time.monotonic() - self._gauges_at < GAUGE_SECONDS:
            return
        self._gauges_at = time.monotonic()
        for name, lag in freshness.lags([v.name for v in views]).items():
            if lag is not None:
                self.lag.labels(name).set(lag)
        for view in views:
            if view.freshness is not None:
                self.target.labels(view.name).set(view.freshness.total_seconds())
        for log in status.log_rows():
            self.log_rows.labels(log["table"]).set(log["rows"])
            self.log_bytes.labels(log["table"]).set(log["bytes"])
            self.log_age.labels(log["table"]).set(log["oldest_unconsumed_age_seconds"] or 0.0)
        for slot in status.captures():
            self.slot_retained.labels(slot["slot"]).set(slot["retained_bytes"])
            self.slot_lag.labels(slot["slot"]).set(slot["lag_bytes"])
            self.slot_lag_seconds.labels(slot["slot"]).set(slot["lag_seconds"] or 0.0)
            self.slot_lost.labels(slot["slot"]).set(1.0 if slot["wal_status"] == "lost" else 0.0)
