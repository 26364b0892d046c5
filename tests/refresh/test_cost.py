"""``refresh: force``'s choice by measured cost (pure, no database): predictions from the view's own
refreshes, the cheaper method chosen, the build scaled and a method never run predicted from the
other views' costs, the share rule until then."""

from __future__ import annotations

import random

import pytest

from mvlog.model import FleetCost, Measured, RefreshMethod, WindowSize
from mvlog.pipeline.cost import (
    COMPLETE_ABOVE_FRACTION,
    COMPLETE_MIN_KEYS,
    FIRST_FAST_WITHIN,
    FLEET_MIN_VIEWS,
    REMEASURE_WITHIN,
    SAMPLES,
    SIZE_SPAN,
    choose,
    expected_seconds,
    measured_both,
    predict,
    share_rule,
)

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


def test_sizes_too_close_to_tell_predict_as_one_size():
    """The fleet's trap (BENCHMARKS.md session 50): an aggregate of 95 to 100 groups,
    refreshed completely in 2.0-2.6 s, made a line of about 1 s a group through zero (its intercept
    kept non-negative) that predicted 106 s, and force refreshed it fast at twice the cost."""
    complete = [Measured(COMPLETE, s, None, rows) for s, rows in ((2.0, 95), (2.6, 100), (2.1, 96), (2.5, 99))]
    assert predict(complete, COMPLETE, 97).seconds == pytest.approx(2.3)  # the median, at or below its size
    assert predict(complete, COMPLETE, 196).seconds == pytest.approx(2.3 * 196 / 97.5)  # proportional above
    fast = [Measured(FAST, s, k, None) for s, k in ((3.4, 200), (3.9, 210))]
    assert choose([*complete, *fast], window(205, 20_000), 98).complete
    # Sizes far enough apart still give a line.
    spread = [Measured(FAST, 1.0 + 0.001 * k, k, None) for k in (100, int(SIZE_SPAN * 100))]
    assert predict(spread, FAST, 1000).seconds == pytest.approx(2.0)


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
        low = rng.randint(1, 10**4)  # sizes that span enough to part the fixed cost from the cost per key
        sizes = [low, rng.randint(int(SIZE_SPAN * low), 10**5), rng.randint(low, 10**5)]
        measured = [Measured(FAST, fast_fixed + per_key * k, k, None) for k in sizes]
        measured.append(Measured(COMPLETE, complete_seconds, None, rows))
        keys = rng.randint(1, 10**6)
        choice = choose(measured, window(keys), rows)
        assert choice.fast is not None and choice.full is not None
        chosen = choice.full.seconds if choice.complete else choice.fast.seconds
        assert chosen <= min(choice.full.seconds, choice.fast.seconds), (choice, keys)
        assert choice.fast.seconds == pytest.approx(fast_fixed + per_key * keys, rel=1e-6)


def fleet_on_a_line(fixed: float, per_complete: float, view_class: str = "aggregate", build_factor: float = 2.0,
                    completes: tuple[float, ...] = (4.0, 10.0, 30.0)) -> list[FleetCost]:
    """Other views whose fast refresh costs ``fixed + per_complete x`` their complete one, whose build
    cost ``build_factor`` x their complete refreshes."""
    return [FleetCost(view_class, fixed + per_complete * c, c, c * build_factor) for c in completes]


def test_a_view_measured_only_by_its_build_is_predicted_from_the_other_views():
    """The first refresh after apply (#75): the build's cost scaled as the other views' builds were,
    the fast refresh never run predicted on the line through their costs — and each prediction
    says what it rests on."""
    built = [Measured(COMPLETE, 3.0, None, 50_000, build=True)]
    cheap = choose(built, window(100), 50_000, "aggregate", fleet_on_a_line(4.0, 0.1))
    # complete: 3.0 / 2 = 1.5 s; fast: 4.0 + 0.1 x 1.5 = 4.15 s, more than REMEASURE_WITHIN x 1.5 s
    assert cheap.complete and cheap.full is not None and cheap.fast is not None
    assert cheap.full.seconds == pytest.approx(1.5) and cheap.fast.seconds == pytest.approx(4.15)
    assert "its build's 3.0 s x 0.50" in cheap.reason and "the line through 3 other aggregate views'" in cheap.reason
    # A view whose complete refresh is long: its fast refresh is predicted cheaper.
    heavy = choose([Measured(COMPLETE, 120.0, None, 10**6, build=True)], window(100), 10**6, "aggregate",
                   fleet_on_a_line(2.0, 0.1))
    assert not heavy.complete and heavy.fast is not None and heavy.fast.seconds == pytest.approx(8.0)


def test_the_other_views_of_its_class_predict_first():
    built = [Measured(COMPLETE, 10.0, None, 50_000, build=True)]
    fleet = fleet_on_a_line(0.5, 0.1, "simple") + fleet_on_a_line(4.0, 1.5, "composed")
    simple = choose(built, window(100), 50_000, "simple", fleet)
    composed = choose(built, window(100), 50_000, "composed", fleet)
    assert simple.fast is not None and simple.fast.seconds == pytest.approx(1.0) and not simple.complete
    assert composed.fast is not None and composed.fast.seconds == pytest.approx(11.5) and composed.complete
    # Too few of its class: all the other views' line.
    lonely = choose(built, window(100), 50_000, "topn", fleet)
    assert lonely.fast is not None and "other views'" in lonely.reason


def test_too_few_other_views_or_a_large_window_leave_the_share_rule():
    built = [Measured(COMPLETE, 3.0, None, 50_000, build=True)]
    few = fleet_on_a_line(2.0, 0.1, completes=tuple(range(1, FLEET_MIN_VIEWS)))
    choice = choose(built, window(100), 50_000, "aggregate", few)
    assert not choice.complete and "by the share rule" in choice.reason and choice.fast is None
    share = choose(built, window(5 * 10**6), 50_000, "aggregate", fleet_on_a_line(0.1, 0.0))
    assert share.complete and "changed keys are 50% of public.t" in share.reason


def test_a_view_never_refreshed_completely_since_its_state_has_a_complete_prediction_too():
    fast_only = [Measured(FAST, 6.0, 100, None)]
    choice = choose(fast_only, window(100), 50_000, "aggregate", fleet_on_a_line(2.0, 0.1))
    # complete on the line through (fast, complete): (2.4, 4), (3, 10), (5, 30) -> at 6.0 s
    assert choice.full is not None and choice.full.seconds > 30 and not choice.complete
    assert not measured_both(fast_only) and not measured_both([*fast_only, Measured(COMPLETE, 1, None, 1, build=True)])
    assert measured_both([*fast_only, Measured(COMPLETE, 1, None, 1)])


def test_the_build_predicts_only_until_a_complete_refresh_is_measured():
    measured = [Measured(COMPLETE, 1.2, None, 20_000), Measured(COMPLETE, 9.8, None, 20_000, build=True)]
    full = predict(measured, COMPLETE, 20_000)
    assert full is not None and full.seconds == pytest.approx(1.2) and full.source == "from 1 refresh"
    fleet = fleet_on_a_line(2.0, 0.1)
    choice = choose([*measured, Measured(FAST, 1.5, 20, None)], window(20), 20_000, "aggregate", fleet)
    assert choice.full is not None and choice.full.seconds == pytest.approx(1.2) and choice.complete


def test_predictions_from_random_fleets_are_never_negative_and_choose_the_cheaper():
    rng = random.Random()  # examples differ from run to run
    for _ in range(200):
        fleet = [FleetCost(rng.choice(["simple", "aggregate"]), rng.uniform(0.1, 50), rng.uniform(0.1, 50),
                           rng.choice([None, rng.uniform(0.1, 100)])) for _ in range(rng.randint(0, 12))]
        built = [Measured(COMPLETE, rng.uniform(0.1, 100), None, rng.randint(1, 10**6), build=True)]
        choice = choose(built, window(rng.randint(1, 1000)), 10**7, rng.choice(["simple", "aggregate"]), fleet)
        if choice.fast is None or choice.full is None:
            assert not choice.complete and "share rule" in choice.reason
            continue
        assert choice.fast.seconds >= 0 and choice.full.seconds >= 0
        chosen, other = (choice.full, choice.fast) if choice.complete else (choice.fast, choice.full)
        if "measured once" in choice.reason:  # the fast refresh never run, predicted close: measured
            assert not choice.complete and chosen.seconds <= REMEASURE_WITHIN * other.seconds, choice
            continue
        assert choice.complete == (choice.full.seconds < choice.fast.seconds), choice


def test_right_after_apply_the_other_views_builds_stand_for_their_complete_refreshes():
    """Every view measured only by its build, some already refreshed fast in this round: their
    builds against their fast refreshes predict the next view's fast refresh from its build."""
    fleet = [FleetCost("aggregate", 1 + 0.5 * b, None, b) for b in (2.0, 4.0, 8.0)]
    heavy = choose([Measured(COMPLETE, 10.0, None, 10**6, build=True)], window(100), 10**6, "aggregate", fleet)
    assert heavy.fast is not None and heavy.fast.seconds == pytest.approx(6.0) and not heavy.complete
    light = choose([Measured(COMPLETE, 0.5, None, 10**6, build=True)], window(100), 10**6, "aggregate", fleet)
    assert light.fast is not None and light.fast.seconds == pytest.approx(1.25) and light.complete
    assert "the line through 3 other aggregate views'" in light.reason


def history(refreshes: list[Measured]) -> list[Measured]:
    """What the catalog hands ``choose`` (``Catalog.measured``): the latest SAMPLES of each method,
    newest first, from ``refreshes`` (oldest first)."""
    newest = refreshes[::-1]
    kept = {id(m) for method in (FAST, COMPLETE) for m in [m for m in newest if m.method is method][:SAMPLES]}
    return [m for m in newest if id(m) in kept]


def test_a_method_not_run_in_the_latest_refreshes_is_measured_again_when_it_is_close():
    """Two slow fast refreshes (a cold process, a busy machine) must not decide for ever (the
    freshness benchmark's views: complete in 44 of 46 refreshes, docs/benchmarks-history.md, session 43)."""
    slow_fast = [Measured(FAST, 4.0, 100, None), Measured(FAST, 4.2, 100, None)]
    completes = [Measured(COMPLETE, 3.0, None, 10_000) for _ in range(SAMPLES)]
    again = choose(history([*slow_fast, *completes]), window(100), 10_000)
    assert not again.complete and again.reason.startswith(f"fast measured again (not run in the latest {SAMPLES}")
    # One complete refresh fewer since: the fast ones still count, complete is cheaper.
    assert choose(history([*slow_fast, *completes[1:]]), window(100), 10_000).complete
    # Far from the other method (over REMEASURE_WITHIN x): not run again.
    far = [Measured(FAST, 3.0 * REMEASURE_WITHIN * 1.1, 100, None)]
    kept = choose(history([*far, *completes]), window(100), 10_000)
    assert kept.complete and "measured again" not in kept.reason
    # The new measurement predicts alone: the stale ones do not outvote it.
    cheap = choose(history([*slow_fast, *completes, Measured(FAST, 2.0, 100, None)]), window(100), 10_000)
    assert not cheap.complete and cheap.fast is not None and cheap.fast.seconds == 2.0
    dear = choose(history([*slow_fast, *completes, Measured(FAST, 3.5, 100, None)]), window(100), 10_000)
    assert dear.complete and dear.reason.startswith("a complete refresh is predicted cheaper")


@pytest.mark.parametrize("fast_seconds", [2.0, 4.0])
def test_a_force_view_finds_its_cheaper_method_and_pays_little_for_looking(fast_seconds):
    """A view refreshed 60 times by force, whose build (4.5 s) and first two fast refreshes (5 s) were slow: it
    comes to the cheaper method, and runs the dearer one at most once in SAMPLES + 1 refreshes."""
    rng = random.Random()  # examples differ from run to run
    costs = {FAST: fast_seconds, COMPLETE: 3.0}
    refreshes = [Measured(COMPLETE, 4.5, None, 10_000, build=True),
                 Measured(FAST, 5.0, 100, None), Measured(FAST, 5.2, 100, None)]
    chosen = []
    for _ in range(60):
        choice = choose(history(refreshes), window(100), 10_000)
        method = COMPLETE if choice.complete else FAST
        chosen.append(method)
        seconds = costs[method] * rng.uniform(0.9, 1.1)
        refreshes.append(Measured(method, seconds, 100 if method is FAST else None,
                                  None if method is FAST else 10_000))
    cheaper = min(costs, key=costs.__getitem__)
    found = next(i for i in range(len(chosen)) if chosen[i:i + 3] == [cheaper] * 3)  # settled on it
    assert found <= 2 * (SAMPLES + 1), chosen  # the build and the slow refreshes mislead for a while
    looks = [i for i in range(found, len(chosen)) if chosen[i] is not cheaper]
    assert len(looks) <= 1 + (len(chosen) - found) // (SAMPLES + 1), chosen  # then a look per SAMPLES + 1


@pytest.mark.parametrize("fast_seconds", [2.0, 20.0])
def test_a_method_the_other_views_predict_close_is_measured_once(fast_seconds):
    """The other views' line is no measure of one view: TPC-DS's q11 at scale 0.1 (BENCHMARKS.md
    session 51). A fast refresh never run, predicted within REMEASURE_WITHIN of the complete one, runs
    once; then the view's own refreshes decide."""
    fleet = fleet_on_a_line(0.0, 1.2, completes=(3.0, 4.0, 5.0))  # every other view: fast dearer than complete
    refreshes = [Measured(COMPLETE, 40.0, None, 10_000, build=True), Measured(COMPLETE, 37.0, None, 10_000)]
    first = choose(history(refreshes), window(100), 10_000, "aggregate", fleet)
    assert first.fast is not None and first.full is not None and first.fast.seconds > first.full.seconds
    assert not first.complete and first.reason.startswith(f"fast measured once (never run; predicted from the "
                                                          f"other views within {REMEASURE_WITHIN:g}x)")
    refreshes.append(Measured(FAST, fast_seconds, 100, None))
    then = choose(history(refreshes), window(100), 10_000, "aggregate", fleet)
    assert then.complete == (fast_seconds > 37.0) and "measured once" not in then.reason
    # Predicted far dearer by the other views: not run.
    far = choose(history(refreshes[:2]), window(100), 10_000, "aggregate", fleet_on_a_line(80.0, 1.0))
    assert far.complete and "measured once" not in far.reason


@pytest.mark.parametrize("later_fast", [20.0, 60.0])
def test_a_cold_first_fast_refresh_is_measured_again_and_then_predicts_no_more(later_fast):
    """TPC-DS q23 at scale 0.5 (BENCHMARKS.md session 59): its first fast refresh after apply took
    147.7 s against a complete one of about 50 s; a later one took 34 s. The first fast refresh after
    a build runs fast once more, and the later one predicts alone."""
    rng = random.Random()  # examples differ from run to run
    complete = rng.uniform(40.0, 60.0)
    first = Measured(FAST, complete * rng.uniform(1.5, FIRST_FAST_WITHIN * 0.95), 50_000, None, first_after_build=True)
    refreshes = [Measured(COMPLETE, complete, None, 10_000)]
    again = choose([first, *refreshes], window(50_000), 10_000)
    assert not again.complete and again.reason.startswith("fast measured again (its only measure is its first")
    later = Measured(FAST, later_fast, 50_000, None)
    then = choose([later, first, *refreshes], window(50_000), 10_000)
    assert then.fast is not None and then.fast.seconds == later_fast  # the cold one predicts no more
    assert then.complete == (later_fast > complete) and "measured again" not in then.reason
    # Far dearer than complete, even cold: not run again.
    far = Measured(FAST, complete * FIRST_FAST_WITHIN * 1.1, 50_000, None, first_after_build=True)
    assert choose([far, *refreshes], window(50_000), 10_000).complete
    # A first fast refresh that was not the only one measured changes nothing: the others predict.
    warm = [Measured(FAST, complete * 2, 50_000, None), Measured(FAST, complete * 2.1, 50_000, None)]
    assert choose([*warm, first, *refreshes], window(50_000), 10_000).complete


def test_a_cold_first_complete_refresh_predicts_only_until_another_is_measured():
    """TPC-DS q15 at scale 0.5 (BENCHMARKS.md session 59): its first complete refresh after apply took
    14.1 s, a later one 6.5 s, and force kept running fast at 10 s. Like the build, the first complete
    refresh after it predicts only until another is measured."""
    rng = random.Random()  # examples differ from run to run
    warm = rng.uniform(5.0, 8.0)
    cold = Measured(COMPLETE, warm * rng.uniform(2.0, 3.0), None, 10_000, first_after_build=True)
    build = Measured(COMPLETE, warm * 4, None, 10_000, build=True)
    fast = Measured(FAST, warm * 1.5, 50_000, None)
    alone = choose([fast, cold, build], window(50_000), 10_000)
    assert alone.full is not None and alone.full.seconds == cold.seconds and not alone.complete
    later = Measured(COMPLETE, warm, None, 10_000)
    then = choose([fast, later, cold, build], window(50_000), 10_000)
    assert then.full is not None and then.full.seconds == warm and then.complete


def test_the_seconds_to_order_work_by_are_the_method_s_own_medians_else_what_is_known():
    force = RefreshMethod.FORCE
    assert expected_seconds(None, force) is None
    assert expected_seconds(FleetCost("simple", None, None, None), FAST) is None
    built = FleetCost("simple", None, None, 30.0)  # only its build
    assert [expected_seconds(built, m) for m in (FAST, COMPLETE, force)] == [30.0, 30.0, 30.0]
    both = FleetCost("simple", 2.0, 10.0, 30.0)
    assert [expected_seconds(both, m) for m in (FAST, COMPLETE, force)] == [2.0, 10.0, 2.0]
    dearer_fast = FleetCost("simple", 12.0, 10.0, 30.0)
    assert expected_seconds(dearer_fast, force) == 10.0
