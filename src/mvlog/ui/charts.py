"""Line charts of a view's refreshes as SVG coordinates (pure): one point per refresh, oldest
on the left, and a dashed line at the target where there is one."""

from __future__ import annotations

from dataclasses import dataclass

WIDTH, HEIGHT, PAD = 560, 160, 34


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    value: float
    label: str  # what the point's tooltip says


@dataclass(frozen=True)
class Chart:
    title: str
    unit: str
    points: list[Point]
    line: str  # the polyline's points attribute
    top: float  # the value at the top of the axis
    target_y: float | None  # where the target's line is drawn (None: no target)
    width: int = WIDTH
    height: int = HEIGHT
    pad: int = PAD


def chart(title: str, unit: str, series: list[tuple[str, float | None]], target: float | None = None) -> Chart:
    """A chart of ``series`` (label, value), oldest first; a refresh without a value (one that
    failed before it measured) has no point."""
    values = [(label, v) for label, v in series if v is not None]
    top = max([v for _, v in values] + ([target] if target is not None else []) + [1e-9]) * 1.1
    span = WIDTH - 2 * PAD
    step = span / max(len(values) - 1, 1)
    points = [Point(round(PAD + (i * step if len(values) > 1 else span / 2), 1),
                    round(HEIGHT - PAD - (v / top) * (HEIGHT - 2 * PAD), 1), v, f"{label}: {v:.3g} {unit}")
              for i, (label, v) in enumerate(values)]
    target_y = round(HEIGHT - PAD - (target / top) * (HEIGHT - 2 * PAD), 1) if target is not None else None
    return Chart(title, unit, points, " ".join(f"{p.x},{p.y}" for p in points), top, target_y)
