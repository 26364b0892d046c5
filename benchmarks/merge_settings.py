"""The MERGE of a fast refresh against its settings and its unchanged-row test: one 1M-row
simple view of six columns, ``--keys`` changed keys per fast refresh (95 % updates, 5 %
deletes, as many inserts), each variant timed on the same warm session, one after the other.

    python benchmarks/merge_settings.py --rows 1000000 --keys 1000 --pattern recent --repeat 4
    python benchmarks/merge_settings.py --rows 1000000 --keys 1000 --pattern random --repeat 4
    python benchmarks/merge_settings.py --rows 1000000 --keys 1000 --pattern random --variants 6  # mvlog's settings

``--pattern recent``: the changed keys are the newest ids (one or two files); ``random``: spread
over every file. Variants: the unchanged-row test on every column (mvlog before issue #30)
or on the stored row hash; adaptive query execution off; Delta's ``snapshotPartitions`` 1.
Per variant: medians of the refresh, its write phase, the Spark jobs a refresh ran, and the
columns the MERGE's scans of the table read (Spark's SQL status store). The first variant
absorbs the JVM's warm-up; later ones run on a warmer JVM, so read small differences as noise.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import re
import statistics
import tempfile
from pathlib import Path

import psycopg2
import yaml

from mvlog.config import load_config
from mvlog.postgres.pgtemp import TempPostgres
from mvlog.project import Project
from mvlog.spark.warehouse import Warehouse

AQE_OFF = {"spark.sql.adaptive.enabled": "false"}
ONE_SNAPSHOT_PARTITION = {"spark.databricks.delta.snapshotPartitions": "1"}
VARIANTS = [  # name, unchanged-row test on the row hash, session settings
    ("warm-up (not counted)", True, {}),
    ("every column (before #30)", False, {}),
    ("row hash", True, {}),
    ("every column, adaptive off, snapshotPartitions 1", False, {**AQE_OFF, **ONE_SNAPSHOT_PARTITION}),
    ("row hash, adaptive off", True, AQE_OFF),
    ("row hash, snapshotPartitions 1", True, ONE_SNAPSHOT_PARTITION),
    ("row hash, adaptive off, snapshotPartitions 1", True, {**AQE_OFF, **ONE_SNAPSHOT_PARTITION}),
]


@contextlib.contextmanager
def unchanged_row_test(on_hash: bool):
    """Make the refresh's MERGE test unchanged rows on the row hash or on every column."""
    merge = Warehouse.merge

    def patched(self, *args, **kwargs):
        return merge(self, *args, **{**kwargs, "trust_row_hash": on_hash})

    Warehouse.merge = patched
    try:
        yield
    finally:
        Warehouse.merge = merge


def scanned_columns(spark, since: int) -> tuple[int, set[str]]:
    """(executions, columns) the SQL executions after the first ``since`` read from Parquet files."""
    executions = spark._jsparkSession.sharedState().statusStore().executionsList().iterator()
    plans = []
    while executions.hasNext():
        plans.append(executions.next().physicalPlanDescription())
    columns = set()
    for plan in plans[since:]:
        for node in plan.split("\n("):  # the plan's node details: "(3) Scan parquet \nOutput…\nReadSchema: …"
            schema = re.search(r"ReadSchema: struct<([^\n]*)>", node)
            if re.match(r"\d+\) Scan parquet", node) and schema and not schema.group(1).startswith("txn:"):
                columns |= set(re.findall(r"(?:^|,)([^,:<>()]+):", schema.group(1))) - {
                    "__delta_internal_is_row_deleted", "_tmp_metadata_row_index", "__delta_internal_row_index"}
    return len(plans), columns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--pattern", choices=["recent", "random"], default="recent")
    parser.add_argument("--repeat", type=int, default=4, help="refreshes per variant (the first is not counted)")
    parser.add_argument("--variants", default="", help="comma-separated numbers of the variants to run (1 = the "
                        "first after the warm-up; default: all); the warm-up always runs")
    args = parser.parse_args()
    chosen = {int(n) for n in args.variants.split(",") if n.strip()}
    variants = [v for i, v in enumerate(VARIANTS) if i == 0 or not chosen or i in chosen]
    rng = random.Random(7)
    with TempPostgres(settings={"shared_buffers": "1GB"}) as pg, tempfile.TemporaryDirectory() as tmp:
        with psycopg2.connect(pg.dsn()) as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE t (id bigint PRIMARY KEY, a integer, b numeric(12,2), c text, d date, "
                        "e timestamp)")
            cur.execute("INSERT INTO t SELECT g, g %% 1000, g / 100.0, 'text ' || g, DATE '2020-01-01' + g %% 2000, "
                        "TIMESTAMP '2020-01-01' + g * INTERVAL '1 minute' FROM generate_series(1, %s) g", (args.rows,))
        config = Path(tmp) / "mvlog.yaml"
        config.write_text(yaml.safe_dump({
            "source": {"dsn": pg.dsn()}, "warehouse": f"{tmp}/wh",
            "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "6g"}},
            "logs": [{"table": "t"}],
            "views": [{"name": "v", "refresh": "fast", "query": "SELECT id, a, b, c, d, e FROM t"}]}))
        rows = []
        next_id = args.rows + 1
        with Project(load_config(config)) as project:
            project.apply()
            spark = project.warehouse.spark
            tracker = spark.sparkContext.statusTracker()
            for name, on_hash, settings in variants:
                for key, value in settings.items():
                    spark.conf.set(key, value)
                totals, writes, jobs, columns = [], [], [], set()
                with unchanged_row_test(on_hash):
                    for i in range(args.repeat):
                        deletes = max(1, args.keys // 20)
                        if args.pattern == "recent":
                            ids = list(range(next_id - args.keys, next_id))
                        else:
                            ids = rng.sample(range(1, next_id), args.keys)
                        with psycopg2.connect(pg.dsn()) as conn, conn.cursor() as cur:
                            cur.execute("UPDATE t SET a = a + 1, c = c || '!' WHERE id = ANY(%s)", (ids[deletes:],))
                            cur.execute("DELETE FROM t WHERE id = ANY(%s)", (ids[:deletes],))
                            cur.execute("INSERT INTO t SELECT g, g %% 1000, g / 100.0, 'new ' || g, DATE '2026-01-01', "
                                        "TIMESTAMP '2026-01-01' FROM generate_series(%s, %s) g",
                                        (next_id, next_id + deletes - 1))
                        next_id += deletes
                        jobs_before = len(tracker.getJobIdsForGroup(None))
                        executions, _ = scanned_columns(spark, 0)
                        (result,) = project.refresh(["v"])
                        assert result.error is None and result.method.value == "fast", result.error
                        if i:
                            totals.append(result.seconds)
                            writes.append(result.phases["write"])
                            jobs.append(len(tracker.getJobIdsForGroup(None)) - jobs_before)
                            columns |= scanned_columns(spark, executions)[1]
                for key in settings:
                    spark.conf.unset(key)
                if totals and not name.startswith("warm-up"):
                    rows.append((name, statistics.median(totals), statistics.median(writes), statistics.median(jobs),
                                 ", ".join(sorted(columns))))
    print()
    print(f"| variant ({args.rows:,} rows, {args.keys:,} {args.pattern} keys per refresh, medians of "
          f"{args.repeat - 1}) | refresh (s) | write (s) | Spark jobs | columns the table scans read |")
    print("|---|---:|---:|---:|---|")
    for name, total, write, jobs, columns in rows:
        print(f"| {name} | {total:.2f} | {write:.2f} | {jobs:.0f} | {columns} |")


if __name__ == "__main__":
    main()
