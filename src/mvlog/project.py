"""The Project: one object that owns the loaded config and its connections.

A thin facade in the manner of SQLMesh's ``Context``: it wires the PostgreSQL source,
mvlog's catalog, the logs, the registrar (``apply``'s checks) and the refresher, and
starts Spark only when a command needs it. CLI commands, the scheduler, the demo and
notebooks are thin calls into it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mvlog.config import Config, ViewConfig, load_config
from mvlog.errors import MvlogError, RefreshError, UsageError
from mvlog.model import LogInfo
from mvlog.ops.freshness import Freshness
from mvlog.ops.readers import view_readers
from mvlog.ops.status import Status
from mvlog.pipeline.apply import Registrar, Registration, check_locations, register_tables
from mvlog.pipeline.maintenance import Maintenance
from mvlog.pipeline.parts import ProjectParts
from mvlog.pipeline.plan import RefreshPlan
from mvlog.pipeline.refresh import Refresher
from mvlog.pipeline.results import RefreshResult
from mvlog.postgres.capture.decoding import BATCH_ROWS, Decoding, Pass
from mvlog.postgres.catalog import Catalog, HistoryRow
from mvlog.postgres.jdbc import JdbcSource
from mvlog.postgres.source import Source, dsn_secrets
from mvlog.progress import Reporter
from mvlog.spark.opening import check_local_root, open_warehouse
from mvlog.spark.remote import remote_secrets
from mvlog.spark.session import remote_url
from mvlog.spark.settings import conf_secrets
from mvlog.spark.warehouse import Warehouse

if TYPE_CHECKING:
    from mvlog.ops.verify import VerifyResult
    from mvlog.sql.explain import Explanation


FEATURE_LOCK_WAIT = 120.0  # seconds apply waits for a refresh in flight before it changes the view's table


@dataclass
class ApplyReport(Registration):
    """What ``mvlog apply`` did: the registration, then the builds of new (or changed) views."""

    builds: list[RefreshResult] = field(default_factory=list)
    features: dict[str, list[str]] = field(default_factory=dict)  # every table feature changed, per view
    tables_registered: list[str] = field(default_factory=list)  # catalog tables created (catalog:)

    @property
    def change_feeds(self) -> dict[str, bool]:
        """Views whose change feed was turned on (True) or off (False)."""
        return {view: "change data feed on" in changed for view, changed in self.features.items()
                if any(c.startswith("change data feed") for c in changed)}


class Project:
    """Loaded configuration, the PostgreSQL source and (lazily) Spark and the warehouse."""

    def __init__(self, config: Config, progress: Callable[[str], None] | None = None,
                 reporter: Reporter | None = None, read_only: bool = False):
        self.config = config
        self.secrets = (dsn_secrets(config.source.dsn) + remote_secrets(remote_url(config.spark))
                        + conf_secrets(config.spark))
        self.source = Source(config.source.dsn, self.secrets, read_only=read_only,
                             application_name="mvlog ui" if read_only else "mvlog", timeouts=config.source.timeouts)
        self.parts = ProjectParts.on(config, self.source, lambda: self.warehouse)
        self.catalog, self.logs, self.compiler = self.parts.catalog, self.parts.logs, self.parts.compiler
        self.registrar = Registrar(self.parts)
        self.freshness = Freshness(config, self.catalog, self.logs)
        self.status_reader = Status(self.parts, self.freshness)
        self.jdbc = JdbcSource.from_dsn(config.source.dsn, config.source.timeouts)
        self.reporter = reporter or Reporter()
        self._message = progress
        self._warehouse: Warehouse | None = None
        self._in_catalog: set[str] = set()  # views known to be registered in the Spark catalog
        self.refresher = Refresher(self.parts, self.jdbc, self.reporter, self.progress)
        self.maintenance = Maintenance(self.parts, self.reporter, self._in_catalog)

    def progress(self, message: str) -> None:
        (self._message or self.reporter.message)(message)

    @classmethod
    def load(cls, path: str | None = None, **kwargs: Any) -> Project:
        return cls(load_config(path), **kwargs)

    @property
    def spark_started(self) -> bool:
        """Whether this project has started (or connected to) Spark yet."""
        return self._warehouse is not None

    @property
    def warehouse(self) -> Warehouse:
        if self._warehouse is None:
            self._warehouse = open_warehouse(self.config, self.secrets, self.progress)
        return self._warehouse

    @contextlib.contextmanager
    def _lane(self) -> Iterator[Refresher]:
        """A Refresher with a PostgreSQL connection and a Spark session of its own, so that it
        can refresh beside the others (locks, snapshots and commit settings are per session)."""
        from mvlog.spark.session import new_session, release_session

        source = Source(self.config.source.dsn, self.secrets, timeouts=self.config.source.timeouts)
        spark = None
        try:
            spark = new_session(self.warehouse.spark, self.config.spark)
            warehouse = Warehouse(spark, self.config.warehouse_uri, self.secrets)
            yield Refresher(ProjectParts.on(self.config, source, lambda: warehouse), self.jdbc, self.reporter,
                            self.progress)
        finally:
            if spark is not None:
                release_session(spark)
            source.close()

    def warm(self, names: list[str]) -> None:
        """Build the Delta state of the views' newest versions now, between refreshes: a long-running
        process (``mvlog schedule``) calls it after a refresh committed, so that the next refresh of
        these views finds the state of its table's version built (docs/benchmarks-history.md session 32)."""
        for name in names:
            self.warehouse.warm(self.config.view_location(name))

    def reachable(self) -> None:
        """A round trip to PostgreSQL on the project's connection (opened again if the server closed
        it); its SourceError, transient while the server is away, if there is none. Once it answers,
        the history rows of this process's refreshes that failed while it was away are ended."""
        self.source.ping()
        self.catalog.end_unended()

    def give_up(self, reason: str) -> None:
        """Give up every call in flight to PostgreSQL in this process (each raises a transient
        error with ``reason``) and interrupt this project's Spark work: a long-running command that
        was asked to stop while a connection stalls ends within seconds, not at its bounds."""
        from mvlog.postgres.abandoning import abandon_all

        abandon_all(reason)
        if self._warehouse is not None:
            self._warehouse.interrupt()

    def close(self) -> None:
        self.source.close()

    def __enter__(self) -> Project:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _select_views(self, names: list[str] | None, group: str | None = None) -> list[ViewConfig]:
        if group is not None:
            views = [v for v in self.config.views if v.group == group]
            if not views:
                raise UsageError(f"no view belongs to refresh group {group!r}")
            if names:
                raise UsageError("give either view names or --group, not both")
            return views
        if not names:
            return list(self.config.views)
        selected = []
        for name in names:
            try:
                selected.append(self.config.view(name))
            except KeyError:
                raise UsageError(f"there is no view named {name!r} in the configuration") from None
        return selected

    # -- apply and refresh ---------------------------------------------------------------------

    def validate(self) -> Registration:
        """Check the configuration against the database without changing anything."""
        return self.registrar.validate()

    def apply(self) -> ApplyReport:
        """Install the schema, create logs and triggers, register views, build new ones. Idempotent."""
        self.registrar.validate()
        check_local_root(self.config)  # before Spark starts
        occupants = check_locations(self.config, self.catalog, self.warehouse)
        report = ApplyReport()
        if self.registrar.wants_logical():  # the slot first: it decodes what commits after it is made
            with self.source.transaction() as cur:
                self.catalog.install(cur)
            self.logs.logical.ensure(self.config.source.capture_wait, self.progress)
        with self.source.transaction() as cur:
            self.registrar.register(cur, report)
        self.logs.settle_capture()
        unbuilt = self.catalog.unbuilt_views()
        pending = [v.name for v in self.config.views if v.name in unbuilt or not occupants[v.name].delta]
        # A view built (again) changes what the views reading it mean: rebuild those with it.
        pending += [name for name in self.compiler.graph.downstream(pending) if name not in pending]
        if pending:
            report.builds = self.refresh(pending, complete=True, register=False)  # registered below
        built_now = {r.view for r in report.builds if not r.error}
        for view in self.config.views:  # change_feed: or deletion_vectors: changed on a built view
            if view.name in built_now:  # its build wrote the features asked for
                continue
            location, wanted = self.config.view_location(view.name), (view.change_feed,
                                                                      self.config.deletion_vectors(view))
            if not self.warehouse.feature_changes(location, *wanted, detail=occupants[view.name].detail):
                continue
            # Under the view's lock: a DROP FEATURE conflicts with any concurrent commit to the table.
            with self.catalog.lock_views([view.name], FEATURE_LOCK_WAIT):
                changed = self.warehouse.set_features(location, view.name, *wanted)
            if changed:
                report.features[view.name] = changed
        built = {r.view for r in report.builds if not r.error} | {v.name for v in self.config.views
                                                                   if occupants[v.name].delta}
        report.tables_registered = register_tables(self.config, lambda: self.warehouse, self._in_catalog, sorted(built))
        return report

    def capture(self, once: bool = False, interval: float = 1.0, stop: Callable[[], bool] = lambda: False,
                batch_rows: int = BATCH_ROWS) -> Iterator[Pass]:
        """Run the logical capture (:meth:`Decoding.run`), committing its log rows every
        ``batch_rows``, on connections of its own: it may run in a thread."""
        source = Source(self.config.source.dsn, self.secrets, timeouts=self.config.source.timeouts)
        decoding = Decoding(source, batch_rows)
        try:
            Catalog(source).check()
            if not decoding.exists():
                raise UsageError("no log is captured by logical decoding (capture: logical); nothing to capture")
            yield from decoding.run(once, interval, stop)
        finally:
            source.close()

    def slot_replaced_at(self) -> datetime | None:
        """When the logical capture's slot was last found lost or missing and made again; None if never."""
        return self.logs.logical.replaced_at()

    def refresh(self, names: list[str] | None = None, complete: bool = False, group: str | None = None,
                raise_on_error: bool = False, concurrency: int | None = None,
                wait: float = 0.0, register: bool = True) -> list[RefreshResult]:
        """Refresh views: named ones, a group's, or all — with the views they read (refreshed
        first, by their own method; ``complete`` applies to the views asked for). Views of one
        group, and views that read one another, share one stamp and snapshot; up to
        ``concurrency`` (default: the configuration's) such units at once. A view another process
        is refreshing is waited for up to ``wait`` seconds, then skipped."""
        asked = self._select_views(names, group)
        views = [self.config.view(name) for name in self.compiler.graph.closure(v.name for v in asked)]
        self.catalog.check()
        results = self.refresher.run(views, {v.name for v in asked} if complete else (),
                                     concurrency or self.config.concurrency, self._lane, wait)
        # A session catalog of Spark's own forgets its tables with the process: register them again.
        if register:
            register_tables(self.config, lambda: self.warehouse, self._in_catalog,
                            [r.view for r in results if r.status == "succeeded"])
        failed = [r for r in results if r.error]
        if failed and raise_on_error:
            raise RefreshError(f"refresh of view {failed[0].view} failed: {failed[0].error}")
        return results

    def plan(self, name: str, complete: bool = False) -> RefreshPlan:
        """The plan the next refresh of a view would follow (nothing is read or written)."""
        return self.refresher.preview(self._select_views([name])[0], {name} if complete else ())

    # -- status and history ----------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Views (staleness, pending changes, rows) and logs (size, oldest unconsumed change)."""
        self.catalog.check()
        return self.status_reader.report()

    def log_status(self, logs: dict[str, LogInfo] | None = None) -> list[dict[str, Any]]:
        """Per log: rows, bytes, the oldest change some view has not consumed, views that pin it."""
        return self.status_reader.log_rows(logs)

    def lags(self, names: list[str]) -> dict[str, float | None]:
        """The current lag of each named view (see :mod:`mvlog.ops.freshness`)."""
        return self.freshness.lags(names)

    def verify(self, names: list[str] | None = None, sample: int | None = None, repair: bool = False,
               refresh: bool = False) -> list[VerifyResult]:
        """Compare views with their queries (``sample``: about that many rows each; None: all);
        ``refresh`` first; ``repair``: re-merge mismatched keys. Each view's result is recorded in
        the catalog as soon as it is known (``Catalog.last_verify`` reads it back). See
        :mod:`mvlog.ops.verify`."""
        from mvlog.ops.verify import Verifier

        views = self._select_views(names)
        self.catalog.check()
        if refresh:
            self.refresh([v.name for v in views], raise_on_error=True)
        verifier = Verifier(self.parts, self.jdbc, self.progress)
        results = []
        for view in views:
            result = verifier.verify(view, sample, repair)
            try:
                self.catalog.record_verify(result.to_json())
            except MvlogError as exc:  # the comparison stands; only the dashboard misses it
                self.progress(f"{view.name}: verify result not recorded ({exc})")
            results.append(result)
        return results

    def history(self, name: str, limit: int = 20) -> list[HistoryRow]:
        """The most recent refreshes of a view, newest first."""
        self.catalog.check()
        return self.catalog.history(name, limit)

    def version_as_of(self, name: str, at: datetime) -> tuple[int, datetime]:
        """The Delta version of view ``name`` that holds it as of source time ``at``, and the stamp it
        reflects (:meth:`~mvlog.ops.status.Status.version_as_of`)."""
        return self.status_reader.version_as_of(self._select_views([name])[0], at)

    def explain(self, name: str) -> Explanation:
        """What refresh capabilities a view has, and why not (Oracle's EXPLAIN_MVIEW), and what its
        next refresh would do now (:meth:`plan`'s method, reason and write)."""
        view = self._select_views([name])[0]
        result = self.registrar.explain(view)
        result.readers_of, result.readers = view_readers(self.config, view.name, result.table_features)
        try:
            plan = self.refresher.preview(view)
        except MvlogError:  # not registered yet (explain runs before apply), or not plannable now
            return result
        result.next_refresh = {key: plan.to_json()[key] for key in ("method", "reason", "write", "read")}
        return result

    # -- maintenance -------------------------------------------------------------------------------

    def drop_views(self, names: list[str], delete_data: bool = False) -> list[str]:
        """Unregister views and drop their key maps; optionally delete their Delta tables
        (:meth:`Maintenance.drop_views`)."""
        return self.maintenance.drop_views(names, delete_data)

    def drop_log(self, table: str, cascade: bool = False) -> list[str]:
        """Drop the materialized view log of ``table``; its views too with ``cascade``."""
        return self.maintenance.drop_log(table, cascade)

    def purge(self) -> dict[str, int]:
        """Delete log rows every dependent view has consumed."""
        return self.maintenance.purge()

    def optimize(self, names: list[str] | None = None, vacuum: bool = False) -> list[tuple[str, str]]:
        """Compact the Delta files of the views (all by default); ``vacuum``: and delete old ones
        (:meth:`Maintenance.optimize`)."""
        return self.maintenance.optimize(self._select_views(names), vacuum)
