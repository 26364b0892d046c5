"""What ``mvlog status`` reports: each view's staleness, pending changes and freshness, and each
log's size, oldest unconsumed change and the views that pin it; and the Delta version that holds a
view as of a source time (``read_view(…, as_of=…)``, from the refresh history).

Read-only: the catalog's rows, the logs' pending counts and the compiler's checks (a view whose
base tables changed shape is "invalid" or "needs_complete" before its next refresh says so).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from mvlog.config import ViewConfig
from mvlog.errors import RefreshError, UsageError, WarehouseError
from mvlog.model import LogInfo
from mvlog.ops.freshness import Freshness
from mvlog.pipeline.parts import ProjectParts, ProjectWorker


class Status(ProjectWorker):
    """The status of one project's views and logs."""

    def __init__(self, parts: ProjectParts, freshness: Freshness):
        super().__init__(parts)
        self.freshness = freshness

    def report(self) -> dict[str, Any]:
        """Views (staleness, pending changes, rows) and logs (size, oldest unconsumed change)."""
        logs = self.logs.registered()
        graph = self.compiler.graph
        views = []
        rows = self.catalog.view_status_rows()
        state = self.catalog.state_sizes([row.name for row in rows])
        for row in rows:
            pending = self.logs.pending([logs[t] for t in row.tables if t in logs], row.last_snaptime)
            needs, invalid = row.needs_complete, None
            try:
                view = self.config.view(row.name)
                needs = needs or self.compiler.needs_complete(self.catalog.view_state(row.name),
                                                               self.compiler.check(view))
            except KeyError:
                pass  # registered, but no longer in this configuration
            except RefreshError as exc:
                invalid = str(exc)
            if invalid:
                staleness, needs = "invalid", invalid
            elif needs or row.last_snaptime is None:
                staleness = "needs_complete"
            elif pending.rows:
                staleness = "stale"
            else:
                staleness = "fresh"
            views.append({
                "name": row.name, "location": row.location, "refresh": row.refresh, "class": row.view_class,
                "fast_refresh": row.fast_reason is None, "why_not_fast": row.fast_reason, "group": row.group,
                "last_refresh": row.last_refresh_at.isoformat() if row.last_refresh_at else None,
                "last_method": row.last_method, "staleness": staleness, "needs_complete_reason": needs,
                "pending_log_rows": pending.rows, "rows": row.row_count, "base_tables": sorted(row.tables),
                "state_tables": state[row.name][0], "state_bytes": state[row.name][1],
                "upstreams": list(graph.upstreams.get(row.name, ())), "dependents": list(graph.dependents(row.name)),
                **self.freshness.status_fields(row, pending),
            })
        return {"views": views, "logs": self.log_rows(logs), "captures": self.captures()}

    def captures(self) -> list[dict[str, Any]]:
        """The logical capture's slot (none without ``capture: logical``): retained WAL, lag, health."""
        if not self.logs.logical.exists():
            return []
        return [slot.as_dict() for slot in self.logs.logical.status()]

    def log_rows(self, logs: dict[str, LogInfo] | None = None) -> list[dict[str, Any]]:
        """Per log: rows, bytes, the oldest change some view has not consumed, views that pin it."""
        logs = self.logs.registered() if logs is None else logs
        now = datetime.now(UTC)
        log_list = []
        for table, log in sorted(logs.items()):
            found = self.catalog.log_status(log)
            oldest = found.oldest_unconsumed
            partitions, uncovered = self.logs.coverage(log)
            log_list.append({
                "table": table, "log": f"mvlog.{log.log_name}", "capture": log.capture,
                "rows": found.rows, "bytes": found.bytes,
                "oldest_unconsumed_change": oldest.isoformat() if oldest else None,
                "oldest_unconsumed_age_seconds": round((now - oldest).total_seconds(), 3) if oldest else None,
                "pinned_by": list(found.pinned_by),
                "partitions": partitions, "not_covered": uncovered,
            })
        return log_list

    def version_as_of(self, view: ViewConfig, at: datetime) -> tuple[int, datetime]:
        """The Delta version of ``view`` that holds it as of source time ``at``, and the stamp it
        reflects: the newest stamp at or before ``at`` that the view — and every view of its refresh
        group, so that reads of a group agree — was refreshed to."""
        members = [v.name for v in self.config.views if view.group is not None and v.group == view.group]
        self.catalog.check()
        found = self.catalog.versions_as_of(members or [view.name], at)
        whose = f"refresh group {view.group!r}" if members else f"view {view.name}"
        if found is None:
            raise UsageError(f"{whose} has no refresh at or before {at.isoformat()}"
                             + (" that all its views took part in" if members else ""))
        stamp, versions = found
        version = versions[view.name]
        if version is None:  # a refresh recorded before mvlog kept versions: find it by its stamp
            version = self.warehouse.version_at(self.config.view_location(view.name), stamp)
        if version is None:
            raise WarehouseError(f"the Delta history of view {view.name} no longer reaches back to "
                                 f"{stamp.isoformat()} (its log was cleaned up)")
        return version, stamp
