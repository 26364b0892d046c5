"""What every scenario repeats: a throwaway PostgreSQL, a project written and run as a user runs it,
the engine, timing, and the record of a run (the machine, the revision, each measure).

A scenario receives a :class:`Bench` and its parameters, does its work through it, and records what
it measured with :meth:`Bench.measure`; the runner (``python -m benchmarks``) writes the record as
one JSON line per measure.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg2
import yaml
from psycopg2 import sql

from mvlog.config import SparkConfig
from mvlog.postgres.pgtemp import TempPostgres, free_port
from mvlog.spark import engine
from mvlog.spark.session import close_connect_sessions

ROOT = Path(__file__).resolve().parents[1]
# The Spark a benchmark's commands run on: the engine (a new ``mvlog`` process per command finds it).
SPARK = {"conf": {"spark.driver.memory": "8g", "spark.sql.shuffle.partitions": "4"}}
ENGINE_SPARK = {"master": "local[2]", **SPARK}
# PostgreSQL for data a few GB large (TPC-H, TPC-DS): the defaults are too small for a complete build.
LARGE = {"shared_buffers": "2GB", "work_mem": "256MB", "max_wal_size": "8GB"}


def machine() -> dict[str, Any]:
    """The machine a run measured: its name, cores, memory and Python."""
    memory = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = int(line.split()[1]) * 1024
    return {"node": platform.node(), "cores": os.cpu_count(), "memory_gib": round(memory / 2**30, 1),
            "python": platform.python_version()}


def revision(root: Path = ROOT) -> str:
    """The git revision of the code a run measured (``-dirty`` if it has uncommitted changes)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True).stdout.strip()
    commit = git("rev-parse", "--short=12", "HEAD") or "unknown"
    return commit + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


SPREAD_MIN_VIEWS = 10  # fewer views refreshed completely by both commands tell no spread


def same_work_spread(pairs: Sequence[tuple[float, float]]) -> float | None:
    """How far the same work's seconds move from one command to the next: of a view's complete
    refresh timed by two commands over the same data (``pairs``: its seconds in each), the ratio of
    the slower to the faster, at the 95th percentile over the views (nearest rank). A view's seconds
    depend on what runs beside it, so one view's fast refresh that is slower than its complete one
    by less than this is not told apart from the machine's noise. None with fewer than
    ``SPREAD_MIN_VIEWS`` pairs, or with a pair of zero seconds."""
    if len(pairs) < SPREAD_MIN_VIEWS or any(min(p) <= 0 for p in pairs):
        return None
    ratios = sorted(max(a, b) / min(a, b) for a, b in pairs)
    return ratios[max(0, -(-95 * len(ratios) // 100) - 1)]


@dataclass
class Measure:
    """One number a run measured: its name, value, unit and what it is of (``labels``: a view, a size …)."""

    name: str
    value: float
    unit: str
    labels: dict[str, Any] = field(default_factory=dict)


FAILED_VIEW = re.compile(r"refresh of view (\S+) failed")


def queries_in_postgres(config: Path, output: str) -> str:
    """For each view a failed command's ``output`` names, whether its query itself runs in
    PostgreSQL now, every row fetched (a data error of the query, such as a division by zero, or
    one of mvlog's own statements): a line to add to the failure, while the run's database is
    still there (TPC-DS q36's fast read divided by zero once at SF 1, session 67, and the cause
    was gone with the run)."""
    names = set(FAILED_VIEW.findall(output))
    if not names:
        return ""
    doc = yaml.safe_load(config.read_text())
    said = []
    try:
        with contextlib.closing(psycopg2.connect(doc["source"]["dsn"])) as conn:
            for view in (v for v in doc["views"] if v["name"] in names):
                try:
                    with conn.cursor() as cur:
                        cur.execute(sql.SQL(view["query"]))
                        said.append(f"{view['name']}'s query runs in PostgreSQL now ({len(cur.fetchall())} rows)")
                except psycopg2.Error as exc:
                    said.append(f"{view['name']}'s query fails in PostgreSQL too: {str(exc).strip()}")
                conn.rollback()
    except psycopg2.Error as exc:
        said.append(f"the views' queries could not be run: {str(exc).strip()}")
    return "; ".join(said)


class Bench:
    """A scenario's workbench: a temporary directory, clusters, projects, the engine, its measures."""

    def __init__(self, scenario: str, parameters: dict[str, Any]):
        self.scenario = scenario
        self.parameters = parameters
        self.measures: list[Measure] = []
        self.notes: list[str] = []
        self.started = datetime.now(UTC)
        self._stack = contextlib.ExitStack()
        self.tmp = Path(self._stack.enter_context(tempfile.TemporaryDirectory(prefix=f"bench-{scenario}-")))

    def __enter__(self) -> Bench:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    # -- what a scenario builds -------------------------------------------------------------------

    def cluster(self, settings: dict[str, str] | None = None) -> TempPostgres:
        """A throwaway PostgreSQL for this run (``settings``: the server's, over TempPostgres's defaults)."""
        pg = TempPostgres(settings=settings)
        return self._stack.enter_context(pg)

    def project(self, dsn: str, logs: Sequence[str], views: Sequence[dict], name: str = "mvlog.yaml",
                spark: dict | None = None, capture: str | None = None, warehouse: str | None = None,
                **extra: Any) -> Path:
        """An ``mvlog.yaml`` in the run's directory (its warehouse beside it), as a user writes one
        (``spark``: its settings; by default none that pick a master: commands run on the engine;
        ``capture``: ``source.capture``; ``warehouse``: another than the run's directory)."""
        config = self.tmp / name
        source = {"dsn": dsn, **({"capture": capture} if capture else {})}
        config.write_text(yaml.safe_dump({
            "source": source, "warehouse": warehouse or str(self.tmp / (config.stem + "-wh")), "spark": spark or SPARK,
            "logs": [{"table": t} for t in logs], "views": list(views), **extra}, sort_keys=False))
        return config

    def engine(self) -> str:
        """Start ``mvlog engine`` for the run (stopped at its end): a command whose project picks no
        Spark master runs on it. Its Spark Connect URL."""
        os.environ[engine.ENGINE_DIR_ENV] = str(self.tmp / "engine")
        os.environ.pop("SPARK_REMOTE", None)
        info = engine.start(SparkConfig(**ENGINE_SPARK), port=free_port())
        self._stack.callback(close_connect_sessions)
        self._stack.callback(engine.stop)
        return info.remote

    @staticmethod
    def mvlog(config: Path, *args: str, check: bool = True, env: dict[str, str] | None = None) -> tuple[float, str]:
        """One ``mvlog`` command in a new process, as a scheduler runs it: wall seconds and its output
        (``env``: added to the process's environment)."""
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "mvlog", "-q", "-c", str(config), *args],
                              capture_output=True, text=True, env={**os.environ, **(env or {})})
        seconds = time.perf_counter() - started
        if check and done.returncode != 0:
            said = queries_in_postgres(config, done.stderr + done.stdout)
            raise RuntimeError(f"mvlog {' '.join(args)} failed: {done.stderr.strip()[-2000:]}{done.stdout[-2000:]}"
                               + (f"\n{said}" if said else ""))
        return seconds, done.stdout

    @staticmethod
    def mvlog_json(config: Path, *args: str, env: dict[str, str] | None = None) -> tuple[float, Any]:
        seconds, out = Bench.mvlog(config, *args, "--json", env=env)
        return seconds, json.loads(out)

    # -- what it measured --------------------------------------------------------------------------

    def measure(self, name: str, value: float, unit: str = "s", **labels: Any) -> None:
        """Record one measure (``labels``: what it is of: a view, a size, a variant …)."""
        self.measures.append(Measure(name, float(value), unit, labels))

    def note(self, text: str) -> None:
        """A line the run's record keeps beside its measures (what was loaded, what was checked)."""
        self.notes.append(text)

    def records(self) -> list[dict[str, Any]]:
        """The run as JSON-able lines: one per measure, each with the run's scenario, parameters,
        machine, revision and time."""
        run = {"scenario": self.scenario, "parameters": self.parameters, "machine": machine(),
               "revision": revision(), "started": self.started.isoformat(timespec="seconds"), "notes": self.notes}
        return [{**run, "measure": m.name, "value": m.value, "unit": m.unit, "labels": m.labels}
                for m in self.measures]


def slower_views(per_view: dict[str, list[tuple[dict, dict]]], factor: float, kept: bool = False) -> dict[str, float]:
    """The views whose fast refreshes took more than ``factor`` times their complete ones, each with
    that ratio: the median seconds of the rounds in which force's refresh (the first command) ran the
    view fast, against the median of its ``--complete`` refreshes (the second) over all rounds. A
    round in which force ran the view complete says nothing of its fast refresh. ``kept``: only the
    views force still ran fast in the last round (not those it ran fast to measure, then complete)."""
    slower = {}
    for name, pairs in per_view.items():
        fast = [p[0]["seconds"] or 0 for p in pairs if p[0]["method"] == "fast"]
        if not fast or (kept and pairs[-1][0]["method"] != "fast"):
            continue
        complete = median([p[1]["seconds"] or 0 for p in pairs])
        if median(fast) > factor * complete:
            slower[name] = median(fast) / complete if complete else float("inf")
    return slower


def slower_by(per_view: dict[str, list[tuple[dict, dict]]], factor: float, kept: bool = False) -> int:
    """How many views :func:`slower_views` finds."""
    return len(slower_views(per_view, factor, kept))


def fast_against_complete(bench: Bench, config: Path, rounds: int, change: Callable[[], None],
                          verify: bool = False, require_fast: bool = False, env: dict[str, str] | None = None,
                          **labels: Any) -> list[dict[str, Any]]:
    """Rounds of ``change``, then one ``mvlog refresh --json`` and one ``mvlog refresh --complete
    --json`` (each a new process on the engine); the first round warms the engine and is not
    counted. Records the commands' wall seconds and their ratio (medians), and per view its method,
    its own seconds and phases each way and the rows it read (views run ``concurrency`` at a time,
    so they overlap). ``verify``: ``mvlog verify --full`` after the last fast refresh, which must find
    every view equal to its query; ``require_fast``: every refresh must have been fast; ``env``: added
    to each command's environment; ``labels``: added to the run-level measures. Returns the views as
    ``mvlog status --json`` has them after the rounds. The views slower fast than complete are
    counted (:func:`slower_views`: all of them, those force still ran fast in the last round, those
    slower by more than :func:`same_work_spread`, the noise of the same complete refresh timed by
    both commands)."""
    fast: list[float] = []
    complete: list[float] = []
    per_view: dict[str, list[tuple[dict, dict]]] = {}
    for r in range(rounds + 1):
        change()
        seconds, results = Bench.mvlog_json(config, "refresh", env=env)
        if require_fast and {x["method"] for x in results} != {"fast"}:
            raise RuntimeError(f"a refresh was not fast: {results}")
        if verify and r == rounds:
            _, checked = Bench.mvlog_json(config, "verify", "--full", env=env)
            wrong = {x["view"]: x["status"] for x in checked if x["status"] != "ok"}
            if wrong:
                raise RuntimeError(f"verify found views that differ from their queries: {wrong}")
            bench.note(f"verify --full: all {len(checked)} views equal their queries")
        complete_seconds, complete_results = Bench.mvlog_json(config, "refresh", "--complete", env=env)
        # As it goes (a long run cut short keeps its rounds in the log): the round's two commands
        print(f"round {r}{'' if r else ' (warm-up)'}: refresh {seconds:.1f} s "
              f"({sum(x['method'] == 'fast' for x in results)} of {len(results)} fast), "
              f"--complete {complete_seconds:.1f} s", file=sys.stderr, flush=True)
        if r:
            fast.append(seconds)
            complete.append(complete_seconds)
            by_view = {x["view"]: x for x in complete_results}
            for x in results:
                per_view.setdefault(x["view"], []).append((x, by_view[x["view"]]))
    bench.measure("refresh", median(fast), "s", views=len(per_view), **labels)
    bench.measure("refresh_complete", median(complete), "s", views=len(per_view), **labels)
    bench.measure("complete_over_fast", median(complete) / median(fast), "x", **labels)
    slower = slower_by(per_view, 1.0)
    both_complete: list[tuple[float, float]] = []  # the same complete refresh timed by both commands
    for name, pairs in per_view.items():
        fs = median([p[0]["seconds"] or 0 for p in pairs])
        cs = median([p[1]["seconds"] or 0 for p in pairs])
        method = "/".join(sorted({p[0]["method"] or p[0]["status"] for p in pairs}))
        # The rounds in which force ran it complete too (not all: force runs a view fast once after
        # its build to measure it, so few views are complete in every round)
        same = [p for p in pairs if p[0]["method"] == "complete"]
        if same:
            both_complete.append((median([p[0]["seconds"] or 0 for p in same]),
                                  median([p[1]["seconds"] or 0 for p in same])))
        bench.measure("view_fast", fs, "s", view=name, method=method, **labels)
        bench.measure("view_complete", cs, "s", view=name, **labels)
        bench.measure("view_rows_read", median([p[0]["keys_read"] or 0 for p in pairs]), "rows", view=name, **labels)
        for side, measure in ((0, "view_phase"), (1, "view_complete_phase")):  # the fast run's, --complete's
            for phase in sorted({k for p in pairs for k in (p[side].get("phases") or {})}):
                bench.measure(measure, median([(p[side].get("phases") or {}).get(phase, 0.0) for p in pairs]), "s",
                              view=name, phase=phase, **labels)
    bench.measure("views_ran_fast", sum("fast" in "/".join(p[0]["method"] or "" for p in pairs)
                                        for pairs in per_view.values()), "count", of="views", **labels)
    bench.measure("fast_slower_than_complete", slower, "count", **labels)
    kept_slower = slower_views(per_view, 1.0, kept=True)
    bench.measure("fast_kept_slower_than_complete", len(kept_slower), "count", **labels)
    for name, ratio in kept_slower.items():  # which views that count counts
        bench.measure("view_kept_slower", ratio, "x", view=name, **labels)
    spread = same_work_spread(both_complete)  # the noise the comparison above stands in
    if spread is not None:
        bench.measure("same_work_spread", spread, "x", views=len(both_complete), **labels)
        bench.measure("fast_slower_beyond_spread", slower_by(per_view, spread), "count", **labels)
    _, status = Bench.mvlog_json(config, "status", env=env)
    capable = [v["name"] for v in status["views"] if v.get("fast_refresh")]
    bench.measure("views_fast_capable", len(capable), "count", of="views", views=len(status["views"]), **labels)
    return list(status["views"])
