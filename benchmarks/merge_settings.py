"""Delta settings against the warm floor: one 1M-row simple view, a few changed keys per fast
refresh, each variant timed on the same warm session, one after the other.

    python benchmarks/merge_settings.py --rows 1000000 --keys 5 --repeat 5

Variants: deletion vectors on/off (table property), MERGE's repartition before write off with
one shuffle partition ("lean"), adaptive query execution off (it runs each stage as a job). The first variant ("warm-up", defaults) absorbs the JVM's warm-up;
later variants run on a warmer JVM, so read small differences as noise (run it twice).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import psycopg2
import yaml

from mvlog.config import load_config
from mvlog.pgtemp import TempPostgres
from mvlog.project import Project
from mvlog.sparksql import delta_table

LEAN = {"spark.databricks.delta.merge.repartitionBeforeWrite.enabled": "false", "spark.sql.shuffle.partitions": "1"}
VARIANTS = [  # name, deletion vectors, session settings
    ("warm-up (defaults)", True, {}),
    ("deletion vectors off, lean MERGE", False, LEAN),
    ("deletion vectors off", False, {}),
    ("deletion vectors on, lean MERGE", True, LEAN),
    ("deletion vectors on (defaults)", True, {}),
    ("deletion vectors on, adaptive execution off", True, {"spark.sql.adaptive.enabled": "false"}),
    ("deletion vectors on, adaptive off, lean MERGE", True, {"spark.sql.adaptive.enabled": "false", **LEAN}),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=5, help="refreshes per variant (the first is not counted)")
    args = parser.parse_args()
    with TempPostgres(settings={"shared_buffers": "1GB"}) as pg, tempfile.TemporaryDirectory() as tmp:
        with psycopg2.connect(pg.dsn()) as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE t (id int PRIMARY KEY, v numeric(10,2), s text)")
            cur.execute("INSERT INTO t SELECT g, g, 'x' || g FROM generate_series(1, %s) g", (args.rows,))
        config = Path(tmp) / "mvlog.yaml"
        config.write_text(yaml.safe_dump({
            "source": {"dsn": pg.dsn()}, "warehouse": f"{tmp}/wh",
            "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "4", "spark.driver.memory": "6g"}},
            "logs": [{"table": "t"}], "views": [{"name": "v", "refresh": "fast", "query": "SELECT id, v, s FROM t"}]}))
        rows = []
        with Project(load_config(config)) as project:
            project.apply()
            spark, location = project.warehouse.spark, project.config.view_location("v")
            round_ = 0
            for name, deletion_vectors, settings in VARIANTS:
                spark.sql(f"ALTER TABLE {delta_table(location)} SET TBLPROPERTIES "
                          f"('delta.enableDeletionVectors' = '{str(deletion_vectors).lower()}')")
                for key, value in settings.items():
                    spark.conf.set(key, value)
                totals, writes = [], []
                for i in range(args.repeat):
                    round_ += 1
                    ids = [1 + (j * (args.rows // args.keys) + round_ * 7919) % args.rows for j in range(args.keys)]
                    with psycopg2.connect(pg.dsn()) as conn, conn.cursor() as cur:
                        cur.execute("UPDATE t SET v = v + 1 WHERE id = ANY(%s)", (ids,))
                    (result,) = project.refresh(["v"])
                    assert result.error is None and result.method.value == "fast", result.error
                    if i:
                        totals.append(result.seconds)
                        writes.append(result.phases["write"])
                metrics = spark.sql(f"DESCRIBE HISTORY {delta_table(location)} LIMIT 1").collect()[0]["operationMetrics"]
                rows.append((name, statistics.median(totals), statistics.median(writes),
                             metrics.get("numTargetDeletionVectorsAdded"), metrics.get("numTargetFilesRemoved")))
                for key in settings:
                    spark.conf.unset(key)
                spark.conf.set("spark.sql.shuffle.partitions", "4")
    print()
    print(f"| variant ({args.rows} rows, {args.keys} keys per refresh, medians of {args.repeat - 1}) "
          "| total (s) | write (s) | deletion vectors added | files removed |")
    print("|---|---:|---:|---:|---:|")
    for name, total, write, dvs, removed in rows:
        print(f"| {name} | {total:.2f} | {write:.2f} | {dvs} | {removed} |")


if __name__ == "__main__":
    main()
