"""Fast refresh vs complete refresh, per view class, on a throwaway PostgreSQL.

    python benchmarks/refresh_vs_complete.py --rows 1000000 --changes 0.0001,0.001,0.01

Prints one table row per (view class, change fraction): changed keys, warm fast-refresh
seconds, warm complete-refresh seconds, and the speed-up. "Warm" means the SparkSession is
already running (as under `mvlog schedule`); the cold start is printed once.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import psycopg2
import yaml

from mvlog.config import load_config
from mvlog.pgtemp import TempPostgres
from mvlog.project import Project

VIEWS = {
    "simple": "SELECT id, customer_id, amount, status FROM orders WHERE status <> 'cancelled'",
    "join": "SELECT o.id, c.name, c.segment, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id",
    "aggregate": "SELECT customer_id, count(*) AS n, sum(amount) AS total, max(amount) AS biggest "
                 "FROM orders GROUP BY customer_id",
}


def load(dsn: str, rows: int) -> None:
    customers = max(rows // 100, 10)
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("""
            CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, segment text NOT NULL);
            CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int NOT NULL, amount numeric(12,2) NOT NULL,
                                 status text NOT NULL);
        """)
        cur.execute("INSERT INTO customers SELECT g, 'customer ' || g, (ARRAY['a','b','c'])[1 + g %% 3] "
                    "FROM generate_series(1, %s) g", (customers,))
        cur.execute("INSERT INTO orders SELECT g, 1 + (g::bigint * 7919) %% %s, (g %% 100000) / 100.0, "
                    "(ARRAY['open','shipped','cancelled'])[1 + g %% 3] FROM generate_series(1, %s) g",
                    (customers, rows))
        cur.execute("CREATE INDEX ON orders (customer_id); ANALYZE")


def change(dsn: str, rows: int, fraction: float, seed: int) -> int:
    """Update ``fraction`` of the orders (amount and, for a third, the customer): returns rows changed."""
    n = max(1, int(rows * fraction))
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT setseed(%s)", (seed / 1000.0,))
        cur.execute("""
            UPDATE orders SET amount = amount + 1,
                   customer_id = CASE WHEN id %% 3 = 0 THEN 1 + (customer_id %% 50) ELSE customer_id END
            WHERE id IN (SELECT 1 + floor(random() * %s)::bigint FROM generate_series(1, %s))
        """, (rows, n))
        return cur.rowcount


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="orders rows (customers: rows/100)")
    parser.add_argument("--changes", default="0.0001,0.001,0.01", help="comma-separated fractions of orders changed")
    parser.add_argument("--views", default="simple,join,aggregate")
    args = parser.parse_args()
    fractions = [float(f) for f in args.changes.split(",")]
    kinds = args.views.split(",")

    with TempPostgres(settings={"shared_buffers": "1GB", "max_wal_size": "4GB"}) as pg, \
            tempfile.TemporaryDirectory(prefix="mvlog-bench-") as tmp:
        t = time.perf_counter()
        load(pg.dsn(), args.rows)
        print(f"loaded {args.rows} orders in {time.perf_counter() - t:.1f} s")
        config = Path(tmp) / "mvlog.yaml"
        config.write_text(yaml.safe_dump({
            "source": {"dsn": pg.dsn()}, "warehouse": str(Path(tmp) / "wh"),
            "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "4", "spark.driver.memory": "6g"}},
            "logs": [{"table": "customers"}, {"table": "orders"}],
            "views": [{"name": k, "refresh": "fast", "query": VIEWS[k]} for k in kinds],
        }))
        with Project(load_config(config)) as project:
            t = time.perf_counter()
            project.warehouse  # noqa: B018  (starts Spark)
            cold = time.perf_counter() - t
            t = time.perf_counter()
            project.apply()
            print(f"Spark start (cold): {cold:.1f} s; apply with complete builds of {len(kinds)} views: "
                  f"{time.perf_counter() - t:.1f} s")
            rows_out = []
            for seed, fraction in enumerate(fractions, start=1):
                changed = change(pg.dsn(), args.rows, fraction, seed)
                for kind in kinds:
                    t = time.perf_counter()
                    (fast,) = project.refresh([kind])
                    fast_s = time.perf_counter() - t
                    t = time.perf_counter()
                    (complete,) = project.refresh([kind], complete=True)
                    complete_s = time.perf_counter() - t
                    assert not fast.error and not complete.error, (fast.error, complete.error)
                    assert fast.method == "fast", fast.reason
                    rows_out.append((kind, fraction, changed, fast.keys_read, fast_s, complete_s))
                    change(pg.dsn(), args.rows, 0, seed)  # keep the next fast refresh's window to the next batch
                    project.refresh([kind])

    print()
    print(f"machine: {platform.machine()}, {platform.system()} {platform.release()}; "
          f"date: {datetime.now(timezone.utc):%Y-%m-%d}; rows: {args.rows}")
    header = f"| view | changed | rows changed | view keys | fast (s) | complete (s) | speed-up |"
    print(header)
    print("|---|---:|---:|---:|---:|---:|---:|")
    for kind, fraction, changed, keys, fast_s, complete_s in rows_out:
        print(f"| {kind} | {fraction:.2%} | {changed} | {keys} | {fast_s:.1f} | {complete_s:.1f} | "
              f"{complete_s / fast_s:.1f}x |")


if __name__ == "__main__":
    main()
