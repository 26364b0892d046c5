"""Many views, one command: what refreshing N independent views costs against refreshing one,
one after the other and concurrently (``concurrency``), on a warm Spark.

    python benchmarks/many_views.py --rows 1000000 --views 10 --keys 1000 --repeat 3

The orders/customers data of refresh_vs_complete.py; ``--views`` fast-refreshable views over
it (simple, join and aggregate views with different filters, so that each is its own Delta
table and its own MERGE); ``--keys`` orders changed before each measured refresh, so every
view has changes. Times one view alone, then all views with ``concurrency`` 1 and with each
of ``--concurrency`` (medians of ``--repeat``), in one process on a SparkSession of its own
(``--remote sc://…`` runs it on a Spark Connect server instead).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).parent))
from refresh_vs_complete import load  # noqa: E402
from warm_floor import change_keys  # noqa: E402

from mvlog.config import load_config  # noqa: E402
from mvlog.postgres.pgtemp import TempPostgres  # noqa: E402
from mvlog.project import Project  # noqa: E402

TEMPLATES = [
    "SELECT id, customer_id, amount, status FROM orders WHERE status = '{status}'",
    "SELECT o.id, c.name, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id "
    "WHERE c.segment = '{segment}'",
    "SELECT customer_id, count(*) AS n, sum(amount) AS total FROM orders WHERE status = '{status}' "
    "GROUP BY customer_id",
]
STATUSES = ("open", "shipped", "cancelled")
SEGMENTS = ("a", "b", "c")


def views(count: int) -> list[dict]:
    out = []
    for i in range(count):
        query = TEMPLATES[i % 3].format(status=STATUSES[(i // 3) % 3], segment=SEGMENTS[(i // 3) % 3])
        if i >= 9:  # past the nine distinct shapes: the same with another column order
            query = query.replace("SELECT ", "SELECT 1 AS variant, ", 1)
        out.append({"name": f"v{i:02d}", "refresh": "fast", "query": query})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--views", type=int, default=10)
    parser.add_argument("--keys", type=int, default=1000, help="orders changed before each refresh")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--concurrency", default="4,10", help="comma-separated concurrency settings to time")
    parser.add_argument("--remote", help="a Spark Connect server (sc://host:port) to run on")
    args = parser.parse_args()
    declared = views(args.views)
    names = [v["name"] for v in declared]
    settings = [int(c) for c in args.concurrency.split(",")]
    timings: dict[str, list[float]] = {}
    round_ = 0
    with TempPostgres(settings={"shared_buffers": "1GB", "max_wal_size": "4GB"}) as pg, \
            tempfile.TemporaryDirectory(prefix="mvlog-many-") as tmp:
        load(pg.dsn(), args.rows)
        spark = {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "4", "spark.driver.memory": "6g"}}
        if args.remote:
            spark["remote"] = args.remote
        config = Path(tmp) / "mvlog.yaml"
        config.write_text(yaml.safe_dump({
            "source": {"dsn": pg.dsn()}, "warehouse": str(Path(tmp) / "wh"), "spark": spark,
            "logs": [{"table": "customers"}, {"table": "orders"}], "views": declared}))
        with Project(load_config(config)) as project:
            started = time.perf_counter()
            project.apply()
            apply_seconds = time.perf_counter() - started
            cases = [("1 view", names[:1], 1), (f"{len(names)} views, concurrency 1", names, 1)]
            cases += [(f"{len(names)} views, concurrency {c}", names, c) for c in settings]
            for r in range(args.repeat + 1):  # the first round warms every view's code path: not counted
                for label, selected, concurrency in cases:
                    round_ += 1
                    change_keys(pg.dsn(), args.keys, round_ * 101, args.rows)
                    started = time.perf_counter()
                    results = project.refresh(selected, concurrency=concurrency)
                    seconds = time.perf_counter() - started
                    assert all(not x.error and str(x.method) == "fast" for x in results), [x.error for x in results]
                    if r:
                        timings.setdefault(label, []).append(seconds)

    one = statistics.median(timings["1 view"])
    print(f"# many views: {platform.node()}, {os.cpu_count()} cores, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
          f"{'Spark Connect' if args.remote else 'own SparkSession'}")
    print(f"# {args.rows:,} orders, {args.keys:,} changed before each refresh; medians of {args.repeat}; "
          f"apply (build of {len(names)} views) {apply_seconds:.1f} s\n")
    print("| refresh | seconds | x one view |")
    print("|---|---:|---:|")
    for label, _, _ in cases:
        seconds = statistics.median(timings[label])
        print(f"| {label} | {seconds:.2f} | {seconds / one:.1f}x |")


if __name__ == "__main__":
    main()
