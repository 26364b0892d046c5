"""Fast refresh vs complete refresh, per view class, on a throwaway PostgreSQL.

    python benchmarks/refresh_vs_complete.py --rows 1000000 --changes 0.0001,0.001,0.01,0.1 --cold
    python benchmarks/refresh_vs_complete.py --rows 1000000 --changes 0.001 --views simple --deletion-vectors
    python benchmarks/refresh_vs_complete.py --rows 1000000 --changes 0.001 --views simple --s3

``--s3`` puts the warehouse on an S3 API on the loopback (moto's server, as the tests do), reached
through s3a with the connector mvlog adds.

Each batch changes a fraction of the orders (amount, and the customer of a third of them),
either spread uniformly over all orders (``random``) or the newest orders (``recent``: the
common case of recent rows changing). Prints one table row per (pattern, fraction, view
class): changed keys, warm fast-refresh seconds and keys/s, the cold fast refresh (a new
``mvlog refresh`` process: JVM and Spark start included; with --cold), and the speed-up over
a warm complete refresh (measured once per view: it does not depend on the batch). "Warm"
means the SparkSession is already running (as under ``mvlog schedule``). Then the time of
``mvlog optimize`` per view.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg2
import yaml

from mvlog.config import load_config
from mvlog.postgres.pgtemp import TempPostgres
from mvlog.project import Project

VIEWS = {
    "simple": "SELECT id, customer_id, amount, status FROM orders WHERE status <> 'cancelled'",
    "join": "SELECT o.id, c.name, c.segment, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id",
    "aggregate": "SELECT customer_id, count(*) AS n, sum(amount) AS total, max(amount) AS biggest "
                 "FROM orders GROUP BY customer_id",
    # 10 groups, kept by deltas (count, sum, avg): the dashboard shape of issue #31
    "groups10": "SELECT customer_id % 10 AS bucket, count(*) AS n, sum(amount) AS total, avg(amount) AS mean "
                "FROM orders GROUP BY customer_id % 10",
}


MERGE_METRICS = ("numTargetFilesRemoved", "numTargetFilesAdded", "numTargetDeletionVectorsAdded",
                 "numTargetRowsCopied", "executionTimeMs", "scanTimeMs", "rewriteTimeMs", "numTargetRowsUpdated")


def merge_metrics(project: Project, view: str) -> dict:
    """Delta's operationMetrics of the view's newest commit (the fast refresh's MERGE)."""
    row = project.warehouse.history(project.config.view_location(view), 1).collect()[0]
    return {k: (row["operationMetrics"] or {}).get(k) for k in MERGE_METRICS}


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


def change(dsn: str, rows: int, fraction: float, seed: int, pattern: str) -> int:
    """Update ``fraction`` of the orders (amount and, for a third, the customer): returns rows changed."""
    n = max(1, int(rows * fraction))
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT setseed(%s)", (seed / 1000.0,))
        if pattern == "recent":  # the newest n orders (ids are ascending in time)
            chosen = "SELECT g FROM generate_series(%s::bigint - %s + 1, %s) g"
            params = (rows, n, rows)
        else:
            chosen = "SELECT 1 + floor(random() * %s)::bigint FROM generate_series(1, %s)"
            params = (rows, n)
        cur.execute(f"""
            UPDATE orders SET amount = amount + 1,
                   customer_id = CASE WHEN id %% 3 = 0 THEN 1 + (customer_id %% 50) ELSE customer_id END
            WHERE id IN ({chosen})
        """, params)
        return cur.rowcount


def write_config(folder: Path, dsn: str, kinds: list[str], deletion_vectors: bool = False,
                 s3_endpoint: str | None = None) -> Path:
    """mvlog.yaml for the orders/customers views ``kinds``, with a warehouse in ``folder`` (or on the
    S3 API at ``s3_endpoint``)."""
    config = folder / "mvlog.yaml"
    conf = {"spark.sql.shuffle.partitions": "4", "spark.driver.memory": "6g"}
    warehouse = str(folder / "wh")
    if s3_endpoint:
        warehouse = "s3a://bench/mvlog"
        conf.update({"spark.hadoop.fs.s3a.endpoint": s3_endpoint, "spark.hadoop.fs.s3a.path.style.access": "true",
                     "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
                     "spark.hadoop.fs.s3a.endpoint.region": "us-east-1"})
    config.write_text(yaml.safe_dump({
        "source": {"dsn": dsn}, "warehouse": warehouse, "delta": {"deletion_vectors": deletion_vectors},
        "spark": {"master": "local[2]", "conf": conf},
        "logs": [{"table": "customers"}, {"table": "orders"}],
        "views": [{"name": k, "refresh": "fast", "query": VIEWS[k]} for k in kinds],
    }))
    return config


def s3_server() -> str:
    """moto's S3 API on a free loopback port with the bucket ``bench``; the environment's AWS
    credentials point at it. It runs until the process ends."""
    import boto3
    from moto.server import ThreadedMotoServer

    from mvlog.postgres.pgtemp import free_port

    port = free_port()
    ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False).start()
    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1"})
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="bench")
    return endpoint


def cold_refresh(config: Path, view: str) -> float:
    """Seconds of a fresh ``mvlog refresh VIEW`` process."""
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "mvlog", "-q", "-c", str(config), "refresh", view], check=True,
                   stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="orders rows (customers: rows/100)")
    parser.add_argument("--changes", default="0.0001,0.001,0.01", help="comma-separated fractions of orders changed")
    parser.add_argument("--patterns", default="random,recent", help="which orders change: random, recent")
    parser.add_argument("--views", default="simple,join,aggregate")
    parser.add_argument("--cold", action="store_true", help="also time each fast refresh in a new process")
    parser.add_argument("--deletion-vectors", action="store_true", help="views with deletion vectors (default: off)")
    parser.add_argument("--s3", action="store_true", help="the warehouse on an S3 API on the loopback (moto)")
    args = parser.parse_args()
    fractions = [float(f) for f in args.changes.split(",")]
    patterns = args.patterns.split(",")
    kinds = args.views.split(",")

    with TempPostgres(settings={"shared_buffers": "1GB", "max_wal_size": "4GB"}) as pg, \
            tempfile.TemporaryDirectory(prefix="mvlog-bench-") as tmp:
        t = time.perf_counter()
        load(pg.dsn(), args.rows)
        print(f"loaded {args.rows} orders in {time.perf_counter() - t:.1f} s")
        config = write_config(Path(tmp), pg.dsn(), kinds, args.deletion_vectors, s3_server() if args.s3 else None)
        with Project(load_config(config)) as project:
            t = time.perf_counter()
            project.warehouse  # noqa: B018  (starts Spark)
            cold = time.perf_counter() - t
            t = time.perf_counter()
            project.apply()
            print(f"Spark start (cold): {cold:.1f} s; apply with complete builds of {len(kinds)} views: "
                  f"{time.perf_counter() - t:.1f} s", flush=True)
            complete_s = {}
            for kind in kinds:
                t = time.perf_counter()
                (complete,) = project.refresh([kind], complete=True)
                complete_s[kind] = time.perf_counter() - t
                assert not complete.error, complete.error
                print(f"complete refresh of {kind}: {complete_s[kind]:.1f} s "
                      f"({len(project.plan(kind, complete=True).partitions) or 1} partitions)", flush=True)
            rows_out = []
            merges: list[tuple] = []
            seed = 0
            for pattern in patterns:
                for fraction in fractions:
                    seed += 1
                    changed = change(pg.dsn(), args.rows, fraction, seed, pattern)
                    results = {}
                    for kind in kinds:
                        t = time.perf_counter()
                        (fast,) = project.refresh([kind])
                        results[kind] = (fast, time.perf_counter() - t)
                        assert not fast.error and fast.method == "fast", (fast.error, fast.reason)
                        merges.append((pattern, kind, fraction, fast.phases, merge_metrics(project, kind)))
                    colds = {}
                    if args.cold:
                        seed += 1
                        change(pg.dsn(), args.rows, fraction, seed, pattern)
                        colds = {kind: cold_refresh(config, kind) for kind in kinds}
                    for kind in kinds:
                        fast, fast_s = results[kind]
                        rows_out.append((pattern, kind, fraction, changed, fast.keys_read, fast_s, colds.get(kind),
                                         complete_s[kind]))
                        print(rows_out[-1], flush=True)
            optimize_s = {}
            for kind in kinds:
                t = time.perf_counter()
                ((_, what),) = project.optimize([kind])
                optimize_s[kind] = (time.perf_counter() - t, what)

    print()
    print(f"machine: {platform.machine()}, {platform.system()} {platform.release()}, {os.cpu_count()} cores; "
          f"date: {datetime.now(UTC):%Y-%m-%d}; rows: {args.rows}; Spark cold start {cold:.1f} s; "
          f"deletion vectors {'on' if args.deletion_vectors else 'off'}; "
          f"warehouse {'s3a (moto)' if args.s3 else 'local disk'}")
    print("| pattern | view | changed | rows changed | view keys | fast, warm (s) | keys/s | fast, cold (s) "
          "| complete, warm (s) | speed-up (warm) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for pattern, kind, fraction, changed, keys, fast_s, cold_s, full_s in rows_out:
        cold_text = f"{cold_s:.1f}" if cold_s is not None else "–"
        print(f"| {pattern} | {kind} | {fraction:.2%} | {changed} | {keys} | {fast_s:.1f} | {keys / fast_s:,.0f} | "
              f"{cold_text} | {full_s:.1f} | {full_s / fast_s:.1f}x |")
    print()
    print("What each warm fast refresh's MERGE did (Delta's operationMetrics; phases as in `refresh --json`)")
    print()
    print("| pattern | view | changed | read (s) | write (s) | files removed | files added | deletion vectors added "
          "| rows copied | MERGE ms | scan ms | rewrite ms | rows updated |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for pattern, kind, fraction, phases, m in merges:
        print(f"| {pattern} | {kind} | {fraction:.2%} | {phases.get('read', 0):.1f} | {phases.get('write', 0):.1f} | "
              + " | ".join(str(m.get(k)) for k in MERGE_METRICS) + " |")
    print()
    print("| view | `mvlog optimize` (s) | result |")
    print("|---|---:|---|")
    for kind, (seconds, what) in optimize_s.items():
        print(f"| {kind} | {seconds:.1f} | {what} |")


if __name__ == "__main__":
    main()
