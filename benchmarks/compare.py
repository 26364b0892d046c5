"""Two runs of a scenario side by side (``python -m benchmarks compare NAME``): each measure the
two runs share, per label, the older run's value, the newer's and their ratio, the largest moves
first; a measure taken per label (a view, a phase) also summed over its labels.

The runs are the latest two whose parameters are the latest's (a subset run of three views is
no yardstick for the whole set), or the two ``--runs`` names: each the start of a run's revision
or of the time it started (``eac56eb``, ``2026-12-04T13``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

Run = list[dict[str, Any]]  # the records of one run, as benchmarks.report loads them
Key = tuple[str, tuple[tuple[str, Any], ...]]  # a measure and its labels


def _named(run: Run, name: str) -> bool:
    first = run[0]
    return first["revision"].startswith(name) or first["started"].startswith(name)


def pick(runs: Sequence[Run], names: Sequence[str] = ()) -> tuple[Run, Run]:
    """The older and the newer run to compare, of ``runs`` (newest first): those ``names`` name
    (the newest run of each name), else the latest two with the latest's parameters. A ValueError
    says which cannot be found."""
    if names:
        if len(names) != 2:
            raise ValueError("--runs names two runs, as OLD,NEW")
        found = []
        for name in names:
            match = next((run for run in runs if _named(run, name)), None)
            if match is None:
                raise ValueError(f"no run whose revision or start begins with {name!r}")
            found.append(match)
        return found[0], found[1]
    alike = [run for run in runs if run[0]["parameters"] == runs[0][0]["parameters"]] if runs else []
    if len(alike) < 2:
        raise ValueError("fewer than two runs with the latest run's parameters: name them with --runs OLD,NEW")
    return alike[1], alike[0]


def _values(run: Run, measures: Sequence[str]) -> dict[Key, tuple[float, str]]:
    return {(r["measure"], tuple(sorted(r["labels"].items()))): (r["value"], r["unit"]) for r in run
            if not measures or r["measure"] in measures}


def _summed(values: dict[Key, tuple[float, str]]) -> dict[Key, tuple[float, str]]:
    """Each measure taken per label summed over its labels, under the label ``sum`` (a phase's
    seconds over every view, ``view_phase`` by phase as well as in all)."""
    taken = Counter(measure for measure, _ in values)
    sums: dict[Key, tuple[float, str]] = {}
    for (measure, labels), (value, unit) in values.items():
        if taken[measure] < 2 or unit not in ("s", "rows"):
            continue
        for kept in [(), *[(label,) for label in labels if label[0] == "phase"]]:
            key = (measure, (*kept, ("sum", "")))
            sums[key] = (sums.get(key, (0.0, unit))[0] + value, unit)
    return sums


def rows(old: Run, new: Run, measures: Sequence[str] = ()) -> list[tuple[Key, float, float, str]]:
    """(measure and labels, old value, new value, unit) of every measure both runs took (of
    ``measures``, if given), their sums over labels first, then by how much they moved."""
    before, after = _values(old, measures), _values(new, measures)
    before |= _summed(before)
    after |= _summed(after)
    shared = [(key, before[key][0], after[key][0], after[key][1]) for key in after if key in before]
    return sorted(shared, key=lambda row: (not any(k == "sum" for k, _ in row[0][1]), -abs(row[2] - row[1])))


def _describe(run: Run) -> str:
    first = run[0]
    return f"{first['revision'][:9]} ({first['started'][:16]})"


def table(old: Run, new: Run, measures: Sequence[str] = (), top: int = 40) -> str:
    """The comparison as a Markdown table: every sum, then the ``top`` largest moves."""
    found = rows(old, new, measures)
    sums = [row for row in found if any(k == "sum" for k, _ in row[0][1])]
    shown = sums + [row for row in found if row not in sums][:top]
    lines = [f"| measure | labels | {_describe(old)} | {_describe(new)} | new / old |", "|---|---|---:|---:|---:|"]
    for (measure, labels), a, b, unit in shown:
        named = ", ".join(f"{k}={v}" if v != "" else k for k, v in labels)
        ratio = f"{b / a:.2f}" if a else "–"
        lines.append(f"| {measure} | {named} | {a:,.2f} {unit} | {b:,.2f} {unit} | {ratio} |")
    if len(found) > len(shown):
        lines.append(f"\n({len(found) - len(shown)} smaller moves left out: --top shows more)")
    return "\n".join(lines)
