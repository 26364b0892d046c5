"""TPC-H at scale factor 1 in PostgreSQL, two views refreshed on ``mvlog engine``, every
command a new process: complete against fast refresh after TPC-H's refresh functions.

    pip install -e '.[bench]'          # tpchgen-cli, the TPC-H data generator
    python benchmarks/tpch.py --scale 1 --rounds 2

The scenario of issues #30 and #31. ``tpchgen-cli`` writes customer, orders and lineitem
(SF1: 150,000 / 1.5M / 6.0M rows), loaded with their primary keys. Two views:

- ``line_revenue``: ``lineitem ⋈ orders ⋈ customer``, a row per line item;
- ``segment_month``: revenue and line count per market segment and month of the same join.

Each round changes the data as TPC-H's refresh functions do, at ``--fraction`` of the orders
(0.1 %: 1,500 at SF1): RF1 inserts new orders with their line items, RF2 deletes as many
orders with theirs; as many orders flip their status and a third as many customers change
segment. Then one ``mvlog refresh`` (fast) and one ``mvlog refresh --complete``, each a new
process on the engine. The first round warms the engine and is not counted; after the last
fast refresh ``mvlog verify --full`` proves both views equal their queries.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg2
import yaml

from mvlog.config import SparkConfig
from mvlog.postgres.pgtemp import TempPostgres, free_port
from mvlog.spark import engine
from mvlog.spark.session import close_connect_sessions

SCHEMA = """
CREATE TABLE customer (c_custkey integer PRIMARY KEY, c_name text, c_address text, c_nationkey integer,
    c_phone text, c_acctbal numeric(15,2), c_mktsegment text, c_comment text);
CREATE TABLE orders (o_orderkey bigint PRIMARY KEY, o_custkey integer, o_orderstatus char(1),
    o_totalprice numeric(15,2), o_orderdate date, o_orderpriority text, o_clerk text, o_shippriority integer,
    o_comment text);
CREATE TABLE lineitem (l_orderkey bigint, l_partkey integer, l_suppkey integer, l_linenumber integer,
    l_quantity numeric(15,2), l_extendedprice numeric(15,2), l_discount numeric(15,2), l_tax numeric(15,2),
    l_returnflag char(1), l_linestatus char(1), l_shipdate date, l_commitdate date, l_receiptdate date,
    l_shipinstruct text, l_shipmode text, l_comment text, PRIMARY KEY (l_orderkey, l_linenumber));
"""
JOIN = ("FROM lineitem l JOIN orders o ON o.o_orderkey = l.l_orderkey "
        "JOIN customer c ON c.c_custkey = o.o_custkey")
VIEWS = [
    {"name": "line_revenue", "refresh": "fast", "query":
        "SELECT l.l_orderkey, l.l_linenumber, o.o_orderdate, o.o_orderstatus, c.c_custkey, c.c_mktsegment, "
        f"l.l_quantity, l.l_extendedprice * (1 - l.l_discount) AS revenue {JOIN}"},
    {"name": "segment_month", "refresh": "fast", "query":
        "SELECT c.c_mktsegment, date_trunc('month', o.o_orderdate) AS month, "
        f"sum(l.l_extendedprice * (1 - l.l_discount)) AS revenue, count(*) AS lines {JOIN} "
        "GROUP BY c.c_mktsegment, date_trunc('month', o.o_orderdate)"},
]
SPARK = {"conf": {"spark.driver.memory": "8g", "spark.sql.shuffle.partitions": "4"}}
ENGINE_SPARK = {"master": "local[2]", **SPARK}

# RF1: new orders copied from random existing ones (new keys above the largest), with their lines.
RF1 = """
CREATE TEMP TABLE new_orders AS
  SELECT o_orderkey AS template, (SELECT max(o_orderkey) FROM orders) + row_number() OVER () AS o_orderkey
  FROM (SELECT o_orderkey FROM orders ORDER BY random() LIMIT %(n)s) t;
INSERT INTO orders SELECT n.o_orderkey, o.o_custkey, o.o_orderstatus, o.o_totalprice, current_date,
    o.o_orderpriority, o.o_clerk, o.o_shippriority, o.o_comment
  FROM new_orders n JOIN orders o ON o.o_orderkey = n.template;
INSERT INTO lineitem SELECT n.o_orderkey, l.l_partkey, l.l_suppkey, l.l_linenumber, l.l_quantity,
    l.l_extendedprice, l.l_discount, l.l_tax, l.l_returnflag, l.l_linestatus, l.l_shipdate, l.l_commitdate,
    l.l_receiptdate, l.l_shipinstruct, l.l_shipmode, l.l_comment
  FROM new_orders n JOIN lineitem l ON l.l_orderkey = n.template;
DROP TABLE new_orders;
"""
# RF2: random orders deleted with their lines.
RF2 = """
CREATE TEMP TABLE gone AS SELECT o_orderkey FROM orders ORDER BY random() LIMIT %(n)s;
DELETE FROM lineitem WHERE l_orderkey IN (SELECT o_orderkey FROM gone);
DELETE FROM orders WHERE o_orderkey IN (SELECT o_orderkey FROM gone);
DROP TABLE gone;
"""
FLIPS = """
UPDATE orders SET o_orderstatus = CASE o_orderstatus WHEN 'O' THEN 'F' ELSE 'O' END
  WHERE o_orderkey IN (SELECT o_orderkey FROM orders ORDER BY random() LIMIT %(n)s);
UPDATE customer SET c_mktsegment = CASE c_mktsegment WHEN 'BUILDING' THEN 'MACHINERY' ELSE 'BUILDING' END
  WHERE c_custkey IN (SELECT c_custkey FROM customer ORDER BY random() LIMIT %(customers)s);
"""


def mvlog(config: Path, *args: str) -> tuple[float, str]:
    """One ``mvlog`` command in a new process: wall seconds and its output."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "mvlog", "-q", "-c", str(config), *args],
                          capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"mvlog {' '.join(args)} failed: {done.stderr.strip()[-2000:]}{done.stdout[-2000:]}")
    return seconds, done.stdout


def load(dsn: str, scale: float, data: Path, tables: tuple[str, ...] = ("customer", "orders", "lineitem"),
         schema: str = SCHEMA) -> dict[str, int]:
    """Generate ``tables`` with tpchgen-cli and COPY them into ``schema``'s tables; their row counts."""
    tool = shutil.which("tpchgen-cli")
    if tool is None:
        raise SystemExit("tpchgen-cli is not installed: pip install -e '.[bench]'")
    subprocess.run([tool, "csv", "-s", str(scale), *[a for t in tables for a in ("-T", t)], "-o", str(data)],
                   check=True, stdout=subprocess.DEVNULL)
    counts = {}
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(schema)
        for table in tables:
            with open(data / f"{table}.csv", encoding="utf-8") as f:
                cur.copy_expert(f"COPY {table} FROM STDIN WITH (FORMAT csv, HEADER true)", f)
            cur.execute(f"SELECT count(*) FROM {table}")
            counts[table] = cur.fetchone()[0]
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    conn.cursor().execute("VACUUM ANALYZE")
    conn.close()
    return counts


def change(dsn: str, orders: int) -> None:
    """TPC-H's RF1 and RF2 on ``orders`` orders, status flips and segment changes."""
    n = {"n": orders, "customers": max(1, orders // 3)}
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(RF1, n)
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(RF2, n)
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(FLIPS, n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor")
    parser.add_argument("--fraction", type=float, default=0.001, help="orders changed by RF1 and by RF2 per round")
    parser.add_argument("--rounds", type=int, default=2, help="counted rounds (one more warms the engine)")
    parser.add_argument("--views", default="line_revenue,segment_month")
    parser.add_argument("--deletion-vectors", action="store_true", help="the views' tables with deletion vectors")
    args = parser.parse_args()
    views = [v for v in VIEWS if v["name"] in args.views.split(",")]
    with (TempPostgres(settings={"shared_buffers": "2GB", "work_mem": "256MB", "max_wal_size": "8GB"}) as pg,
          tempfile.TemporaryDirectory() as tmp):
        tmp_path = Path(tmp)
        started = time.perf_counter()
        counts = load(pg.dsn(), args.scale, tmp_path / "data")
        load_seconds = time.perf_counter() - started
        orders = max(1, round(counts["orders"] * args.fraction))
        config = tmp_path / "mvlog.yaml"
        # No spark.master: every command finds the running engine by itself.
        config.write_text(yaml.safe_dump({
            "source": {"dsn": pg.dsn()}, "warehouse": str(tmp_path / "wh"), "spark": SPARK,
            "logs": [{"table": t} for t in ("customer", "orders", "lineitem")], "views": views,
            "delta": {"deletion_vectors": args.deletion_vectors}}, sort_keys=False))
        os.environ[engine.ENGINE_DIR_ENV] = str(tmp_path / "engine")
        os.environ.pop("SPARK_REMOTE", None)
        engine.start(SparkConfig(**ENGINE_SPARK), port=free_port())
        try:
            apply_seconds, _ = mvlog(config, "apply")
            fast, complete, phases = [], [], []
            verified = None
            for r in range(args.rounds + 1):
                change(pg.dsn(), orders)
                seconds, out = mvlog(config, "refresh", "--json")
                results = json.loads(out)
                assert {x["method"] for x in results} == {"fast"}, results
                if r == args.rounds:
                    _, out = mvlog(config, "verify", "--full", "--json")
                    verified = {x["view"]: x["status"] for x in json.loads(out)}
                    assert set(verified.values()) == {"ok"}, verified
                complete_seconds, _ = mvlog(config, "refresh", "--complete", "--json")
                if r:
                    fast.append(seconds)
                    complete.append(complete_seconds)
                    phases.extend(results)
        finally:
            engine.stop()
            close_connect_sessions()

    print(f"# TPC-H SF{args.scale:g}: {platform.node()}, {os.cpu_count()} cores, "
          f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(f"# {', '.join(f'{t} {n:,}' for t, n in counts.items())} rows; load {load_seconds:.0f} s, "
          f"apply (complete build) {apply_seconds:.0f} s; per round RF1 + RF2 of {orders:,} orders each, "
          f"{orders:,} status flips, {max(1, orders // 3):,} customers changing segment; "
          f"a new process per command on mvlog engine; medians of {args.rounds}; verify --full: {verified}\n")
    f, c = statistics.median(fast), statistics.median(complete)
    print("| views | fast (s) | complete (s) | complete / fast |")
    print("|---|---:|---:|---:|")
    print(f"| {', '.join(v['name'] for v in views)} | {f:.1f} | {c:.1f} | {c / f:.1f}x |")
    print("\nInside the fast refresh process, per view (medians, s; phases as in `refresh --json`):\n")
    print("| view | keys | rows inserted / updated / deleted | seconds | prepare | read | write | record |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for view in views:
        mine = [x for x in phases if x["view"] == view["name"]]
        med = lambda f, mine=mine: statistics.median(f(x) for x in mine)  # noqa: E731
        print(f"| {view['name']} | {med(lambda x: x['keys_read']):,.0f} | "
              f"{med(lambda x: x['rows_inserted']):,.0f} / {med(lambda x: x['rows_updated']):,.0f} / "
              f"{med(lambda x: x['rows_deleted']):,.0f} | {med(lambda x: x['seconds']):.1f} | "
              + " | ".join(f"{med(lambda x, p=p: x['phases'].get(p, 0.0)):.1f}"
                           for p in ("prepare", "read", "write", "record")) + " |")


if __name__ == "__main__":
    main()
