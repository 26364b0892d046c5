"""What a refresh will cost, predicted from what refreshes cost: the measured choice of
``refresh: force`` between a fast and a complete refresh.

Every refresh that succeeded leaves in the history its method, its seconds, the distinct keys
its window changed (a fast refresh of a ``force`` view) and the rows it left (a complete one):
:class:`Measured`. Before a ``force`` view is refreshed fast, both are predicted for the window at
hand, each from the view's own last refreshes of that method (a line by medians, the fast ones over
their changed keys, the complete ones over their rows, so that one outlier does not move it; one
size, or sizes within ``SIZE_SPAN`` of each other, is read as a fixed cost that grows in proportion
above it), and the cheaper is chosen.

A view's build (its first refresh, a complete one) creates its table and its state, often in a new
process: it predicts the view's complete refreshes only until one is measured, and then scaled by
what the other views' complete refreshes cost against their builds (:class:`FleetCost`). A method the
view never ran is predicted from the other views measured both ways — a line through their (complete,
fast) medians, of the views of the same class when there are enough — so that the first refreshes
after ``apply`` choose too; with fewer than ``FLEET_MIN_VIEWS`` such views the share rule decides
(:func:`share_rule`: a window that changed at least ``COMPLETE_ABOVE_FRACTION`` of a large table
refreshes completely), and the next refresh measures what it ran. Each prediction says what it rests on.

A method the view never ran is run once when the other views predict it within ``REMEASURE_WITHIN`` of
the other method: what other views cost says little about one view, and a method never run would
otherwise never be measured (at TPC-DS scale 0.1 the line through four other composed views predicted
q11's fast refresh at 1.27x its complete one, 83 s against 65 s, and it ran complete in every round;
its fast refresh takes 6-10 s, BENCHMARKS.md session 51). A method that lost ``SAMPLES`` refreshes in a
row is run once more when it is predicted within ``REMEASURE_WITHIN`` of the other (:func:`choose`),
and a method's refreshes of the latest ``SAMPLES`` predict it alone: a measurement taken in a cold
process, beside another job, or before the data grew does not decide for ever (the freshness
benchmark's views stayed complete in 44 of 46 refreshes after two slow fast ones,
docs/benchmarks-history.md, session 43). At most one refresh in ``SAMPLES + 1`` pays for it, at most
``REMEASURE_WITHIN`` times the cheaper method. The first fast refresh after a build is taken cold (the
view's new state tables, PostgreSQL's caches and plans): like the build for a complete refresh, it
predicts only until another fast refresh is measured, and when it alone made fast lose, fast runs once
more if predicted within ``FIRST_FAST_WITHIN`` of complete (BENCHMARKS.md session 59: TPC-DS q23's
first fast refresh after apply took 147.7 s, a later one 34.3 s, and force kept it complete at 98 s).
The first complete refresh after the build is taken cold too, and predicts only until another complete
one is measured (q15: 14.1 s, then 6.5 s, while force kept running fast at 10 s).

Pure functions: the history is read by the catalog, the window by the stamp; a refresh records
what it cost in the history row it ends, so the record survives a crash of the process (a refresh
that died records nothing, and is not measured).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import median

from mvlog.model import FleetCost, Measured, RefreshMethod, WindowSize

# The share rule, for views whose two methods were not both measured yet: from this share of a
# large table's rows (at least COMPLETE_MIN_KEYS keys), a MERGE that touches most files costs more
# than rewriting the table (docs/benchmarks-history.md: at 10 % of 1M random keys a fast refresh took
# 0.8-1.5x as long as a complete one, in two runs).
COMPLETE_ABOVE_FRACTION = 0.1
COMPLETE_MIN_KEYS = 10_000
SAMPLES = 8  # a method's latest refreshes that predict its next one; older ones are stale
REMEASURE_WITHIN = 2.0  # a stale method runs again when predicted within this of the other (<= 11 % more)
FLEET_MIN_VIEWS = 3  # other views measured both ways before they predict a method a view never ran
SIZE_SPAN = 2.0  # sizes that span less (largest / smallest) predict as one size: see _one_size
# A first fast refresh after a build that lost is run once more when predicted within this of the
# complete one: it is taken cold (TPC-DS q23 at scale 0.5: 147.7 s right after apply, 34.3 s later)
FIRST_FAST_WITHIN = 4.0


@dataclass(frozen=True)
class Prediction:
    """The seconds a method is predicted to take, and what the prediction rests on."""

    seconds: float
    source: str  # what it rests on, e.g. "from 3 refreshes"

    def __str__(self) -> str:
        return f"{self.seconds:.1f} s ({self.source})"


def _refreshes(n: int) -> str:
    return f"{n} refresh{'es' if n > 1 else ''}"


@dataclass(frozen=True)
class Choice:
    """``force``'s choice for one window: complete or not, why, and both predictions (None: not measured)."""

    complete: bool
    reason: str
    fast: Prediction | None = None
    full: Prediction | None = None


def _one_size(points: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """(size, seconds) of ``points`` whose sizes are too close to part a fixed cost from a cost per
    size (the largest under ``SIZE_SPAN`` times the smallest): their medians; None when they span
    enough. Between sizes that close, the seconds' noise makes the slope: an aggregate's 95 to 100
    groups, refreshed in 2.0–2.6 s, made a line of 1 s a row that predicted 106 s
    (BENCHMARKS.md session 50)."""
    sizes = [p[0] for p in points]
    low, high = min(sizes), max(sizes)
    if high == low or (low > 0 and high < SIZE_SPAN * low):
        return median(sizes), median(p[1] for p in points)
    return None


def _fit(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """The line through ``points`` (size, seconds) as (intercept, slope): the median of the pairwise
    slopes and of the intercepts they leave (Theil–Sen), kept non-negative, so that one refresh slowed
    by something else (a new process's first, a busy machine) does not move it; sizes too close to
    tell (:func:`_one_size`): the median cost as a slope through zero (a fixed cost that grows in
    proportion above it, see :func:`_line`)."""
    if one := _one_size(points):
        size, seconds = one
        return (seconds, 0.0) if size <= 0 else (0.0, seconds / size)
    slopes = [(b[1] - a[1]) / (b[0] - a[0]) for i, a in enumerate(points) for b in points[i + 1:] if b[0] != a[0]]
    slope = max(0.0, median(slopes))
    return max(0.0, median(p[1] - slope * p[0] for p in points)), slope


def _line(points: Sequence[tuple[float, float]], x: float) -> float:
    """The seconds at ``x`` on the line through ``points`` (:func:`_fit`); sizes too close to tell
    (:func:`_one_size`): the median cost as fixed below their size, growing in proportion above it."""
    if one := _one_size(points):
        size, seconds = one
        return seconds * max(1.0, x / size) if size > 0 else seconds
    intercept, slope = _fit(points)
    return intercept + slope * x


def predict(measured: Sequence[Measured], method: RefreshMethod, size: float) -> Prediction | None:
    """The seconds of a refresh by ``method`` of ``size`` (a fast one's changed keys, a complete
    one's rows), from the view's latest refreshes by that method (``measured``, newest first); the
    view's build only while no other complete refresh was measured."""
    samples = [m for m in measured if m.method is method]
    if any(not m.build for m in samples):
        samples = [m for m in samples if not m.build]
    if any(not m.first_after_build for m in samples):
        samples = [m for m in samples if not m.first_after_build]
    fresh = [m for m in samples if not _stale(measured, m)]
    samples = fresh or samples
    sized = ((m.window_keys if method is RefreshMethod.FAST else m.rows, m.seconds) for m in samples)
    points = [(float(size), seconds) for size, seconds in sized if size is not None]
    points = points[:SAMPLES]
    if not points:
        return None
    return Prediction(_line(points, size), f"from {_refreshes(len(points))}")


def _stale(measured: Sequence[Measured], sample: Measured) -> bool:
    """Whether ``sample`` is older than the view's latest ``SAMPLES`` refreshes (``measured``, newest
    first: the catalog's latest ``SAMPLES`` of each method)."""
    return all(m is not sample for m in measured[:SAMPLES])


def _runs_all(measured: Sequence[Measured], method: RefreshMethod, test: Callable[[Measured], bool]) -> bool:
    """Whether the view ran ``method`` and every refresh of it measured passes ``test``."""
    runs = [m for m in measured if m.method is method]
    return bool(runs) and all(test(m) for m in runs)


def _stale_method(measured: Sequence[Measured], method: RefreshMethod) -> bool:
    """Whether the view ran ``method`` before, but not in its latest ``SAMPLES`` refreshes."""
    return _runs_all(measured, method, lambda m: _stale(measured, m))


def _first_fast_only(measured: Sequence[Measured]) -> bool:
    """Whether the view's only fast refresh measured is its first after its build."""
    return _runs_all(measured, RefreshMethod.FAST, lambda m: m.first_after_build)


def _build_ratio(fleet: Sequence[FleetCost]) -> tuple[float, int]:
    """What the other views' complete refreshes cost against their builds (the median ratio, and of
    how many views); 1.0 when fewer than ``FLEET_MIN_VIEWS`` were measured both ways."""
    ratios = [f.complete / f.build for f in fleet if f.complete is not None and f.build]
    return (median(ratios), len(ratios)) if len(ratios) >= FLEET_MIN_VIEWS else (1.0, 0)


def _from_build(measured: Sequence[Measured], full: Prediction | None, fleet: Sequence[FleetCost]) -> Prediction | None:
    """A complete refresh predicted from the view's build alone, scaled by what the other views'
    complete refreshes cost against their builds (their median ratio), when enough were measured."""
    completes = [m for m in measured if m.method is RefreshMethod.COMPLETE]
    if full is None or not completes or not all(m.build for m in completes):
        return full
    ratio, views = _build_ratio(fleet)
    if not views:
        return full
    return Prediction(full.seconds * ratio, f"its build's {full.seconds:.1f} s x {ratio:.2f}, what {views} "
                                            f"other views' complete refreshes cost against their builds")


def _from_fleet(fleet: Sequence[FleetCost], view_class: str, method: RefreshMethod,
                other: Prediction) -> Prediction | None:
    """The seconds of ``method``, which the view never ran, from its other method's prediction
    (``other``) on the line through the other views' (that method, ``method``) medians: of the
    views of its class when at least ``FLEET_MIN_VIEWS``, else of all. A view whose only complete
    refresh is its build counts it, scaled as :func:`_from_build` scales one (right after ``apply``
    every view is such a view)."""
    ratio, _ = _build_ratio(fleet)

    def complete_of(f: FleetCost) -> float | None:  # its complete refreshes, or its build scaled until one
        return f.complete if f.complete is not None else None if f.build is None else f.build * ratio

    both = [(f.view_class, complete, f.fast) for f in fleet
            if f.fast is not None and (complete := complete_of(f)) is not None]
    same = [b for b in both if b[0] == view_class]
    views, scope = (same, f"{view_class} views") if len(same) >= FLEET_MIN_VIEWS else (both, "views")
    if len(views) < FLEET_MIN_VIEWS:
        return None
    fast = method is RefreshMethod.FAST
    intercept, slope = _fit([(complete, fast_) if fast else (fast_, complete) for _, complete, fast_ in views])
    given = "complete" if fast else "fast"
    return Prediction(intercept + slope * other.seconds,
                      f"{intercept:.1f} s + {slope:.2f} x its {given}, the line through {len(views)} other "
                      f"{scope}' fast and complete refreshes")


def share_rule(windows: Sequence[WindowSize]) -> str | None:
    """Why a complete refresh is cheaper than this fast one by the share of a base table the window
    changed, or None: the rule for views not yet measured both ways."""
    for window in windows:
        if window.table_rows <= 0 or window.changed_keys < COMPLETE_MIN_KEYS:
            continue
        share = window.changed_keys / window.table_rows
        if share >= COMPLETE_ABOVE_FRACTION:
            return (f"{window.changed_keys} changed keys are {min(share, 1):.0%} of {window.table}: "
                    f"a complete refresh is cheaper")
    return None


def choose(measured: Sequence[Measured], windows: Sequence[WindowSize], rows: int | None,
           view_class: str = "", fleet: Sequence[FleetCost] = ()) -> Choice:
    """``force``'s method for a window (``windows``: per base table, its changed keys) of a view
    of ``view_class`` that holds ``rows``: the cheaper predicted, when the view was measured both
    ways; else the share rule, then a method the view never ran predicted from the other views
    (``fleet``), run once to be measured when predicted within ``REMEASURE_WITHIN`` of the other;
    else fast, by the share rule."""
    keys = sum(window.changed_keys for window in windows)
    never_run: RefreshMethod | None = None  # a method the other views predict
    fast = predict(measured, RefreshMethod.FAST, keys)
    full = _from_build(measured, predict(measured, RefreshMethod.COMPLETE, rows or 0), fleet)
    if fast is None or full is None:
        why = share_rule(windows)
        measured_note = ("" if fast is None and full is None else
                         f"; fast predicted {fast}" if fast else f"; complete predicted {full}")
        if why:
            return Choice(True, why + measured_note, fast, full)
        if fast is None and full is not None:
            fast = _from_fleet(fleet, view_class, RefreshMethod.FAST, full)
            never_run = RefreshMethod.FAST
        elif full is None and fast is not None:
            full = _from_fleet(fleet, view_class, RefreshMethod.COMPLETE, fast)
            never_run = RefreshMethod.COMPLETE
        if fast is None or full is None:
            return Choice(False, f"{keys:,} changed keys, by the share rule (not measured both ways yet)"
                                 f"{measured_note}", fast, full)
    both = f"fast predicted {fast} for {keys:,} changed keys, complete {full}"
    complete = full.seconds < fast.seconds
    loser, other = (RefreshMethod.FAST, full) if complete else (RefreshMethod.COMPLETE, fast)
    close = (fast if complete else full).seconds <= REMEASURE_WITHIN * other.seconds
    if close and loser is never_run:
        return Choice(not complete, f"{loser.value} measured once (never run; predicted from the other views "
                                    f"within {REMEASURE_WITHIN:g}x): {both}", fast, full)
    if loser is RefreshMethod.FAST and _first_fast_only(measured) and fast.seconds <= FIRST_FAST_WITHIN * full.seconds:
        return Choice(False, f"fast measured again (its only measure is its first fast refresh after the build, "
                             f"predicted within {FIRST_FAST_WITHIN:g}x): {both}", fast, full)
    if close and _stale_method(measured, loser):
        return Choice(not complete, f"{loser.value} measured again (not run in the latest {SAMPLES} refreshes, "
                                    f"predicted within {REMEASURE_WITHIN:g}x): {both}", fast, full)
    if complete:
        return Choice(True, f"a complete refresh is predicted cheaper: {both}", fast, full)
    return Choice(False, both, fast, full)


def measured_both(measured: Sequence[Measured]) -> bool:
    """Whether the view's own refreshes predict both methods (else the other views' costs may)."""
    methods = {m.method for m in measured if not m.build}
    return methods == {RefreshMethod.FAST, RefreshMethod.COMPLETE}


def expected_seconds(cost: FleetCost | None, method: RefreshMethod) -> float | None:
    """About how long a view's next refresh by ``method`` takes, from its own refreshes' medians
    (:class:`FleetCost`; its build where no complete refresh was measured): a ``force`` view's
    cheaper measured method, a fast one's fast refreshes (its complete ones until it ran fast); None
    when the view never ran. An estimate to order work by (:func:`mvlog.pipeline.lanes.longest_first`),
    not a prediction to choose by."""
    if cost is None:
        return None
    complete = cost.complete if cost.complete is not None else cost.build
    if method is RefreshMethod.COMPLETE:
        return complete
    if method is RefreshMethod.FAST:
        return cost.fast if cost.fast is not None else complete
    known = [s for s in (cost.fast, complete) if s is not None]
    return min(known) if known else None
