"""What a refresh will cost, predicted from what the view's own refreshes cost: the measured choice
of ``refresh: force`` between a fast and a complete refresh.

Every refresh that succeeded leaves in the history its method, its seconds, the distinct keys
its window changed (a fast refresh of a ``force`` view) and the rows it left (a complete one):
:class:`Measured`. Before a ``force`` view is refreshed fast, both are predicted for the window at
hand, each from the view's own last refreshes of that method (a line by medians, the fast ones over
their changed keys, the complete ones over their rows, so that one outlier does not move it; one
size alone is read as a fixed cost that grows in proportion above it), and the cheaper is chosen. A
method never measured for the view is not predicted: then the share rule decides
(:func:`share_rule`: a window that changed at least ``COMPLETE_ABOVE_FRACTION`` of a large table
refreshes completely), and the next refresh measures what it ran.

Pure functions: the history is read by the catalog, the window by the stamp; a refresh records
what it cost in the history row it ends, so the record survives a crash of the process (a refresh
that died records nothing, and is not measured).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

from mvlog.model import Measured, RefreshMethod, WindowSize

# The share rule, for views whose two methods were not both measured yet: from this share of a
# large table's rows (at least COMPLETE_MIN_KEYS keys), a MERGE that touches most files costs more
# than rewriting the table (docs/benchmarks-history.md: at 10 % of 1M random keys a fast refresh took
# 0.8-1.5x as long as a complete one, in two runs).
COMPLETE_ABOVE_FRACTION = 0.1
COMPLETE_MIN_KEYS = 10_000
SAMPLES = 8  # a method's latest refreshes that predict its next one


@dataclass(frozen=True)
class Prediction:
    """The seconds a method is predicted to take, and what the prediction rests on."""

    seconds: float
    samples: int

    def __str__(self) -> str:
        return f"{self.seconds:.1f} s (from {self.samples} refresh{'es' if self.samples > 1 else ''})"


@dataclass(frozen=True)
class Choice:
    """``force``'s choice for one window: complete or not, why, and both predictions (None: not measured)."""

    complete: bool
    reason: str
    fast: Prediction | None = None
    full: Prediction | None = None


def _line(points: Sequence[tuple[float, float]], x: float) -> float:
    """The seconds at ``x`` on the line through ``points`` (size, seconds): the median of the
    pairwise slopes and of the intercepts they leave (Theil–Sen), kept non-negative, so that one
    refresh slowed by something else (a new process's first, a busy machine) does not move it; one
    size only: the median cost as fixed, growing in proportion above it."""
    sizes = {p[0] for p in points}
    if len(sizes) == 1:
        size, seconds = next(iter(sizes)), median(p[1] for p in points)
        return seconds * max(1.0, x / size) if size > 0 else seconds
    slopes = [(b[1] - a[1]) / (b[0] - a[0]) for i, a in enumerate(points) for b in points[i + 1:] if b[0] != a[0]]
    slope = max(0.0, median(slopes))
    intercept = max(0.0, median(p[1] - slope * p[0] for p in points))
    return intercept + slope * x


def predict(measured: Sequence[Measured], method: RefreshMethod, size: float) -> Prediction | None:
    """The seconds of a refresh by ``method`` of ``size`` (a fast one's changed keys, a complete
    one's rows), from the view's latest refreshes by that method (``measured``, newest first)."""
    sized = ((m.window_keys if method is RefreshMethod.FAST else m.rows, m.seconds)
             for m in measured if m.method is method)
    points = [(float(size), seconds) for size, seconds in sized if size is not None]
    points = points[:SAMPLES]
    if not points:
        return None
    return Prediction(_line(points, size), len(points))


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


def choose(measured: Sequence[Measured], windows: Sequence[WindowSize], rows: int | None) -> Choice:
    """``force``'s method for a window (``windows``: per base table, its changed keys) of a view
    that holds ``rows``: the cheaper predicted, when the view was measured both ways; else the
    share rule."""
    keys = sum(window.changed_keys for window in windows)
    fast = predict(measured, RefreshMethod.FAST, keys)
    full = predict(measured, RefreshMethod.COMPLETE, rows or 0)
    if fast is None or full is None:
        why = share_rule(windows)
        measured_note = ("" if fast is None and full is None else
                         f"; fast predicted {fast}" if fast else f"; complete predicted {full}")
        if why:
            return Choice(True, why + measured_note, fast, full)
        return Choice(False, f"{keys:,} changed keys, by the share rule (not measured both ways yet){measured_note}",
                      fast, full)
    both = f"fast predicted {fast} for {keys:,} changed keys, complete {full}"
    if full.seconds < fast.seconds:
        return Choice(True, f"a complete refresh is predicted cheaper: {both}", fast, full)
    return Choice(False, both, fast, full)
