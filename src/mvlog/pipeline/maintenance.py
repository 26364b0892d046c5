"""Maintenance: dropping views and logs, purging consumed log rows, compacting views' files.

What ``mvlog drop``, ``purge`` and ``optimize`` do, behind :class:`~mvlog.project.Project`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from mvlog.config import ViewConfig
from mvlog.errors import ConfigError, UsageError, WarehouseError
from mvlog.pipeline import plan as planner
from mvlog.pipeline.parts import ProjectParts, ProjectWorker
from mvlog.progress import Reporter

if TYPE_CHECKING:
    pass


class Maintenance(ProjectWorker):
    """The maintenance commands of one project."""

    def __init__(self, parts: ProjectParts, reporter: Reporter, in_catalog: set[str]):
        super().__init__(parts)
        self.reporter = reporter
        self.in_catalog = in_catalog  # the project's: views known to be registered in the Spark catalog

    def drop_views(self, names: list[str], delete_data: bool = False) -> list[str]:
        """Unregister views (they stop pinning their logs) and drop their key maps; optionally delete
        their Delta tables. Returns what was done, one line each."""
        self.catalog.check()
        for name in names:
            readers = [v for v in self.compiler.graph.dependents(name) if v not in names]
            if readers:
                raise UsageError(f"view {name} is read by the configuration's view(s) {', '.join(readers)}; "
                                 f"drop those too, or change their queries first")
        if delete_data:
            self.warehouse.check_can_delete()  # before anything is unregistered
        done = []
        with self.source.transaction() as cur:
            for name in names:
                location = self.catalog.unregister(cur, name)
                if location is None:
                    raise UsageError(f"view {name} is not registered")
                done.append((name, location))
        lines = []
        for name, location in done:
            if self.config.catalog is not None:
                self.warehouse.unregister_table(self.config.catalog.database, name)
                self.in_catalog.discard(name)
            if delete_data:
                self.warehouse.delete(location)
                lines.append(f"view {name} dropped, Delta table {location} deleted")
            else:
                lines.append(f"view {name} dropped (its Delta table {location} is kept)")
        return lines

    def drop_log(self, table: str, cascade: bool = False) -> list[str]:
        """Drop the materialized view log of ``table``; its views too with ``cascade``."""
        self.catalog.check()
        with self.source.transaction() as cur:
            try:
                found = self.compiler.resolve_named_table(cur, table)
            except ConfigError:
                found = None  # maybe a log whose table is gone: look it up by name below
            logs = self.logs.registered()
            log = next((lg for lg in logs.values() if found is not None and lg.table_oid == found.oid), None)
            log = log or logs.get(table) or logs.get(f"public.{table}")
            if log is None:
                raise UsageError(f"table {table} has no materialized view log")
            dependents = self.catalog.dependents(cur, log)
            if dependents and not cascade:
                raise UsageError(f"views {', '.join(dependents)} depend on the log of {log.qualified_table}; "
                                 f"drop them first or use --cascade")
            for name in dependents:
                self.catalog.unregister(cur, name)
            self.logs.drop(cur, log)
        self.logs.settle_capture()
        return [f"view {name} dropped (its Delta table is kept)" for name in dependents] + [
            f"log on {log.qualified_table} dropped"]

    def purge(self) -> dict[str, int]:
        """Delete log rows every dependent view has consumed."""
        self.catalog.check()
        logs = list(self.logs.registered().values())
        purged: dict[str, int] = {}
        with self.reporter.task("purging", len(logs)):
            for log in logs:
                purged.update(self.logs.purge([log], self.catalog.purge_horizon))
                self.reporter.advance(log.qualified_table)
        return purged

    def optimize(self, views: list[ViewConfig], vacuum: bool = False) -> list[tuple[str, str]]:
        """Compact the Delta files of ``views`` that frequent fast refreshes leave small; ``vacuum``
        also deletes files older than the tables' retention. Holds each view's refresh lock, so it
        never races a refresh. Returns (view, what was done) pairs."""
        self.catalog.check()
        done = []
        with self.reporter.task("optimizing", len(views)):
            for view in views:
                location = self.config.view_location(view.name)
                with self.catalog.lock_views([view.name]):
                    occupant = self.warehouse.occupant(location)
                    refusal = occupant.refusal(view.name, location)
                    if not occupant.delta:
                        done.append((view.name, "not built yet"))
                    elif refusal:  # VACUUM would delete what is not its table's: never on another's table
                        raise WarehouseError(f"view {view.name} not optimized: {refusal}")
                    else:
                        started = time.monotonic()
                        key = self.compiler.check(view).shape.range_key
                        removed, added = self.warehouse.optimize(location, view.name, key.column if key else None,
                                                                 planner.ROWS_PER_PARTITION, vacuum)
                        what = (f"{removed} file{'s' if removed != 1 else ''} compacted into {added}"
                                if removed else "nothing to compact")
                        done.append((view.name, f"{what}{', vacuumed' if vacuum else ''} "
                                                f"({time.monotonic() - started:.1f} s)"))
                self.reporter.advance(view.name)
        return done
