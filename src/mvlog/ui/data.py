"""What the dashboard shows, read from mvlog's catalog (through :class:`~mvlog.project.Project`,
on read-only sessions) and the Delta log (without a JVM). The JSON API serves these dicts as they
are: a view's fields are ``mvlog status --json``'s, a refresh's ``mvlog history --json``'s (one
serializer each), with the dashboard's own additions (``state``, ``latest_refresh``).

The overview (every view and table) is read by a thread of its own every ``interval`` seconds,
and pages are drawn from the last one read, so that a page of hundreds of views comes at once
whatever the catalog costs to read; a view's or a table's page reads its own details when asked.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from mvlog.config import Config
from mvlog.errors import MvlogError, redact
from mvlog.ops import deltalog
from mvlog.project import Project
from mvlog.ui import graph
from mvlog.ui.charts import Chart, chart
from mvlog.ui.states import view_state

log = logging.getLogger("mvlog.ui")
HISTORY_SHOWN = 50  # refreshes on a view's page (and points in its charts)


class Dashboard:
    """The dashboard's reads: the overview on a thread of its own, a page's details on request.

    ``connect`` makes a read-only :class:`Project`; the overview's thread and the pages each have
    one (a connection is used by one thread at a time), the pages' behind a lock."""

    def __init__(self, connect: Callable[[], Project], interval: float = 2.0):
        self._connect = connect
        self.interval = interval
        self._pages = connect()
        self._pages_lock = threading.Lock()
        self._overview: dict[str, Any] | None = None
        self._error: str | None = None
        self._failing_since: datetime | None = None  # the first of the reads failing now
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def config(self) -> Config:
        return self._pages.config

    def start(self) -> None:
        """Start reading the overview every ``interval`` seconds."""
        self._thread = threading.Thread(target=self._read_overviews, name="mvlog-ui-overview", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the overview's reads and close the pages' connections."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._pages_lock:
            self._pages.close()

    def _read_overviews(self) -> None:
        project: Project | None = None
        while not self._stop.is_set():
            try:
                project = project or self._connect()
                self._overview, self._error, self._failing_since = read_overview(project), None, None
            except MvlogError as exc:
                self._failed(str(exc))
            except Exception as exc:  # noqa: BLE001 — the reads go on; the page says the last one failed
                log.exception("the dashboard could not read the overview")
                self._failed(f"the overview could not be read ({type(exc).__name__}); see the server's log")
                if project is not None:
                    project.close()
                project = None  # its connections may be gone: connect again
            self._ready.set()
            self._stop.wait(self.interval)
        if project is not None:
            project.close()

    def _failed(self, error: str) -> None:
        self._error = error
        self._failing_since = self._failing_since or datetime.now(UTC)

    def overview(self, timeout: float = 60.0) -> dict[str, Any]:
        """The last overview read (waiting for the first), with ``error``: why the last read failed,
        and ``error_since``: when the reads began to fail (PostgreSQL stopped answering at …)."""
        self._ready.wait(timeout)
        data = dict(self._overview or {"views": [], "logs": [], "captures": [], "as_of": None})
        data["error"] = self._error
        data["error_since"] = self._failing_since.isoformat() if self._failing_since else None
        return data

    def layout(self, overview: dict[str, Any]) -> graph.Layout:
        """The graph of an overview."""
        return graph.layout([log["table"] for log in overview["logs"]],
                            {v["name"]: (v["base_tables"], v["upstreams"]) for v in overview["views"]})

    def view(self, name: str) -> dict[str, Any] | None:
        """A view's page: its status, state, explanation, Delta table, history and last verify; None if unknown."""
        status = next((v for v in self.overview()["views"] if v["name"] == name), None)
        if status is None:
            return None
        with self._pages_lock:
            project = self._pages
            history = [row.to_json() for row in project.history(name, HISTORY_SHOWN)]
            try:
                explanation: dict[str, Any] | None = project.explain(name).to_json()
            except MvlogError as exc:
                explanation, status = None, {**status, "explain_error": str(exc)}
            verify = project.catalog.last_verify([name]).get(name)
        return {**status, "query": _query(project, name), "explain": explanation,
                "delta": _delta(project, status["location"]), "history": history, "verify": verify}

    def table(self, name: str) -> dict[str, Any] | None:
        """A table's page: its log, its capture, the DDL recorded on it and the views reading it; None if unknown."""
        overview = self.overview()
        log = next((lg for lg in overview["logs"] if lg["table"] == name), None)
        if log is None:
            return None
        with self._pages_lock:
            project = self._pages
            info = project.logs.registered().get(name)
            ddl = project.catalog.ddl_since([info.table_oid], None) if info is not None else []
        return {**log, "captures": overview["captures"] if log["capture"] != "trigger" else [],
                "ddl": [{"logged_at": at.isoformat(), "command": tag, "object": what} for at, tag, what in ddl],
                "views": [v["name"] for v in overview["views"] if name in v["base_tables"]]}

    @staticmethod
    def charts(page: dict[str, Any]) -> list[Chart]:
        """A view page's charts: refresh seconds, and lag against the target, one point per refresh."""
        rows = list(reversed(page["history"]))
        labels = [f"#{r['id']} {(r['started_at'] or '')[:19].replace('T', ' ')}" for r in rows]
        return [chart("Refresh seconds", "s", list(zip(labels, [r["seconds"] for r in rows]))),
                chart("Lag when the refresh ended", "s", list(zip(labels, [r["lag_seconds"] for r in rows])),
                      page.get("freshness_seconds"))]


def read_overview(project: Project) -> dict[str, Any]:
    """Every view (``status --json``'s fields, with its ``state`` and ``latest_refresh``) and
    every log and capture, as of now."""
    started = time.monotonic()
    data = project.status()
    latest = project.catalog.latest_refreshes([v["name"] for v in data["views"]])
    for view in data["views"]:
        row = latest.get(view["name"])
        view["latest_refresh"] = row.to_json() if row is not None else None
        view["state"] = view_state(view, view["latest_refresh"]).name
    data["as_of"] = datetime.now(UTC).isoformat()
    data["read_seconds"] = round(time.monotonic() - started, 3)
    return data


def _query(project: Project, name: str) -> str | None:
    try:
        return project.config.view(name).query
    except KeyError:
        return None


def _delta(project: Project, location: str) -> dict[str, Any] | None:
    """The view's Delta table as its log says (None: not written yet); ``error`` when unreadable."""
    try:
        filesystem = deltalog.filesystem_for(project.config.warehouse_uri, project.config.spark.conf)
        summary = deltalog.read_summary(location, filesystem)
    except (MvlogError, OSError) as exc:
        return {"error": redact(str(exc), project.secrets)}
    return summary.to_json() if summary is not None else None
