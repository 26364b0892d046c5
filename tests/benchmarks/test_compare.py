"""``python -m benchmarks compare``: two runs of a scenario side by side (pure: records made here)."""

from __future__ import annotations

import pytest

from benchmarks import compare


def _run(revision: str, started: str, values: dict[tuple[str, tuple], float], **parameters) -> list[dict]:
    return [{"scenario": "tpcds", "revision": revision, "started": started, "parameters": parameters,
             "measure": measure, "labels": dict(labels), "value": value, "unit": "s", "notes": [],
             "machine": {}} for (measure, labels), value in values.items()]


def _views(fast: dict[str, float], read: dict[str, float]) -> dict[tuple[str, tuple], float]:
    values: dict[tuple[str, tuple], float] = {("refresh", (("views", 2),)): sum(fast.values())}
    values |= {("view_fast", (("view", v),)): s for v, s in fast.items()}
    values |= {("view_phase", (("phase", "read"), ("view", v))): s for v, s in read.items()}
    return values


def test_the_latest_two_runs_alike_are_compared_each_measure_per_label_and_summed():
    old = _run("aaa111", "2026-12-01T10:00", _views({"q1": 10.0, "q2": 4.0}, {"q1": 6.0, "q2": 1.0}), scale=1)
    subset = _run("bbb222", "2026-12-02T10:00", _views({"q1": 1.0}, {"q1": 0.5}), scale=1, views="q1")
    new = _run("ccc333", "2026-12-03T10:00", _views({"q1": 5.0, "q2": 4.5}, {"q1": 2.0, "q2": 1.5}), scale=1)
    picked = compare.pick([new, subset, old])
    assert picked == (old, new)  # the subset run's parameters are not the latest's

    found = {(measure, labels): (a, b) for (measure, labels), a, b, _ in compare.rows(*picked)}
    assert found[("view_fast", (("sum", ""),))] == (14.0, 9.5)
    assert found[("view_phase", (("phase", "read"), ("sum", "")))] == (7.0, 3.5)
    assert found[("view_fast", (("view", "q1"),))] == (10.0, 5.0)
    assert ("refresh", (("sum", ""),)) not in found  # one record: nothing to sum
    ordered = [key for key, *_ in compare.rows(*picked) if not any(k == "sum" for k, _ in key[1])]
    assert ordered[:2] == [("view_fast", (("view", "q1"),)), ("refresh", (("views", 2),))]  # moved most first

    text = compare.table(*picked, measures=["view_fast"], top=1)
    assert "| view_fast | view=q1 | 10.00 s | 5.00 s | 0.50 |" in text
    assert "view=q2" not in text and "1 smaller moves left out" in text


def test_runs_are_named_by_revision_or_start_and_a_missing_one_is_said():
    old = _run("aaa111", "2026-12-01T10:00", {("refresh", ()): 2.0})
    new = _run("ccc333", "2026-12-03T10:00", {("refresh", ()): 1.0}, scale=2)
    assert compare.pick([new, old], ["2026-12-01", "ccc"]) == (old, new)
    with pytest.raises(ValueError, match="'ddd'"):
        compare.pick([new, old], ["aaa", "ddd"])
    with pytest.raises(ValueError, match="fewer than two runs"):
        compare.pick([new, old])  # their parameters differ
