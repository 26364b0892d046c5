"""A view's refresh plan, from its state, its check against the database and its Delta table
(before the stamp), then from what the stamped window holds (:meth:`ViewPlanner.at_stamp`): the
I/O around the pure decisions of :mod:`mvlog.pipeline.plan` (a part of
:class:`mvlog.pipeline.refresh.Refresher`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from mvlog.config import ViewConfig
from mvlog.errors import RefreshError
from mvlog.model import FleetCost, Measured, RefreshMethod
from mvlog.pipeline import cost
from mvlog.pipeline import plan as planner
from mvlog.pipeline.compile import definition_hash
from mvlog.pipeline.parts import ProjectWorker
from mvlog.pipeline.plan import RefreshPlan, plan_refresh, requested_method
from mvlog.pipeline.results import Phases
from mvlog.postgres.catalog import ViewState
from mvlog.postgres.windows import StampedSnapshot
from mvlog.sql.pieces.shape import ViewShape
from mvlog.sql.strategies.registry import strategy_of


@dataclass(frozen=True)
class PlannedView:
    view: ViewConfig
    state: ViewState
    plan: RefreshPlan
    after_failure: bool = False  # the view's last refresh failed: it may have written Delta unrecorded
    group_tables: Mapping[str, Sequence[str]] = dataclasses.field(default_factory=dict)  # columns now, by name
    unchecked: tuple[str, ...] | None = None  # force: the columns its Delta table must have, checked if it runs fast


class ViewPlanner(ProjectWorker):
    """Plans the views a refresh takes, before and after its stamp."""

    def preview(self, view: ViewConfig, complete: Collection[str] = ()) -> RefreshPlan:
        """The plan the next refresh of a view would follow (nothing is read, Spark is not started);
        for a ``force`` view, the method predicted cheaper for the changes pending now, with both
        predictions (:func:`mvlog.pipeline.cost.choose`)."""
        planned = self.planned(view, requested_method(view, complete), for_refresh=False)
        plan = planned.plan
        if plan.method is RefreshMethod.FAST:
            measured = self.catalog.measured(view.name)
            if plan.requested is RefreshMethod.FORCE:
                plan = planner.after_stamp(plan, [], self.logs.window_sizes(plan.logs, plan.since), measured,
                                           planned.state.row_count, self._fleet(view, measured))
            plan = planner.with_read_scope(plan, measured, planned.state.row_count)
        return self._partitioned(plan)

    def planned(self, view: ViewConfig, method: RefreshMethod, for_refresh: bool,
                phases: Phases | None = None) -> PlannedView:
        """The view's state, checked against the database and (for a refresh that may be fast)
        against its Delta table, decided into a plan (the look at the table timed as ``phases``'
        ``table``: it loads the state of the table's newest version, which the write then uses)."""
        state = self.catalog.view_state(view.name)
        if for_refresh and state.definition_hash != definition_hash(view):
            raise RefreshError(f"view {view.name} changed in the configuration; run 'mvlog apply' first")
        check = self.compiler.check(view)
        needs_complete = self.compiler.needs_complete(state, check)
        location = self.config.view_location(view.name)
        table_exists, row_hash, after_failure = True, True, False
        group_tables: dict[str, Sequence[str]] = {}
        unchecked = None
        # Only a fast refresh needs the Delta table, and needs it to have the columns it writes.
        if (for_refresh and method is not RefreshMethod.COMPLETE and check.shape.fast_possible
                and state.last_snaptime is not None):
            keymapped = bool(strategy_of(check.shape).keymapped())
            after_failure = keymapped and self.catalog.last_attempt_failed(view.name)
            if method is RefreshMethod.FORCE and not after_failure:
                # Force decides once the window is stamped; a view it refreshes completely needs no
                # look at its table (a Spark job or two: most of a small view's prepare, measured).
                unchecked = check.columns
            else:
                table_exists, row_hash, drift = planner.delta_fit(location, self._columns(location, phases),
                                                                  check.columns)
                needs_complete = needs_complete or drift
            if not needs_complete:
                needs_complete, group_tables = self._state_tables(check.shape, keymapped)
        plan = plan_refresh(check.shape, location, method, state.last_snaptime, needs_complete, table_exists,
                            row_hash)
        return PlannedView(view, state, self._sized(plan, view, state), after_failure, group_tables, unchecked)

    def at_stamp(self, planned: PlannedView, stamped: StampedSnapshot, phases: Phases | None = None) -> RefreshPlan:
        """The view's plan again, given what its stamped window holds (:meth:`_after_stamp`) and, if
        force then chose fast, its Delta table (:meth:`_checked`); a fast plan's read, its changed
        keys' rows or its whole query (:func:`~mvlog.pipeline.plan.with_read_scope`)."""
        measured = self.catalog.measured(planned.view.name) if planned.plan.method is RefreshMethod.FAST else []
        plan = self._after_stamp(planned.view, planned.plan, stamped, planned.state.row_count, measured)
        return planner.with_read_scope(self._checked(planned, plan, phases), measured, planned.state.row_count)

    def _checked(self, planned: PlannedView, plan: RefreshPlan, phases: Phases | None) -> RefreshPlan:
        """A force view's fast plan once its Delta table is looked at (see :meth:`planned`): complete
        if the table is missing or its columns differ, else fast, written as its table allows."""
        if plan.method is not RefreshMethod.FAST or planned.unchecked is None:
            return plan
        table_exists, row_hash, drift = planner.delta_fit(plan.location, self._columns(plan.location, phases),
                                                       planned.unchecked)
        if table_exists and not drift and row_hash:
            return plan
        again = plan_refresh(plan.shape, plan.location, RefreshMethod.FORCE, plan.since, drift, table_exists, row_hash)
        if again.method is RefreshMethod.COMPLETE:
            return self._partitioned(again)
        return self._sized(dataclasses.replace(plan, row_hash=row_hash), planned.view, planned.state)

    def _columns(self, location: str, phases: Phases | None) -> list[str] | None:
        """The Delta table's columns (None: no table), the look timed as the ``table`` phase."""
        with (phases or Phases())("table"):
            return self.warehouse.columns(location)

    def _state_tables(self, shape: ViewShape, keymapped: bool) -> tuple[str | None, dict[str, Sequence[str]]]:
        """The view's state tables as they are now, read in one transaction: why its key map's
        layout needs a complete refresh (or None), and the columns of its group tables by name."""
        if not keymapped and not planner.group_tables(shape):
            return None, {}  # nothing kept: no round trip on the refresh's path
        with self.source.inspection() as cur:
            misfit = strategy_of(shape).state_misfit(lambda relation: self.source.relation_columns(cur, relation)) \
                if keymapped else None
            groups: dict[str, Sequence[str]] = {name: self.source.relation_columns(cur, name) or []
                      for name in planner.group_tables(shape)}
        return misfit, groups

    def _after_stamp(self, view: ViewConfig, plan: RefreshPlan, stamped: StampedSnapshot,
                     row_count: int | None, measured: Sequence[Measured]) -> RefreshPlan:
        """The plan again, given what the window holds: truncations and partitions dropped or
        unlogged, and (``force``) its size against what the view's refreshes cost (``measured``)."""
        if plan.method is RefreshMethod.FAST:
            replaced = [reason for log in plan.logs if (reason := stamped.replaced_since(log, plan.since))]
            forced = not replaced and plan.requested is RefreshMethod.FORCE
            windows = [stamped.window_size(log, plan.since) for log in plan.logs] if forced else []
            fleet = self._fleet(view, measured) if forced else []
            plan = planner.after_stamp(plan, replaced, windows, measured if forced else [], row_count, fleet)
        return self._partitioned(plan)

    def _fleet(self, view: ViewConfig, measured: Sequence[Measured]) -> list[FleetCost]:
        """The other views' costs, read only when the view's own do not predict both methods."""
        return [] if cost.measured_both(measured) else self.catalog.fleet_costs(view.name)

    def _partitioned(self, plan: RefreshPlan) -> RefreshPlan:
        key = plan.shape.range_key
        if plan.method is not RefreshMethod.COMPLETE or key is None:
            return plan
        return planner.with_partitions(plan, self.source.column_stats(key.log, key.base_column))

    def _sized(self, plan: RefreshPlan, view: ViewConfig, state: ViewState) -> RefreshPlan:
        """``plan`` with the write its view's size asks for (:func:`mvlog.pipeline.plan.with_sized_write`)."""
        return planner.with_sized_write(plan, state.row_count, view.change_feed, self.config.delta.rewrite_max_rows)
