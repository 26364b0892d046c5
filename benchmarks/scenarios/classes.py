"""Fast against complete, per view class, warm (one process, as under ``mvlog schedule``), on the
shop's orders and customers (issues #13, #30, #31, #39).

    python -m benchmarks run classes --set rows=1000000 --set changes=0.0001,0.001,0.01
    python -m benchmarks run classes --set rows=1000000 --set changes=0.001 --set views=simple --set s3=true

Each batch changes a fraction of the orders (amount, and the customer of a third of them), spread
over all orders (``random``) or the newest (``recent``). Per (pattern, fraction, view class): the
changed keys, the warm fast refresh's seconds against a warm complete refresh (measured once per
view), and what its Delta MERGE did (Delta's operation metrics). ``s3``: the warehouse on an S3
API on the loopback (moto's server, as the tests use), reached through s3a.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

import psycopg2

from benchmarks.harness import ENGINE_SPARK, Bench
from benchmarks.scenarios import Parameter, Scenario
from mvlog.config import load_config
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


def run(bench: Bench, p: dict[str, Any]) -> None:
    fractions = [float(f) for f in str(p["changes"]).split(",")]
    kinds = p["views"].split(",")
    pg = bench.cluster({"shared_buffers": "1GB", "max_wal_size": "4GB"})
    load(pg.dsn(), p["rows"])
    spark = {"master": ENGINE_SPARK["master"], "conf": {"spark.sql.shuffle.partitions": "4",
                                                        "spark.driver.memory": "6g"}}
    warehouse = None
    if p["s3"]:
        endpoint = s3_server()
        spark["conf"].update({"spark.hadoop.fs.s3a.endpoint": endpoint, "spark.hadoop.fs.s3a.path.style.access": "true",
                              "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
                              "spark.hadoop.fs.s3a.endpoint.region": "us-east-1"})
        warehouse = "s3a://bench/mvlog"
    config = bench.project(pg.dsn(), ["customers", "orders"],
                           [{"name": k, "refresh": "fast", "query": VIEWS[k]} for k in kinds], spark=spark,
                           warehouse=warehouse, delta={"deletion_vectors": p["deletion_vectors"]})
    where = "s3a (moto)" if p["s3"] else "local disk"
    bench.note(f"{p['rows']:,} orders, {max(p['rows'] // 100, 10):,} customers; warehouse {where}; deletion "
               f"vectors {'on' if p['deletion_vectors'] else 'off'}")
    with contextlib.closing(Project(load_config(config))) as project:
        project.apply()
        complete_s = {}
        for kind in kinds:
            t = time.perf_counter()
            (complete,) = project.refresh([kind], complete=True)
            complete_s[kind] = time.perf_counter() - t
            if complete.error:
                raise RuntimeError(complete.error)
            bench.measure("complete", complete_s[kind], "s", view=kind)
        seed = 0
        for pattern in p["patterns"].split(","):
            for fraction in fractions:
                seed += 1
                changed = change(pg.dsn(), p["rows"], fraction, seed, pattern)
                for kind in kinds:
                    t = time.perf_counter()
                    (fast,) = project.refresh([kind])
                    seconds = time.perf_counter() - t
                    if fast.error or fast.method != "fast":
                        raise RuntimeError(f"{kind}: {fast.error or fast.reason}")
                    labels = {"view": kind, "pattern": pattern, "fraction": fraction, "changed": changed}
                    bench.measure("fast", seconds, "s", keys=fast.keys_read, **labels)
                    bench.measure("complete_over_fast", complete_s[kind] / seconds, "x", **labels)
                    for metric, value in merge_metrics(project, kind).items():
                        if value is not None:
                            bench.measure("merge_" + metric, float(value), "", **labels)


SCENARIO = Scenario("classes", "fast against complete per view class, warm, on the shop's orders", {
    "rows": Parameter(1_000_000, 20_000, "orders rows (customers: rows/100)"),
    "changes": Parameter("0.0001,0.001,0.01", "0.01", "fractions of the orders changed, comma-separated"),
    "patterns": Parameter("random,recent", "random", "which orders change: random, recent"),
    "views": Parameter("simple,join,aggregate", "simple,aggregate", "view classes: simple, join, aggregate, groups10"),
    "deletion_vectors": Parameter(False, False, "the views' tables with deletion vectors"),
    "s3": Parameter(False, False, "the warehouse on an S3 API on the loopback (moto)"),
}, run)
