"""A gold view over a silver view at TPC-H SF1, maintained both ways (issue #40):

    python benchmarks/layered.py --scale 1 --rounds 2

- silver ``line_revenue``: ``lineitem ⋈ orders ⋈ customer``, a row per line item (change feed on);
- gold ``gold_segment_month``: revenue and lines per market segment and month, a query over
  ``line_revenue`` by its name.

mvlog maintains the gold view by **expansion**: its query with the silver view's query in place,
read from PostgreSQL's base tables at the refresh's snapshot (``mvlog refresh`` refreshes both,
silver first, from one stamp; each view's seconds come from ``refresh --json``). The other way,
timed here as a hand-written Spark job on the same warm engine after each refresh, is **from
the silver view's Delta table**: read the change feed of the commit the silver refresh just
made, take the (segment, month) groups its pre- and post-images touch, recompute those groups
from the silver table and MERGE them (deleting emptied groups) into a copy of the gold table.
After every round the copy must equal mvlog's gold view (checked, EXCEPT ALL both ways).

Each round changes the data as TPC-H's refresh functions do (see ``tpch.py``); the first round
warms the engine and is not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import yaml
from tpch import ENGINE_SPARK, SPARK, VIEWS, change, load, mvlog

from mvlog.config import SparkConfig
from mvlog.postgres.pgtemp import TempPostgres, free_port
from mvlog.spark import engine
from mvlog.spark.session import close_connect_sessions

SILVER = {**next(v for v in VIEWS if v["name"] == "line_revenue"), "change_feed": True}
GOLD = {"name": "gold_segment_month", "refresh": "fast", "query":
        "SELECT c_mktsegment, date_trunc('month', o_orderdate) AS month, sum(revenue) AS revenue, count(*) AS lines "
        "FROM line_revenue GROUP BY c_mktsegment, date_trunc('month', o_orderdate)"}
GROUP = "c_mktsegment, CAST(date_trunc('month', o_orderdate) AS TIMESTAMP) AS month"


def from_silver_changes(spark, silver: str, copy: str) -> tuple[float, int]:
    """The gold groups the silver view's last commit touched, recomputed from the silver table and
    merged into ``copy``: seconds, groups."""
    started = time.perf_counter()
    version = spark.sql(f"DESCRIBE HISTORY delta.`{silver}` LIMIT 1").collect()[0]["version"]
    spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", version) \
        .load(silver).createOrReplaceTempView("silver_changes")
    spark.sql(f"SELECT DISTINCT {GROUP} FROM silver_changes").createOrReplaceTempView("touched")
    groups = spark.table("touched").count()
    spark.sql(f"""
        SELECT s.c_mktsegment, CAST(date_trunc('month', s.o_orderdate) AS TIMESTAMP) AS month,
               sum(s.revenue) AS revenue, count(*) AS lines
        FROM delta.`{silver}` AS s
        LEFT SEMI JOIN touched AS t
          ON t.c_mktsegment <=> s.c_mktsegment AND t.month <=> CAST(date_trunc('month', s.o_orderdate) AS TIMESTAMP)
        GROUP BY 1, 2""").createOrReplaceTempView("regrouped")
    spark.sql(f"""
        MERGE INTO delta.`{copy}` AS g
        USING (SELECT t.c_mktsegment AS k_segment, t.month AS k_month, r.*
               FROM touched AS t LEFT JOIN regrouped AS r
                 ON r.c_mktsegment <=> t.c_mktsegment AND r.month <=> t.month) AS n
        ON g.c_mktsegment <=> n.k_segment AND g.month <=> n.k_month
        WHEN MATCHED AND n.lines IS NULL THEN DELETE
        WHEN MATCHED THEN UPDATE SET revenue = n.revenue, lines = n.lines
        WHEN NOT MATCHED AND n.lines IS NOT NULL THEN
          INSERT (c_mktsegment, month, revenue, lines) VALUES (n.c_mktsegment, n.month, n.revenue, n.lines)""")
    return time.perf_counter() - started, groups


def same(spark, a: str, b: str) -> bool:
    left = spark.read.format("delta").load(a).select("c_mktsegment", "month", "revenue", "lines")
    right = spark.read.format("delta").load(b).select("c_mktsegment", "month", "revenue", "lines")
    return left.exceptAll(right).count() == 0 and right.exceptAll(left).count() == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor")
    parser.add_argument("--fraction", type=float, default=0.001, help="orders changed by RF1 and by RF2 per round")
    parser.add_argument("--rounds", type=int, default=2, help="counted rounds (one more warms the engine)")
    args = parser.parse_args()
    from pyspark.sql import SparkSession

    with (TempPostgres(settings={"shared_buffers": "2GB", "work_mem": "256MB", "max_wal_size": "8GB"}) as pg,
          tempfile.TemporaryDirectory() as tmp):
        tmp_path = Path(tmp)
        counts = load(pg.dsn(), args.scale, tmp_path / "data")
        orders = max(1, round(counts["orders"] * args.fraction))
        config = tmp_path / "mvlog.yaml"
        warehouse = tmp_path / "wh"
        config.write_text(yaml.safe_dump({
            "source": {"dsn": pg.dsn()}, "warehouse": str(warehouse), "spark": SPARK,
            "logs": [{"table": t} for t in ("customer", "orders", "lineitem")], "views": [SILVER, GOLD]},
            sort_keys=False))
        os.environ[engine.ENGINE_DIR_ENV] = str(tmp_path / "engine")
        os.environ.pop("SPARK_REMOTE", None)
        info = engine.start(SparkConfig(**ENGINE_SPARK), port=free_port())
        rows = []
        try:
            mvlog(config, "apply")
            spark = SparkSession.builder.remote(info.remote).getOrCreate()
            silver, gold, copy = (str(warehouse / n) for n in ("line_revenue", "gold_segment_month", "gold_copy"))
            spark.read.format("delta").load(gold).select("c_mktsegment", "month", "revenue", "lines") \
                .write.format("delta").save(copy)
            for r in range(args.rounds + 1):
                change(pg.dsn(), orders)
                _, out = mvlog(config, "refresh", "--json")
                results = {x["view"]: x for x in json.loads(out)}
                assert {x["method"] for x in results.values()} == {"fast"}, results
                seconds, groups = from_silver_changes(spark, silver, copy)
                assert same(spark, gold, copy), f"round {r}: the gold copy differs from mvlog's gold view"
                if r:
                    rows.append((results["line_revenue"], results["gold_segment_month"], seconds, groups))
            spark.stop()
        finally:
            engine.stop()
            close_connect_sessions()

    print(f"# TPC-H SF{args.scale:g}: {platform.node()}, {os.cpu_count()} cores, "
          f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; "
          f"{', '.join(f'{t} {n:,}' for t, n in counts.items())} rows; per round RF1 + RF2 of {orders:,} orders, "
          f"status flips, segment changes; medians of {args.rounds} rounds on mvlog engine\n")
    med = lambda f: statistics.median(f(row) for row in rows)  # noqa: E731
    # One unit refreshes both views: a view's own seconds are its read, write and record (the
    # prepare phase, lock and stamp, is shared; ``seconds`` of the second view include the first's).
    own = lambda x: sum(x["phases"].get(p, 0.0) for p in ("read", "write", "record"))  # noqa: E731
    print("| view | how | own seconds | read | write | record | groups touched |")
    print("|---|---|---:|---:|---:|---:|---:|")
    print(f"| line_revenue (silver) | mvlog fast refresh | {med(lambda x: own(x[0])):.2f} | "
          + " | ".join(f"{med(lambda x, p=p: x[0]['phases'].get(p, 0.0)):.2f}" for p in ("read", "write", "record"))
          + " | – |")
    print(f"| gold_segment_month | mvlog: expansion onto the base tables | {med(lambda x: own(x[1])):.2f} | "
          + " | ".join(f"{med(lambda x, p=p: x[1]['phases'].get(p, 0.0)):.2f}" for p in ("read", "write", "record"))
          + f" | {med(lambda x: x[1]['keys_read']):,.0f} |")
    print(f"| gold (copy) | from silver's change feed and Delta table (hand-written, after silver's commit) | "
          f"{med(lambda x: x[2]):.2f} | – | – | – | {med(lambda x: x[3]):,.0f} |")


if __name__ == "__main__":
    main()
