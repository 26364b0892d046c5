"""The 22 TPC-H queries and their five top-N forms as views (``examples/tpch22``), every one
``refresh: force``: per query the method its fast refresh took, fast and complete seconds, their
ratio and the rows read from PostgreSQL (issue #61, item 5).

    pip install -e '.[bench]'          # tpchgen-cli, the TPC-H data generator
    python benchmarks/tpch22.py --scale 1 --fraction 0.001 --rounds 1

All 8 tables from ``tpchgen-cli`` with their primary keys, a log on each. Each round changes the
data as TPC-H's refresh functions do (``--fraction`` of the orders: RF1 inserts new orders with
their line items, RF2 deletes as many with theirs), and updates as many customers' balances and
segments, a tenth as many parts' prices and suppliers' balances, and as many part-supplier costs.
Then one ``mvlog refresh --json`` of all the views and one ``mvlog refresh --complete --json``,
each a new process on ``mvlog engine``. The first round warms the engine and is not counted; with
``--verify``, ``mvlog verify --full`` proves every view equal to its query after the last one.
Seconds per view are the refresh's own (views run ``concurrency`` at a time, so they overlap);
the totals are the commands' wall seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg2
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from tpch import ENGINE_SPARK, RF1, RF2, SPARK, load, mvlog  # noqa: E402

from mvlog.config import SparkConfig  # noqa: E402
from mvlog.postgres.pgtemp import TempPostgres, free_port  # noqa: E402
from mvlog.spark import engine  # noqa: E402
from mvlog.spark.session import close_connect_sessions  # noqa: E402

EXAMPLE = Path(__file__).parents[1] / "examples" / "tpch22"
TABLES = ["region", "nation", "part", "supplier", "partsupp", "customer", "orders", "lineitem"]
UPDATES = """
UPDATE customer SET c_acctbal = c_acctbal + 1,
    c_mktsegment = CASE c_mktsegment WHEN 'BUILDING' THEN 'MACHINERY' ELSE 'BUILDING' END
  WHERE c_custkey IN (SELECT c_custkey FROM customer ORDER BY random() LIMIT %(n)s);
UPDATE part SET p_retailprice = p_retailprice + 1
  WHERE p_partkey IN (SELECT p_partkey FROM part ORDER BY random() LIMIT %(tenth)s);
UPDATE supplier SET s_acctbal = s_acctbal - 1
  WHERE s_suppkey IN (SELECT s_suppkey FROM supplier ORDER BY random() LIMIT %(tenth)s);
UPDATE partsupp SET ps_supplycost = ps_supplycost + 0.01
  WHERE (ps_partkey, ps_suppkey) IN (SELECT ps_partkey, ps_suppkey FROM partsupp ORDER BY random() LIMIT %(n)s);
"""


def change(dsn: str, orders: int) -> None:
    """RF1 and RF2 on ``orders`` orders, then the updates (:data:`UPDATES`)."""
    for script in (RF1, RF2, UPDATES):
        with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
            cur.execute(script, {"n": orders, "tenth": max(1, orders // 10)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor")
    parser.add_argument("--fraction", type=float, default=0.001, help="orders changed by RF1 and by RF2 per round")
    parser.add_argument("--rounds", type=int, default=1, help="counted rounds (one more warms the engine)")
    parser.add_argument("--views", default="", help="a comma-separated subset of the views (default: all 27)")
    parser.add_argument("--verify", action="store_true", help="mvlog verify --full after the last round")
    args = parser.parse_args()
    views = yaml.safe_load((EXAMPLE / "views.yaml").read_text())
    if args.views:
        views = [v for v in views if v["name"] in args.views.split(",")]
    with (TempPostgres(settings={"shared_buffers": "2GB", "work_mem": "256MB", "max_wal_size": "8GB"}) as pg,
          tempfile.TemporaryDirectory() as tmp):
        tmp_path = Path(tmp)
        started = time.perf_counter()
        counts = load(pg.dsn(), args.scale, tmp_path / "data", tuple(TABLES), (EXAMPLE / "schema.sql").read_text())
        load_seconds = time.perf_counter() - started
        orders = max(1, round(counts["orders"] * args.fraction))
        config = tmp_path / "mvlog.yaml"
        config.write_text(yaml.safe_dump({
            "source": {"dsn": pg.dsn()}, "warehouse": str(tmp_path / "wh"), "spark": SPARK,
            "logs": [{"table": t} for t in TABLES],
            "views": [{**v, "refresh": "force"} for v in views]}, sort_keys=False))
        os.environ[engine.ENGINE_DIR_ENV] = str(tmp_path / "engine")
        os.environ.pop("SPARK_REMOTE", None)
        engine.start(SparkConfig(**ENGINE_SPARK), port=free_port())
        try:
            apply_seconds, _ = mvlog(config, "apply")
            fast: list[float] = []
            complete: list[float] = []
            per_view: dict[str, list[tuple[dict, dict]]] = {v["name"]: [] for v in views}
            verified = None
            for r in range(args.rounds + 1):
                change(pg.dsn(), orders)
                seconds, out = mvlog(config, "refresh", "--json")
                fast_results = {x["view"]: x for x in json.loads(out)}
                if r == args.rounds and args.verify:
                    _, out = mvlog(config, "verify", "--full", "--json")
                    verified = {x["view"]: x["status"] for x in json.loads(out)}
                complete_seconds, out = mvlog(config, "refresh", "--complete", "--json")
                complete_results = {x["view"]: x for x in json.loads(out)}
                if r:
                    fast.append(seconds)
                    complete.append(complete_seconds)
                    for name in per_view:
                        per_view[name].append((fast_results[name], complete_results[name]))
        finally:
            engine.stop()
            close_connect_sessions()

    print(f"# TPC-H SF{args.scale:g}, 22 queries and 5 top-N forms as views: {platform.node()}, "
          f"{os.cpu_count()} cores, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(f"# {', '.join(f'{t} {n:,}' for t, n in counts.items())} rows; load {load_seconds:.0f} s, apply "
          f"{apply_seconds:.0f} s; per round RF1 + RF2 of {orders:,} orders each and the updates; a new process per "
          f"command on mvlog engine; medians of {args.rounds}"
          + (f"; verify --full: {sum(1 for s in verified.values() if s == 'ok')} of {len(verified)} ok"
             if verified else "") + "\n")
    f, c = statistics.median(fast), statistics.median(complete)
    print(f"all {len(views)} views: `mvlog refresh` {f:.1f} s, `mvlog refresh --complete` {c:.1f} s: {c / f:.1f}x\n")
    print("| view | method | why | fast (s) | complete (s) | complete / fast | rows read (fast) | rows (complete) |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for name, pairs in per_view.items():
        fs = statistics.median(p[0]["seconds"] for p in pairs)
        cs = statistics.median(p[1]["seconds"] for p in pairs)
        method = "/".join(sorted({p[0]["method"] for p in pairs}))
        why = pairs[-1][0].get("reason", "")[:60]
        read = statistics.median(p[0]["keys_read"] or 0 for p in pairs)
        rows = statistics.median(p[1]["keys_read"] or 0 for p in pairs)
        print(f"| {name} | {method} | {why} | {fs:.2f} | {cs:.2f} | {cs / fs:.1f}x | {read:,.0f} | {rows:,.0f} |")
    if verified and set(verified.values()) != {"ok"}:
        raise SystemExit(f"verify found views that differ from their queries: {verified}")


if __name__ == "__main__":
    main()
