"""Refreshing views: one unit of views, from one stamp and one snapshot, read top to bottom.

    lock the views → check each against the database → plan → stamp the logs →
    per view: look at the plan again (pure) → read from PostgreSQL → write Delta →
    record last_V = S → purge the logs

A plan is decided before anything is read (:mod:`mvlog.pipeline.plan`); what the stamp reveals
changes it only through pure functions that return a new plan.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta

from mvlog.config import ViewConfig
from mvlog.errors import ConcurrentRefreshError, MvlogError
from mvlog.faults import arm, checkpoint
from mvlog.model import UNCHANGED, RefreshMethod
from mvlog.pipeline import cost, fastwrite, readform
from mvlog.pipeline import plan as planner
from mvlog.pipeline.compile import definition_hash
from mvlog.pipeline.fastwrite import KeptRows
from mvlog.pipeline.lanes import Lanes, longest_first, refresh_units
from mvlog.pipeline.parts import ProjectParts, ProjectWorker
from mvlog.pipeline.plan import RefreshPlan, requested_method
from mvlog.pipeline.planning import PlannedView, ViewPlanner
from mvlog.pipeline.results import Phases, RefreshResult
from mvlog.postgres.catalog import UNCHANGED_REASON
from mvlog.postgres.inspection import Cursor, data_refused
from mvlog.postgres.jdbc import JdbcSource
from mvlog.postgres.source import FAST_SETTINGS
from mvlog.postgres.windows import StampedSnapshot
from mvlog.progress import Reporter
from mvlog.spark.warehouse import WriteCounts
from mvlog.sql.strategies.registry import strategy_of
from mvlog.sql.strategies.strategy import CARRIED, Scratch


class Refresher(ProjectWorker):
    """Refreshes units of views: one view, or the views of a refresh group together."""

    def __init__(self, parts: ProjectParts, jdbc: JdbcSource, reporter: Reporter, progress: Callable[[str], None]):
        super().__init__(parts)
        self.jdbc = jdbc
        self.reporter = reporter
        self.progress = progress
        self.plans = ViewPlanner(parts)

    def preview(self, view: ViewConfig, complete: Collection[str] = ()) -> RefreshPlan:
        """The plan the next refresh of a view would follow (:meth:`ViewPlanner.preview`)."""
        return self.plans.preview(view, complete)

    def run(self, views: list[ViewConfig], complete: Collection[str], concurrency: int = 1,
            new_lane: Callable[[], AbstractContextManager[Refresher]] | None = None,
            wait: float = 0.0) -> list[RefreshResult]:
        """Refresh views (those named in ``complete`` by a complete refresh); the views of one group,
        and views that read one another, as one unit; every other view alone. With
        ``new_lane`` (a Refresher on connections and a Spark session of its own), up to
        ``concurrency`` units run at once; results come in the order of ``views``. A unit that
        another process is refreshing is waited for up to ``wait`` seconds, then skipped. Units
        with nothing to apply are recorded first (:meth:`unchanged`); Spark starts only if some
        unit is left, and before the first of them, so that no view's time includes its start."""
        done: dict[int, list[RefreshResult]] = {}
        building = {v.name for v in views} <= set(complete)
        with self.reporter.task("building" if building else "refreshing", len(views)):
            fresh = {result.view: result for result in self.unchanged(views, complete)}
            units = refresh_units([v for v in views if v.name not in fresh], self.compiler.graph)
            workers = min(concurrency, len(units)) if new_lane is not None else 1
            if workers > 1:
                units = longest_first(units, self._expected_seconds(units, complete))
            if units:
                self.parts.warehouse()
            if workers <= 1 or new_lane is None:
                for i, unit in enumerate(units):
                    done[i] = self._reported(self.refresh_unit(unit, complete, wait))
            else:
                with Lanes(new_lane) as lanes, ThreadPoolExecutor(workers, "mvlog-refresh") as pool:
                    futures = {pool.submit(lanes.refresh_unit, unit, complete, wait): i
                               for i, unit in enumerate(units)}
                    for future in as_completed(futures):
                        done[futures[future]] = self._reported(future.result())
        by_view = {**fresh, **{result.view: result for i in range(len(units)) for result in done[i]}}
        return [by_view[v.name] for v in views if v.name in by_view]

    def _expected_seconds(self, units: list[list[ViewConfig]], complete: Collection[str]) -> dict[str, float | None]:
        """Each view's expected seconds by the method asked of it (:func:`cost.expected_seconds`),
        from its refresh history; none if the catalog cannot say (the units keep their order)."""
        views = [v for unit in units for v in unit]
        try:
            costs = self.catalog.view_costs([v.name for v in views])
        except MvlogError:
            return {}
        return {v.name: cost.expected_seconds(costs.get(v.name), requested_method(v, complete)) for v in views}

    def _reported(self, results: list[RefreshResult]) -> list[RefreshResult]:
        for result in results:
            what = (result.method or "-") if result.status == "succeeded" else result.status
            self.reporter.advance(f"{result.view} ({what})")
        return results

    def refresh_unit(self, views: list[ViewConfig], complete: Collection[str],
                     wait: float = 0.0) -> list[RefreshResult]:
        """Refresh views from one stamp S and one exported snapshot (all of them, or none: skipped
        when another process holds one of them for more than ``wait`` seconds)."""
        started = {v.name: time.monotonic() for v in views}
        names = [v.name for v in views]
        try:
            # A refresh whose connections stop answering gives its Spark work up at once (its JDBC
            # reads would wait on their silent sockets for source.timeouts.long_statement).
            with self.source.translated(), self.source.on_abandon(self._interrupt), \
                    self.catalog.lock_views(names, wait):
                phases = {v.name: Phases() for v in views}
                planned = [self.plans.planned(view, requested_method(view, complete), for_refresh=True,
                                              phases=phases[view.name])
                           for view in views]
                logs = list({log.log_name: log for p in planned for log in p.plan.logs}.values())
                self.catalog.close_interrupted(names)
                checkpoint("before_stamp")
                with self.logs.stamp(logs, self.config.source.capture_wait, self.progress) as stamped:
                    checkpoint("after_stamp")
                    prepared = time.monotonic()
                    results = [self._refresh_one(p, stamped, started[p.view.name],
                                                 phases[p.view.name].rest("prepare", prepared - started[p.view.name]))
                               for p in planned]
        except ConcurrentRefreshError as exc:
            return [RefreshResult.busy(name, exc, started[name]) for name in names]
        except MvlogError as exc:
            return [RefreshResult.failed(name, exc, started[name]) for name in names]
        try:
            self.logs.purge(logs, self.catalog.purge_horizon)
        except MvlogError:
            pass  # the refreshes are recorded; the next refresh (or 'mvlog purge') purges what this left
        return results

    def _interrupt(self, reason: str) -> None:
        """Interrupt this lane's Spark work (its connections to PostgreSQL were abandoned)."""
        self.parts.warehouse().interrupt()

    def unchanged(self, views: list[ViewConfig], complete: Collection[str]) -> list[RefreshResult]:
        """The views with nothing to apply, recorded as refreshed (``fresh``, 0 keys) without a
        plan, a stamp, Spark or their Delta tables: one round trip decides for all of them
        (:meth:`Catalog.unchanged_views`). A unit (a refresh group, views reading one another) is
        unchanged only as a whole; a view asked for a complete refresh never is. Under logical
        capture the capture first writes what committed before the question was asked."""
        started = time.monotonic()
        candidates = [v for v in views if v.name not in complete]
        if not candidates:
            return []
        try:
            if self.logs.logical.exists():
                self.logs.logical.reach_now(self.config.source.capture_wait, self.progress)
            found = self.catalog.unchanged_views([v.name for v in candidates])
        except MvlogError:
            return []  # the refresh proper meets the problem and says what it is
        quiet = {v.name for v in candidates if found.get(v.name) == definition_hash(v)}
        units = [[v.name for v in unit] for unit in refresh_units(views, self.compiler.graph)
                 if all(v.name in quiet for v in unit)]
        if not units:
            return []
        recorded = self.catalog.record_unchanged(units)
        seconds = time.monotonic() - started
        results = [RefreshResult(name, UNCHANGED, UNCHANGED_REASON, stamp, row_count=rows, seconds=seconds)
                   for name, (stamp, rows) in recorded.items()]
        for result in results:
            self.reporter.advance(f"{result.view} ({UNCHANGED})")
        return results

    # -- the steps ---------------------------------------------------------------------------

    def _refresh_one(self, planned: PlannedView, stamped: StampedSnapshot, started: float,
                     phases: Phases) -> RefreshResult:
        view, plan = planned.view, planned.plan
        history_id = self.catalog.history_start(view.name, plan.method, plan.reason, stamped.time)
        counts, oldest = WriteCounts(), None
        try:
            with self.source.translated():  # a connection lost on the way fails the refresh like any error
                with phases("prepare"):  # the plan at the stamp: force's choice (its look at the table: "table")
                    if planned.after_failure and plan.method is RefreshMethod.FAST:
                        self._take_back_unrecorded(view, plan, stamped)
                    plan = self.plans.at_stamp(planned, stamped, phases)
                    plan = planner.without_missing_groups(plan, planned.group_tables)
                    if planned.state.last_snaptime is not None:  # the lag this refresh ends (see mvlog status)
                        oldest = stamped.oldest_change(plan.logs, planned.state.last_snaptime)
                counts, kept = self._write(plan, stamped, phases, view)
                if plan.method is RefreshMethod.COMPLETE:
                    row_count = counts.rows_inserted
                else:
                    row_count = (planned.state.row_count or 0) + counts.rows_inserted - counts.rows_deleted
                checkpoint("after_delta_commit")
                with phases("record"):
                    self._record(view, plan, stamped, row_count, planned.state.read_at, kept, phases)
                checkpoint("after_record")
        except MvlogError as exc:
            self.catalog.end_failed(history_id, counts, str(exc))  # later, if PostgreSQL is away
            return RefreshResult.failed(view.name, exc, started, plan, stamped.time)
        self.catalog.history_end(history_id, counts, method=plan.method, reason=plan.reason, oldest_change=oldest,
                                 window_keys=plan.window_keys, phases=phases.seconds)
        return RefreshResult(view.name, plan.method, plan.reason, stamped.time, counts.keys_read, counts.rows_inserted,
                             counts.rows_updated, counts.rows_deleted, row_count, time.monotonic() - started,
                             phases=phases.seconds)

    def _take_back_unrecorded(self, view: ViewConfig, plan: RefreshPlan, stamped: StampedSnapshot) -> None:
        """A refresh that died between its Delta commit and the catalog's record left rows in the
        view that the key map does not know, so a fast refresh could never take them out again
        (a row it inserted, deleted before the next refresh). The view's table goes back to the
        version of the last recorded stamp; this refresh then applies the whole window again.
        First the table is fenced off that refresh's writes (its stamp is older than this one's):
        on a Spark Connect server, a write of a killed client runs on and could commit after the
        look at the history, with rows no key map knows."""
        assert plan.since is not None
        app_id, own = refresh_txn(view.name, stamped.time)
        self.warehouse.fence(plan.location, view.name, (app_id, own - 1))
        version = self.warehouse.restore_to_stamp(plan.location, view.name, plan.since)
        if version is not None:
            self.progress(f"{view.name}: its last refresh wrote Delta but was not recorded: restored to version "
                          f"{version} (as of {plan.since.isoformat()})")

    def _write(self, plan: RefreshPlan, stamped: StampedSnapshot, phases: Phases, view: ViewConfig
               ) -> tuple[WriteCounts, KeptRows | None]:
        """Read the plan's rows at the stamp's snapshot and write them: one Delta commit. A fast
        read's rows may also give the state's update what it would compute again (:class:`KeptRows`)."""
        metadata = {"view": plan.view, "snaptime": stamped.time.isoformat(), "method": plan.method.value}
        txn = refresh_txn(plan.view, stamped.time)
        if plan.method is RefreshMethod.FAST:
            with phases("prepare"):
                if not any(stamped.window_has_rows(log, plan.since) for log in plan.logs):
                    return WriteCounts(), None
                self.progress(f"{plan.view}: fast refresh" + (" (its whole query read)" if plan.whole_read else ""))
            if plan.whole_read is not None:  # the whole query's rows, compared with the table's by the write
                with phases("read_whole"):
                    df = self.warehouse.read(self.jdbc, self._read_form(plan, plan.read_sql()), stamped.snapshot)
                    staged = self.warehouse.stage(df)
                with phases("write"):
                    checkpoint("after_read")
                    arm("during_merge")
                    return fastwrite.write_staged(self.warehouse, plan, staged, metadata, txn, self.progress), None
            with phases("read"):
                strategy = strategy_of(plan.shape)
                null_safe = strategy.null_safe(plan.since)
                # A composed view's read returns its pieces' changed rows too: the record's not
                # to compute again (BENCHMARKS.md session 63: about as dear as the read itself)
                carrying = strategy.carrying_read_sql(plan.since, null_safe)
                read = self._read_form(plan, stamped.resolve(carrying or plan.read_sql(null_safe)))
                df = self.warehouse.read(self.jdbc, read, stamped.snapshot, settings=FAST_SETTINGS)
                staged = self.warehouse.stage(df, CARRIED if carrying else None, fastwrite.CARRIED_ROWS_MAX)
                kept = fastwrite.kept_rows(self.warehouse, plan, staged)
            with phases("write"):
                checkpoint("after_read")
                arm("during_merge")
                return fastwrite.write_staged(self.warehouse, plan, staged, metadata, txn, self.progress), kept
        self.progress(f"{plan.view}: complete refresh"
                      + (f" ({len(plan.partitions)} partitions)" if plan.partitions else ""))
        df = self.warehouse.read(self.jdbc, self._read_form(plan, plan.read_sql()), stamped.snapshot, plan.partitions)
        checkpoint("after_read")
        with phases("write"):
            return self.warehouse.replace(plan.location, df, metadata, txn, plan.key_columns, view.change_feed,
                                          self.config.deletion_vectors(view), self.config.column_mapping(view),
                                          self.config.checkpoint_interval(view)), None

    def _read_form(self, plan: RefreshPlan, sql: str) -> str:
        """``sql`` (the plan's read) in the form :func:`mvlog.pipeline.readform.sent` chooses: its
        restricted CTEs inlined, its correlated aggregates joined where PostgreSQL estimates that
        cheaper."""
        form = readform.sent(plan.shape.select_sql, sql, self._estimated_cost)
        if (note := form.note(plan.view)) is not None:
            self.progress(note)
        return form.sql

    def _estimated_cost(self, query: str) -> float | None:
        with self.source.inspection() as cur:
            return self.source.estimated_cost(cur, query)

    def _record(self, view: ViewConfig, plan: RefreshPlan, stamped: StampedSnapshot, row_count: int,
                checked_at: datetime, kept: KeptRows | None = None, phases: Phases | None = None) -> None:
        """After the Delta commit: bring the key map to S and record last_V = S, in one transaction
        that reads the refresh's snapshot (``kept``: what the fast read's rows give it; ``phases``:
        where the reads its statements share are timed, ``reread``). A crash
        before this commit leaves both at the old last_V, so the next refresh re-reads a window
        that contains this one."""
        shape = plan.shape
        complete = plan.method is RefreshMethod.COMPLETE
        strategy = strategy_of(shape)
        with self.source.bounded("long_statement"), \
                self.source.snapshot_transaction(stamped.snapshot, fast=not complete) as cur:
            if complete and not strategy.keymapped():  # state of an earlier shape, but a layer's own it refills
                self.catalog.drop_keymap(cur, view.name, keep=strategy.layer_state(view.name))
            if complete:
                statements = strategy.state_rebuild(lambda name: self.source.relation_columns(cur, name))
            else:  # first the reads the statements share: they read the state before its update
                scratch = strategy.scratch(plan.since)
                carried = kept.carried if kept is not None else None
                with (phases or Phases())("reread") if scratch else contextlib.nullcontext():
                    for i, table in enumerate(scratch, start=1):
                        cur.execute(stamped.resolve(table.create))
                        if not (carried is not None and self._fill_carried(cur, table, carried.get(i, []), view.name)):
                            cur.execute(stamped.resolve(table.fill))
                        cur.execute(stamped.resolve(table.analyze))
                keys, values = (kept.keys, kept.values) if kept is not None else (None, None)
                if keys is not None:
                    cur.execute(keys.statement, values)
                statements = [*(keys.rest if keys is not None else strategy.state_update(plan.since)),
                              *(table.drop for table in scratch)]
            for statement in statements:
                cur.execute(stamped.resolve(statement) if not complete else statement)
            # A complete refresh wrote the query's columns as they are now: remember them.
            signature = self.compiler.signature(cur, view.query) if complete else None
            self.catalog.record_refresh(cur, view.name, stamped.time, plan.method, row_count, signature, checked_at)

    def _fill_carried(self, cur: Cursor, table: Scratch, rows: list[str], view: str) -> bool:
        """Fill a scratch table from the rows a carrying read returned for it; False (nothing
        done) when it has no such fill, or PostgreSQL refused the rows' texts as its rows — a read
        sent in another form than the record's (:mod:`mvlog.pipeline.readform`) with other
        columns: the record then computes them, as it would have without them."""
        if table.carried is None:
            return False
        statement, parameter = table.carried
        if (refused := data_refused(cur, statement, {parameter: rows}, "mvlog_carried")) is not None:
            self.progress(f"{view}: the rows its read carried do not fit the record's ({refused}): computed again")
            return False
        return True


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def refresh_txn(view: str, stamp: datetime) -> tuple[str, int]:
    """The idempotent-write transaction of a view's refresh at ``stamp``: Delta skips a write whose
    version is not above the last one committed under the view's id (a refresh applied already).
    The version is the stamp's microseconds since the epoch, counted in integers: through a float
    one stamp in forty came out a microsecond low, and two stamps a microsecond apart could share it."""
    aware = stamp if stamp.tzinfo is not None else stamp.astimezone()  # a naive stamp is local time
    return f"mvlog:{view}", (aware - EPOCH) // timedelta(microseconds=1)
