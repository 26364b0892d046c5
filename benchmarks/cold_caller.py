"""A scheduler's view of refresh cost: every refresh a new ``mvlog refresh`` process (cron,
Airflow), fast against complete, with and without a running ``mvlog engine``.

    python benchmarks/cold_caller.py --scale 20 --changes 2000 --repeat 3

The scenario of issue #13: pgbench's accounts table (``--scale`` x 100,000 rows) on a throwaway
PostgreSQL, two views — a copy of the accounts and their balance per branch (GROUP BY bid) —
and ``--changes`` random accounts updated before each fast refresh. Each cell is the median
of ``--repeat`` runs of one command in a new process (``mvlog refresh`` of both views; with
``--complete`` for the complete refresh), so the process start, the Spark start (or the
connection to the engine) and the JVM's warm-up are included, as a scheduled caller pays
them. ``--engine-only`` skips the runs without an engine (each costs ~30 s more).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg2
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from log_overhead import pgbench  # noqa: E402

from mvlog.config import SparkConfig, load_config  # noqa: E402
from mvlog.postgres.pgtemp import TempPostgres, free_port  # noqa: E402
from mvlog.project import Project  # noqa: E402
from mvlog.spark import engine  # noqa: E402
from mvlog.spark.session import close_connect_sessions  # noqa: E402

VIEWS = [
    {"name": "accounts", "refresh": "fast", "query": "SELECT aid, bid, abalance, filler FROM pgbench_accounts"},
    {"name": "branch_balance", "refresh": "fast",  # issue #39's view: max() next to count and sum
     "query": "SELECT bid, count(*) AS accounts, sum(abalance) AS balance, max(abalance) AS top_balance "
              "FROM pgbench_accounts GROUP BY bid"},
]
SPARK = {"master": "local[2]", "conf": {"spark.driver.memory": "6g", "spark.sql.shuffle.partitions": "4"}}


def refresh(config: Path, *args: str, env: dict | None = None) -> tuple[float, list[dict]]:
    """One ``mvlog refresh --json`` in a new process: wall seconds and its results."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "mvlog", "-q", "-c", str(config), "refresh", "--json", *args],
                          capture_output=True, text=True, env={**os.environ, **(env or {})})
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"mvlog refresh failed: {done.stderr.strip()[-2000:]}")
    return seconds, json.loads(done.stdout)


def change(dsn: str, count: int, accounts: int, rng: random.Random) -> None:
    ids = rng.sample(range(1, accounts + 1), count)
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = ANY(%s)", (ids,))


def rows_read(dsn: str, config: Path) -> tuple[str, dict[str, int]]:
    """The fast read of the aggregate view as PostgreSQL runs it now (EXPLAIN ANALYZE): its SQL,
    and the rows it takes from each table (base table, key map, group table, log)."""
    project = Project(load_config(config))
    try:
        read_sql = project.plan("branch_balance").read_sql()
    finally:
        project.close()
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + read_sql)
        plan = cur.fetchone()[0][0]["Plan"]
    counts: dict[str, int] = {}

    def walk(node: dict) -> None:
        if "Relation Name" in node:
            name = node["Relation Name"]
            counts[name] = counts.get(name, 0) + node.get("Actual Rows", 0) * node.get("Actual Loops", 1)
        for child in node.get("Plans", []):
            walk(child)
    walk(plan)
    return read_sql, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=int, default=20, help="pgbench scale (100,000 accounts each)")
    parser.add_argument("--changes", type=int, default=2000, help="accounts updated before each fast refresh")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--engine-only", action="store_true", help="skip the runs on a Spark of their own")
    parser.add_argument("--deletion-vectors", action="store_true", help="the views' tables with deletion vectors")
    args = parser.parse_args()
    accounts = args.scale * 100_000
    rng = random.Random(4711)
    with TempPostgres(password="bench") as pg, tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        dsn = pg.dsn()
        pgbench(pg, "-i", "-q", "-s", str(args.scale), "-I", "dtgvp")
        config = tmp_path / "mvlog.yaml"
        config.write_text(yaml.safe_dump({"source": {"dsn": dsn}, "warehouse": str(tmp_path / "wh"), "spark": SPARK,
                                          "logs": [{"table": "pgbench_accounts"}], "views": VIEWS,
                                          "delta": {"deletion_vectors": args.deletion_vectors}}, sort_keys=False))
        os.environ[engine.ENGINE_DIR_ENV] = str(tmp_path / "engine")
        started = time.perf_counter()
        info = engine.start(SparkConfig(**SPARK), port=free_port())
        engine_start = time.perf_counter() - started
        on_engine = {"SPARK_REMOTE": info.remote}
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "mvlog", "-q", "-c", str(config), "apply"], check=True,
                       stdout=subprocess.DEVNULL, env={**os.environ, **on_engine})
        apply_seconds = time.perf_counter() - started
        modes = [("engine", on_engine)] + ([] if args.engine_only else [("own Spark", {})])
        rows: dict[tuple[str, str], list[float]] = {}
        phases: dict[str, list[dict]] = {}
        for mode, env in modes:
            for r in range(args.repeat + 1):  # the first round warms the engine (or the OS caches): not counted
                change(dsn, args.changes, accounts, rng)
                fast, results = refresh(config, env=env)
                assert {x["method"] for x in results} == {"fast"}, results
                complete, _ = refresh(config, "--complete", env=env)
                if r:
                    rows.setdefault((mode, "fast"), []).append(fast)
                    rows.setdefault((mode, "complete"), []).append(complete)
                    phases.setdefault(mode, []).extend(results)
        engine.stop()
        close_connect_sessions()
        change(dsn, args.changes, accounts, rng)
        read_sql, read_rows = rows_read(dsn, config)

    print(f"# cold caller: {platform.node()}, {os.cpu_count()} cores, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(f"# {accounts:,} accounts, {args.changes:,} changed before each fast refresh, 2 views; "
          f"medians of {args.repeat} new processes; engine start {engine_start:.1f} s, apply {apply_seconds:.1f} s\n")
    print("| Spark | fast (s) | complete (s) | complete / fast |")
    print("|---|---:|---:|---:|")
    for mode, _ in modes:
        fast, complete = statistics.median(rows[(mode, "fast")]), statistics.median(rows[(mode, "complete")])
        print(f"| {mode} | {fast:.2f} | {complete:.2f} | {complete / fast:.1f}x |")
    print(f"\nThe fast read of branch_balance after {args.changes:,} changed accounts, rows PostgreSQL took "
          "per table (EXPLAIN ANALYZE):\n")
    print("| table | rows read |\n|---|---:|")
    for name, count in sorted(read_rows.items()):
        print(f"| {name} | {count:,} |")
    print(f"\n```sql\n{read_sql}\n```")
    print("\nInside the fast refresh process, per view (medians, s; phases as in `refresh --json`):\n")
    print("| Spark | view | keys | seconds | prepare | read | write | record |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for mode, _ in modes:
        for view in VIEWS:
            mine = [x for x in phases[mode] if x["view"] == view["name"]]
            med = lambda f, mine=mine: statistics.median(f(x) for x in mine)  # noqa: E731
            print(f"| {mode} | {view['name']} | {med(lambda x: x['keys_read']):.0f} | "
                  f"{med(lambda x: x['seconds']):.2f} | "
                  + " | ".join(f"{med(lambda x, p=p: x['phases'].get(p, 0.0)):.2f}"
                               for p in ("prepare", "read", "write", "record")) + " |")


if __name__ == "__main__":
    main()
