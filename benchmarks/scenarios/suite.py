"""The test suite's own cost: the README's test command (the main tier) timed as a whole on the
revision measured, with how many tests passed (the suite's budget is about 20 minutes on the
project's 2-core machine). ``tests/tools/suite_cpu.py`` shows where the time goes, by test file.

    python -m benchmarks run suite
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from typing import Any

from benchmarks.harness import ROOT, Bench
from benchmarks.scenarios import Parameter, Scenario


def run(bench: Bench, p: dict[str, Any]) -> None:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", str(p["workers"]),
               "--dist", "loadfile", "-m", p["marks"], *p["paths"].split()]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-500:]
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|failed|errors?|skipped)", summary)}
    if done.returncode != 0:
        raise RuntimeError(f"the suite failed: {summary}")
    paths = f" {p['paths']}" if p["paths"] else ""
    bench.note(f"`python -m pytest -n {p['workers']} --dist loadfile -m \"{p['marks']}\"{paths}`")
    bench.measure("suite", seconds, "s", passed=counts.get("passed", 0))


SCENARIO = Scenario("suite", "the README's test command (the main tier), timed as a whole", {
    "workers": Parameter(2, 2, "pytest-xdist workers (-n)"),
    "marks": Parameter("not deep", "not deep and not integration", "the tests chosen (-m)"),
    "paths": Parameter("", "tests/sql", "test paths (default: all)"),
}, run)
