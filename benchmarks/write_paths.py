"""The write of a fast refresh sized to the view: mvlog's MERGE against its rewrite, by view size.

    python benchmarks/write_paths.py --rows 400,10000,100000,300000,1000000 --changes 10,1% --repeat 3

For each view size: a Delta table written by mvlog's complete-refresh path (``Warehouse.replace``:
row hashes, the default table features) with an aggregate view's columns (a key, a count, a
sum, a max, a label). Each round stages ``--changes`` changed view rows (a count, or a percentage
of the view: a tenth of them deletions, a tenth new keys, the rest updates) and writes them with
``Warehouse.merge`` and with ``Warehouse.rewrite`` into two identical copies, alternating which
goes first; the copies must stay equal (checked). Warm: one untimed round per path first. Prints
the median seconds per path and their ratio: where the ratio crosses 1 is the
``delta.rewrite_max_rows`` setting's measured default.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time

from mvlog.config import SparkConfig
from mvlog.model import CHANGED_KEY_PREFIX, PRESENT
from mvlog.spark.session import build_session
from mvlog.spark.warehouse import Warehouse

COLUMNS = "k AS k, n AS n, CAST(total AS decimal(18,2)) AS total, CAST(top AS decimal(18,2)) AS top, label AS label"


def view_rows(spark, rows: int, salt: int):
    """``rows`` view rows (keys 0 … rows-1) whose values depend on ``salt``."""
    return spark.range(rows).selectExpr(
        "id AS k", f"id % 97 + {salt} AS n", f"id * 3 + {salt} AS total", f"id % 1000 + {salt} AS top",
        "concat('group ', CAST(id % 50 AS string)) AS label").selectExpr(*COLUMNS.split(", "))


def staged_changes(spark, warehouse: Warehouse, rows: int, changes: int, salt: int):
    """``changes`` affected keys, staged as a fast read stages them: deletes, inserts, updates."""
    step = max(rows // max(changes, 1), 1)
    deletes, inserts = max(changes // 10, 1), max(changes // 10, 1)
    sql = (f"SELECT id * {step} + {salt % step} AS k FROM range({changes - inserts}) "
           f"UNION ALL SELECT {rows} + {salt} * {inserts} + id AS k FROM range({inserts})")
    keys = spark.sql(sql)
    keys.createOrReplaceTempView("bench_keys")
    df = spark.sql(f"""
        SELECT k AS {CHANGED_KEY_PREFIX}0,
               CASE WHEN row_number() OVER (ORDER BY k) <= {deletes} THEN NULL ELSE k END AS k,
               k % 89 + {salt} AS n, CAST(k * 7 + {salt} AS decimal(18,2)) AS total,
               CAST(k % 1000 + {salt} AS decimal(18,2)) AS top, concat('group ', CAST(k % 50 AS string)) AS label,
               CASE WHEN row_number() OVER (ORDER BY k) <= {deletes} THEN NULL ELSE true END AS {PRESENT}
        FROM bench_keys""")
    return warehouse.stage(df)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="400,10000,100000,300000,1000000")
    parser.add_argument("--changes", default="10,1%")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    spark = build_session(SparkConfig(master="local[2]", conf={"spark.driver.memory": "6g",
                                                               "spark.sql.shuffle.partitions": "4"}))
    table = []
    with tempfile.TemporaryDirectory(prefix="mvlog-write-") as tmp:
        warehouse = Warehouse(spark, tmp)
        for rows in map(int, args.rows.split(",")):
            for change in args.changes.split(","):
                changes = max(int(rows * float(change[:-1]) / 100), 1) if change.endswith("%") else int(change)
                paths = {p: f"{tmp}/{p}_{rows}_{changes}" for p in ("merge", "rewrite")}
                for path in paths.values():
                    warehouse.replace(path, view_rows(spark, rows, 0), {"view": "bench"}, key_columns=("k",))
                seconds: dict[str, list[float]] = {"merge": [], "rewrite": []}
                for r in range(args.repeat + 1):
                    staged = staged_changes(spark, warehouse, rows, changes, r + 1)
                    order = ("merge", "rewrite") if r % 2 else ("rewrite", "merge")
                    for path_name in order:
                        write = warehouse.merge if path_name == "merge" else warehouse.rewrite
                        t = time.perf_counter()
                        write(paths[path_name], staged, ("k",), {"view": "bench", "round": r})
                        if r:  # the first round warms both paths
                            seconds[path_name].append(time.perf_counter() - t)
                    a, b = (spark.read.format("delta").load(p) for p in paths.values())
                    assert a.exceptAll(b).count() == 0 and b.exceptAll(a).count() == 0, (rows, changes, r)
                merge, rewrite = (statistics.median(seconds[p]) for p in ("merge", "rewrite"))
                table.append((rows, changes, merge, rewrite))
                print(f"{rows} rows, {changes} changes: merge {merge:.2f} s, rewrite {rewrite:.2f} s", flush=True)
    spark.stop()
    print(f"\n{platform.node()}, local[2], median of {args.repeat} warm rounds\n")
    print("| view rows | changed keys | MERGE (s) | rewrite (s) | rewrite / MERGE |")
    print("|---:|---:|---:|---:|---:|")
    for rows, changes, merge, rewrite in table:
        print(f"| {rows:,} | {changes:,} | {merge:.2f} | {rewrite:.2f} | {rewrite / merge:.2f}x |")


if __name__ == "__main__":
    main()
