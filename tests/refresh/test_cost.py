"""``refresh: force``'s choice by measured cost (pure, no database): predictions from the view's own
refreshes, the cheaper method chosen, the share rule until both methods were measured."""

from __future__ import annotations

import random

import pytest

from mvlog.model import Measured, RefreshMethod, WindowSize
from mvlog.pipeline.cost import COMPLETE_ABOVE_FRACTION, COMPLETE_MIN_KEYS, choose, predict, share_rule

FAST, COMPLETE = RefreshMethod.FAST, RefreshMethod.COMPLETE


def window(keys: int, rows: float = 1e7) -> list[WindowSize]:
    return [WindowSize("public.t", keys, rows)]


def test_the_share_rule_switches_only_for_large_windows_of_large_tables():
    big = 10 * COMPLETE_MIN_KEYS / COMPLETE_ABOVE_FRACTION
    small_change = WindowSize("public.orders", int(big * COMPLETE_ABOVE_FRACTION) - 1, big)
    assert share_rule([small_change]) is None
    large_change = WindowSize("public.customers", int(big * COMPLETE_ABOVE_FRACTION), big)
    reason = share_rule([small_change, large_change])
    assert reason is not None and "public.customers" in reason and "10%" in reason
    # A small table changed entirely is still cheap to refresh fast; unknown sizes never switch.
    assert share_rule([WindowSize("public.t", COMPLETE_MIN_KEYS - 1, COMPLETE_MIN_KEYS - 1)]) is None
    assert share_rule([WindowSize("public.t", 10**9, -1)]) is None


def test_a_view_not_measured_both_ways_is_decided_by_the_share_rule():
    only_fast = [Measured(FAST, 2.0, 1000, None)]
    assert not choose(only_fast, window(1000), 10**7).complete
    assert choose([], window(5 * 10**6), 10**7).complete  # half the table: the share rule
    note = choose(only_fast, window(10), 10**7).reason
    assert "share rule" in note and "fast predicted 2.0 s (from 1 refresh)" in note


def test_predictions_follow_a_line_through_the_view_s_refreshes():
    measured = [Measured(FAST, 1.0 + 0.001 * k, k, None) for k in (100, 1000, 5000)]
    assert predict(measured, FAST, 10_000).seconds == pytest.approx(11.0)
    assert predict(measured, COMPLETE, 10) is None
    # One measurement: its cost is fixed below its size, proportional above.
    single = [Measured(COMPLETE, 30.0, None, 1_000_000)]
    assert predict(single, COMPLETE, 10).seconds == 30.0
    assert predict(single, COMPLETE, 2_000_000).seconds == 60.0
    # A line never falls below zero, nor costs less for more.
    noisy = [Measured(FAST, s, k, None) for s, k in ((5.0, 10), (1.0, 1000))]
    assert predict(noisy, FAST, 10**6).seconds == pytest.approx(3.0)


def test_one_slow_refresh_does_not_move_the_prediction():
    """The sweep's trap (docs/benchmarks-history.md session 35): a view's build in a new process took 4x its later
    complete refreshes, and an average made the next fast refresh look cheaper than a complete one."""
    complete = [Measured(COMPLETE, s, None, 20_000) for s in (1.40, 1.28, 1.34, 9.8)]
    fast = [Measured(FAST, s, k, None) for s, k in ((1.5, 20), (1.6, 200), (1.7, 2000), (7.5, 10_000))]
    assert predict(complete, COMPLETE, 20_000).seconds == pytest.approx(1.37)
    assert predict(fast, FAST, 20).seconds == pytest.approx(1.5, abs=0.02)
    assert choose([*complete, *fast], window(20, 20_000), 20_000).complete


def test_force_takes_the_method_predicted_cheaper():
    measured = [Measured(FAST, 1.0 + 0.0005 * k, k, None) for k in (1000, 20_000)] + [
        Measured(COMPLETE, 40.0, None, 1_000_000)]
    few = choose(measured, window(2000), 1_000_000)
    assert not few.complete and few.reason.startswith("fast predicted 2.0 s (from 2 refreshes) for 2,000 changed keys")
    many = choose(measured, window(200_000), 1_000_000)
    assert many.complete and many.reason.startswith("a complete refresh is predicted cheaper: fast predicted 101.0 s")
    assert many.fast is not None and many.full is not None and many.full.seconds == 40.0


def test_force_is_never_predicted_to_pay_more_than_the_cheaper_method():
    rng = random.Random()  # examples differ from run to run
    for _ in range(200):
        fast_fixed, per_key, complete_seconds = rng.uniform(0.1, 5), rng.uniform(1e-5, 1e-2), rng.uniform(1, 100)
        rows = rng.randint(1, 10**7)
        measured = [Measured(FAST, fast_fixed + per_key * k, k, None) for k in rng.sample(range(1, 10**5), 3)]
        measured.append(Measured(COMPLETE, complete_seconds, None, rows))
        keys = rng.randint(1, 10**6)
        choice = choose(measured, window(keys), rows)
        assert choice.fast is not None and choice.full is not None
        chosen = choice.full.seconds if choice.complete else choice.fast.seconds
        assert chosen <= min(choice.full.seconds, choice.fast.seconds), (choice, keys)
        assert choice.fast.seconds == pytest.approx(fast_fixed + per_key * keys, rel=1e-6)
