"""A view's charts: one point per refresh that measured, scaled into the frame (pure)."""

from __future__ import annotations

from mvlog.ui.charts import HEIGHT, PAD, WIDTH, chart


def test_one_point_per_measured_refresh_oldest_left():
    drawn = chart("Refresh seconds", "s", [("#1", 2.0), ("#2", None), ("#3", 4.0), ("#4", 1.0)])
    assert [p.value for p in drawn.points] == [2.0, 4.0, 1.0]
    xs = [p.x for p in drawn.points]
    assert xs == sorted(xs) and xs[0] == PAD and xs[-1] == WIDTH - PAD
    highest = min(drawn.points, key=lambda p: p.y)
    assert highest.value == 4.0 and PAD <= highest.y < HEIGHT - PAD
    assert drawn.line.count(",") == 3 and drawn.target_y is None


def test_the_target_line_is_drawn_at_its_value():
    drawn = chart("Lag", "s", [("#1", 10.0), ("#2", 30.0)], target=20.0)
    assert drawn.target_y is not None
    low, high = sorted(drawn.points, key=lambda p: p.value)
    assert high.y < drawn.target_y < low.y
    assert chart("Lag", "s", [("#1", 1.0)], target=60.0).top >= 60.0  # the target stays in the frame


def test_no_refresh_no_point():
    assert chart("Refresh seconds", "s", []).points == []
