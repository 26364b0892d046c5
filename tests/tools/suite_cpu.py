"""Where the test suite's CPU goes, test by test: a pytest plugin.

    PYTHONPATH=tests/tools python -m pytest -p suite_cpu -n 2 --dist loadfile -m "not deep"

Around each test it reads the CPU of the worker's own Python, of the worker's descendants (its
Spark JVM, the ``mvlog`` processes a test starts; those already reaped count through
``RUSAGE_CHILDREN``) and of the run's shared Spark Connect server (``$MVLOG_TEST_ENGINE_DIR``). The
server serves both workers, so its CPU during a test may be partly the other worker's. At the end
the process that runs pytest prints a markdown table of the test files by CPU (and writes every
test's numbers to ``suite_cpu.json`` in the current directory, and each file's wall seconds to
``file_seconds.json``: copied over ``tests/file_seconds.json``, they set the order in which later
runs hand the files out, longest first: ``tests/file_order.py``).
"""

from __future__ import annotations

import json
import os
import resource
import tempfile
import time
from pathlib import Path

import pytest

TICKS = os.sysconf("SC_CLK_TCK")
RESULTS_ENV = "MVLOG_SUITE_CPU_DIR"
SHOWN_FILES = 25
_results: list[dict] = []


def _processes() -> dict[int, tuple[int, float]]:
    """Every process: its parent and its user + system CPU seconds."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended
            continue
        found[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS)
    return found


def _descendants_cpu(processes: dict[int, tuple[int, float]], root: int) -> float:
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in processes.items():
        children.setdefault(parent, []).append(pid)
    total, stack = 0.0, list(children.get(root, []))
    while stack:
        pid = stack.pop()
        total += processes[pid][1]
        stack.extend(children.get(pid, []))
    return total


def _server_pid() -> int | None:
    directory = os.environ.get("MVLOG_TEST_ENGINE_DIR")
    try:
        return int(json.loads(Path(directory or "", "engine.json").read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return None


def _sample() -> tuple[float, float, float, int | None, float]:
    """(monotonic time, own CPU, descendants' CPU, the server's pid, its CPU)."""
    processes = _processes()
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    server = _server_pid()
    return (time.monotonic(), own.ru_utime + own.ru_stime,
            _descendants_cpu(processes, os.getpid()) + reaped.ru_utime + reaped.ru_stime,
            server, processes.get(server, (0, 0.0))[1] if server else 0.0)


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and RESULTS_ENV not in os.environ:
        os.environ[RESULTS_ENV] = tempfile.mkdtemp(prefix="mvlog-suite-cpu-")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    before = _sample()
    yield
    after = _sample()
    server = after[4] - before[4] if before[3] == after[3] else after[4]  # a server started in the test
    _results.append({"test": item.nodeid, "wall": after[0] - before[0], "python": after[1] - before[1],
                     "descendants": after[2] - before[2], "server": server})


def pytest_sessionfinish(session: pytest.Session) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is not None:
        Path(os.environ[RESULTS_ENV], f"{worker}.json").write_text(json.dumps(_results))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    results = list(_results)
    for path in sorted(Path(os.environ[RESULTS_ENV]).glob("*.json")):
        results += json.loads(path.read_text())
    Path("suite_cpu.json").write_text(json.dumps(results, indent=1))
    columns = ("wall", "python", "descendants", "server")
    by_file: dict[str, list[float]] = {}
    for result in results:
        sums = by_file.setdefault(result["test"].split("::")[0], [0.0] * len(columns))
        for i, key in enumerate(columns):
            sums[i] += result[key]
    # Each file's wall seconds: copied over tests/file_seconds.json, the order later runs hand files out in.
    Path("file_seconds.json").write_text(
        json.dumps({name: round(sums[0], 1) for name, sums in sorted(by_file.items())}, indent=1) + "\n")
    write = terminalreporter.write_line
    write("")
    write("| test file | wall s | worker Python CPU-s | descendants CPU-s | server CPU-s |")
    write("|---|---:|---:|---:|---:|")
    for name, sums in sorted(by_file.items(), key=lambda item: -sum(item[1][1:]))[:SHOWN_FILES]:
        write(f"| {name} | " + " | ".join(f"{value:.0f}" for value in sums) + " |")
    write("| all | " + " | ".join(f"{sum(r[key] for r in results):.0f}" for key in columns) + " |")
