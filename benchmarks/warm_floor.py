"""The fixed cost of a refresh: where a warm fast refresh of a handful of keys spends its time,
what a new ``mvlog refresh`` process costs with and without ``mvlog engine``, and what
refreshing several views concurrently saves.

    python benchmarks/warm_floor.py --rows 1000000 --keys 5 --repeat 5

On a throwaway PostgreSQL with the orders/customers data of refresh_vs_complete.py and its
three views (simple, join, aggregate):

1. Warm, in this process (a SparkSession of its own, and then over Spark Connect to an
   engine): ``--repeat`` fast refreshes per view of ``--keys`` changed orders each; mvlog's
   phases (``RefreshResult.phases``), the Spark jobs and tasks each refresh ran (from Spark's
   event log) and the SQL statements they came from, and Delta's operationMetrics of the MERGE.
2. Cold: one new ``mvlog refresh VIEW`` process per refresh, on a Spark of its own and on
   the engine (``SPARK_REMOTE``), next to a complete refresh the same way.
3. Concurrency: the three views refreshed together with ``concurrency`` 1 and 3.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path

import psycopg2
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from refresh_vs_complete import VIEWS, load, merge_metrics  # noqa: E402

from mvlog.config import load_config  # noqa: E402
from mvlog.postgres.pgtemp import TempPostgres, free_port  # noqa: E402
from mvlog.project import Project  # noqa: E402
from mvlog.spark import engine  # noqa: E402
from mvlog.spark.session import close_connect_sessions  # noqa: E402

PHASES = ("prepare", "read", "write", "record")


def change_keys(dsn: str, keys: int, round_: int, rows: int) -> None:
    """Change ``keys`` orders spread over the table (amount; the customer of some)."""
    step = max(rows // keys, 1)
    ids = [1 + (i * step + round_ * 7919) % rows for i in range(keys)]
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("UPDATE orders SET amount = amount + 1, customer_id = CASE WHEN id %% 2 = 0 "
                    "THEN 1 + customer_id %% 50 ELSE customer_id END WHERE id = ANY(%s)", (ids,))


def events(directory: Path) -> list[dict]:
    """Every event of every Spark application that logged into ``directory`` (Spark 4 writes
    each application's log as a directory of rolled files)."""
    lines = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file() and not p.name.startswith(".")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                lines.append(json.loads(line))
            except ValueError:  # a file still being written when its application was stopped
                pass
    return lines


def jobs_in(log: list[dict], start: float, end: float) -> dict:
    """Jobs submitted within [start, end] (epoch seconds): count, tasks, summed job seconds, and
    the jobs per SQL statement (the description Spark gives the SQL execution)."""
    sql = {e["executionId"]: (e.get("description") or "")[:70].replace("\n", " ")
           for e in log if e["Event"].endswith("SparkListenerSQLExecutionStart")}
    ends = {e["Job ID"]: e["Completion Time"] for e in log if e["Event"] == "SparkListenerJobEnd"}
    jobs, tasks, seconds, by_sql = 0, 0, 0.0, Counter()
    for e in log:
        if e["Event"] != "SparkListenerJobStart" or not start * 1000 <= e["Submission Time"] <= end * 1000:
            continue
        jobs += 1
        tasks += sum(s["Number of Tasks"] for s in e["Stage Infos"])
        seconds += (ends.get(e["Job ID"], e["Submission Time"]) - e["Submission Time"]) / 1000
        execution = (e.get("Properties") or {}).get("spark.sql.execution.id")
        by_sql[sql.get(int(execution), "?") if execution is not None else "(no SQL: RDD action)"] += 1
    return {"jobs": jobs, "tasks": tasks, "job_seconds": seconds, "by_sql": by_sql}


def warm_runs(project: Project, dsn: str, views: list[str], args, tag: str) -> list[dict]:
    runs = []
    for view in views:
        for r in range(args.repeat + 1):  # the first one warms this view's code paths: not counted
            change_keys(dsn, args.keys, sum(map(ord, tag + view)) * 97 + r * 13, args.rows)
            start = time.time()
            (result,) = project.refresh([view])
            end = time.time()
            assert not result.error and result.method.value == "fast", (result.error, result.reason)
            if r:
                runs.append({"mode": tag, "view": view, "start": start, "end": end, "seconds": end - start,
                             **{p: result.phases.get(p, 0.0) for p in PHASES}})
    return runs


def concurrent_runs(project: Project, dsn: str, views: list[str], args, tag: str) -> dict[int, list[float]]:
    out: dict[int, list[float]] = defaultdict(list)
    for concurrency in (1, len(views)):
        for r in range(args.repeat):
            change_keys(dsn, args.keys, 50_000 + r * 31 + concurrency, args.rows)
            start = time.perf_counter()
            results = project.refresh(views, concurrency=concurrency)
            assert all(not x.error for x in results), [x.error for x in results]
            out[concurrency].append(time.perf_counter() - start)
    return out


def cli(config: Path, *args: str, env: dict | None = None) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "mvlog", "-q", "-c", str(config), *args], check=True,
                   stdout=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    return time.perf_counter() - started


def median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}" if values else "–"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=5, help="orders changed before each fast refresh")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cold-repeat", type=int, default=3)
    args = parser.parse_args()
    kinds = list(VIEWS)

    with TempPostgres(settings={"shared_buffers": "1GB", "max_wal_size": "4GB"}) as pg, \
            tempfile.TemporaryDirectory(prefix="mvlog-floor-") as tmp:
        tmp_path = Path(tmp)
        load(pg.dsn(), args.rows)
        local_events, engine_events = tmp_path / "events-local", tmp_path / "events-engine"
        local_events.mkdir()
        engine_events.mkdir()

        def write_config(name: str, event_dir: Path, remote: str | None = None) -> Path:
            spark = {"master": "local[2]", "conf": {
                "spark.sql.shuffle.partitions": "4", "spark.driver.memory": "6g",
                "spark.eventLog.enabled": "true", "spark.eventLog.compress": "false",
                "spark.eventLog.dir": f"file:{event_dir}"}}
            if remote:
                spark["remote"] = remote
            path = tmp_path / name
            path.write_text(yaml.safe_dump({
                "source": {"dsn": pg.dsn()}, "warehouse": str(tmp_path / "wh"), "spark": spark,
                "logs": [{"table": "customers"}, {"table": "orders"}],
                "views": [{"name": k, "refresh": "fast", "query": VIEWS[k]} for k in kinds]}))
            return path

        local_config = write_config("local.yaml", local_events)
        runs: list[dict] = []
        with Project(load_config(local_config)) as project:
            project.apply()
            runs += warm_runs(project, pg.dsn(), kinds, args, "local")
            metrics = {k: merge_metrics(project, k) for k in kinds}
            concurrency_local = concurrent_runs(project, pg.dsn(), kinds, args, "local")
            project.warehouse.spark.stop()  # flushes the event log

        os.environ[engine.ENGINE_DIR_ENV] = str(tmp_path / "engine")
        port = free_port()
        remote = f"sc://127.0.0.1:{port}"
        engine_config = write_config("engine.yaml", engine_events, remote)
        t = time.perf_counter()
        engine.start(load_config(engine_config).spark, port=port)
        engine_start = time.perf_counter() - t
        try:
            with Project(load_config(engine_config)) as project:
                runs += warm_runs(project, pg.dsn(), kinds, args, "engine")
                concurrency_engine = concurrent_runs(project, pg.dsn(), kinds, args, "engine")
            close_connect_sessions()
            cold: dict[tuple[str, str], list[float]] = defaultdict(list)
            for r in range(args.cold_repeat):
                for kind in ("simple", "aggregate"):
                    for mode, config in (("new Spark per process", local_config), ("engine", engine_config)):
                        change_keys(pg.dsn(), args.keys, 90_000 + r, args.rows)
                        cold[(mode, f"{kind} fast")].append(cli(config, "refresh", kind))
                        cold[(mode, f"{kind} complete")].append(cli(config, "refresh", "--complete", kind))
        finally:
            engine.stop()

        log = {"local": events(local_events), "engine": events(engine_events)}
        for run in runs:
            run.update(jobs_in(log[run["mode"]], run["start"], run["end"]))

    print()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores; date: {datetime.now(UTC):%Y-%m-%d}; "
          f"rows: {args.rows}; keys changed per refresh: {args.keys}; repeats: {args.repeat}; "
          f"engine start: {engine_start:.1f} s")
    print()
    print("Warm fast refresh, medians (s) | Spark jobs and tasks per refresh")
    print()
    print("| mode | view | total | prepare | read | write | record | jobs | tasks | job seconds |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mode in ("local", "engine"):
        for kind in kinds:
            mine = [r for r in runs if r["mode"] == mode and r["view"] == kind]
            cells = [median([r[c] for r in mine]) for c in ("seconds", *PHASES)]
            print(f"| {mode} | {kind} | {' | '.join(cells)} | {statistics.median(r['jobs'] for r in mine):.0f} | "
                  f"{statistics.median(r['tasks'] for r in mine):.0f} | {median([r['job_seconds'] for r in mine])} |")
    print()
    print("Spark jobs of one warm fast refresh (local, the last run of each view), by SQL statement")
    print()
    print("| view | jobs | statement |")
    print("|---|---:|---|")
    for kind in kinds:
        last = [r for r in runs if r["mode"] == "local" and r["view"] == kind][-1]
        for statement, count in last["by_sql"].most_common():
            print(f"| {kind} | {count} | `{statement}` |")
    print()
    print("Delta operationMetrics of the last warm fast refresh (local)")
    print()
    print("| view | " + " | ".join(next(iter(metrics.values())).keys()) + " |")
    print("|---|" + "---|" * len(next(iter(metrics.values()))))
    for kind, m in metrics.items():
        print(f"| {kind} | " + " | ".join(str(v) for v in m.values()) + " |")
    print()
    print("A new `mvlog refresh VIEW` process per refresh, medians (s)")
    print()
    print("| refresh | new Spark per process | engine |")
    print("|---|---:|---:|")
    for what in sorted({w for _, w in cold}):
        print(f"| {what} | {median(cold[('new Spark per process', what)])} | {median(cold[('engine', what)])} |")
    print()
    print(f"All {len(kinds)} views in one `refresh`, medians (s)")
    print()
    print("| mode | concurrency 1 | concurrency " + str(len(kinds)) + " |")
    print("|---|---:|---:|")
    for mode, data in (("local", concurrency_local), ("engine", concurrency_engine)):
        print(f"| {mode} | {median(data[1])} | {median(data[len(kinds)])} |")


if __name__ == "__main__":
    main()
