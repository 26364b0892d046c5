"""How a refresh of several views is laid out: the units refreshed together from one snapshot
(:func:`refresh_units`), the order the workers take them in (:func:`longest_first`), and one lane —
a refresher with a PostgreSQL connection and a Spark session of its own — per worker thread
(:class:`Lanes`)."""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Collection, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from mvlog.config import ViewConfig
    from mvlog.pipeline.results import RefreshResult
    from mvlog.sql.parse.dependencies import ViewGraph


class Lane(Protocol):
    """What a worker thread refreshes its units with (a :class:`~mvlog.pipeline.refresh.Refresher`)."""

    def refresh_unit(self, views: list[ViewConfig], complete: Collection[str], wait: float) -> list[RefreshResult]: ...


def refresh_units(views: list[ViewConfig], graph: ViewGraph | None = None) -> list[list[ViewConfig]]:
    """What is refreshed together, from one snapshot: a refresh group's views, and views that read
    one another (``graph``), upstreams first; else each view alone."""
    units: list[list[ViewConfig]] = []
    for view in views:
        joined = [i for i, unit in enumerate(units) if any(
            (view.group is not None and other.group == view.group)
            or (graph is not None and graph.connected(view.name, other.name)) for other in unit)]
        if not joined:
            units.append([view])
            continue
        units[joined[0]] = [v for i in joined for v in units[i]] + [view]
        for i in reversed(joined[1:]):
            del units[i]
    if graph is not None:
        by_name = {v.name: v for v in views}
        units = [[by_name[n] for n in graph.ordered(v.name for v in unit)] for unit in units]
    return units


def longest_first(units: list[list[ViewConfig]], seconds: Mapping[str, float | None]) -> list[list[ViewConfig]]:
    """``units`` in the order workers should take them for the whole to end soonest: the longest
    expected first (a unit's views' ``seconds`` summed), so that a long unit does not start last and
    run on alone; a unit with a view whose seconds are unknown (never refreshed) counts as longest.
    Ties keep their order. In ``views`` order, TPC-DS's 107 views at scale 1 on four workers would
    end 6 % later than longest first (their per-view seconds of BENCHMARKS.md session 65, replayed)."""
    def expected(unit: list[ViewConfig]) -> float:
        known = [seconds.get(v.name) for v in unit]
        return math.inf if any(s is None for s in known) else sum(s for s in known if s is not None)
    return sorted(units, key=expected, reverse=True)


class Lanes:
    """One Refresher per worker thread, opened on the thread's first unit, closed at the end."""

    def __init__(self, new_lane: Callable[[], AbstractContextManager[Lane]]):
        self._new_lane = new_lane
        self._local = threading.local()
        self._stack = contextlib.ExitStack()
        self._lock = threading.Lock()

    def current(self) -> Lane:
        lane = getattr(self._local, "lane", None)
        if lane is None:
            with self._lock:
                lane = self._local.lane = self._stack.enter_context(self._new_lane())
        return lane

    def refresh_unit(self, views: list[ViewConfig], complete: Collection[str], wait: float) -> list[RefreshResult]:
        """``refresh_unit`` on the calling thread's lane."""
        return self.current().refresh_unit(views, complete, wait)

    def __enter__(self) -> Lanes:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stack.close()
