"""What a fast refresh reads (pure, no database): its changed keys' rows, or its view's whole query
where the view's refreshes measured that cheaper (:mod:`mvlog.pipeline.readscope`)."""

from __future__ import annotations

import random

from mvlog.model import Measured, RefreshMethod
from mvlog.pipeline.readscope import SAMPLES, WHOLE_MAX_ROWS, whole_read

FAST, COMPLETE = RefreshMethod.FAST, RefreshMethod.COMPLETE


def fast(read: float, whole: bool = False, first: bool = False) -> Measured:
    return Measured(FAST, read + 2.0, 10, None, first_after_build=first,
                    phases={"prepare": 0.5, "read_whole" if whole else "read": read, "write": 1.0, "record": 0.5})


def complete(write: float, build: bool = False) -> Measured:
    return Measured(COMPLETE, write + 5.0, None, 1000, build=build, phases={"prepare": 0.2, "write": write})


def test_a_keyed_read_dearer_than_the_whole_query_s_read_and_write_reads_whole():
    measured = [fast(30.0), fast(40.0), complete(4.0), complete(6.0, build=True)]
    assert whole_read(measured, 52) == ("its whole query read (4.0 s, its latest complete refresh, read and "
                                        "written) costs less than its changed keys' rows (35.0 s)")
    assert whole_read([fast(3.0), complete(4.0)], 52) is None  # the keyed read is the cheaper
    assert whole_read([fast(30.0), complete(4.0)], WHOLE_MAX_ROWS + 1) is None  # too large to read whole
    assert whole_read([fast(30.0), complete(4.0)], None) is None  # rows unknown
    assert whole_read([complete(4.0)], 52) is None  # no keyed read measured yet: read keys, and measure it
    assert whole_read([fast(30.0)], 52) is None  # nothing measures the whole query


def test_the_build_measures_the_whole_query_only_while_no_other_complete_refresh_did():
    assert "its build, read and written" in whole_read([fast(30.0), complete(6.0, build=True)], 52)
    assert whole_read([fast(30.0), complete(40.0), complete(6.0, build=True)], 52) is None


def test_whole_reads_measure_themselves_and_the_keyed_read_runs_again_after_samples_of_them():
    history = [fast(5.0, whole=True), fast(30.0), complete(9.0)]
    assert "(5.0 s, its latest whole read)" in whole_read(history, 52)
    # the first fast refresh after the build (cold) counts only while it is the only keyed one
    assert whole_read([fast(8.0), fast(30.0, first=True), complete(9.0)], 52) is None
    assert whole_read([fast(30.0, first=True), complete(9.0)], 52) is not None
    streak = [fast(5.0, whole=True)] * SAMPLES + [fast(30.0), complete(9.0)]
    assert whole_read(streak, 52) is None  # the keyed read measured again
    assert whole_read([fast(2.0), *streak], 52) is None  # ... and was cheaper this time (the older 30 s aside)
    assert whole_read([fast(60.0), *streak], 52) is not None  # ... or not: whole again


def test_refreshes_measured_before_phases_were_recorded_decide_nothing():
    old = [Measured(FAST, 40.0, 10, None), Measured(COMPLETE, 5.0, None, 1000)]
    assert whole_read(old, 52) is None


def test_whole_read_is_chosen_exactly_when_its_measure_is_below_the_keyed_one():
    rng = random.Random()
    for _ in range(200):
        keyed = [round(rng.uniform(0.1, 50), 2) for _ in range(rng.randint(1, 6))]
        whole = [round(rng.uniform(0.1, 50), 2) for _ in range(rng.randint(1, 6))]
        measured = [*(fast(k) for k in keyed), *(complete(w) for w in whole)]
        median_of = lambda xs: sorted(xs[:SAMPLES])[len(xs[:SAMPLES]) // 2] if len(xs[:SAMPLES]) % 2 else \
            sum(sorted(xs[:SAMPLES])[len(xs[:SAMPLES]) // 2 - 1:len(xs[:SAMPLES]) // 2 + 1]) / 2  # noqa: E731
        assert (whole_read(measured, 100) is not None) == (median_of(whole) < median_of(keyed)), (keyed, whole)
