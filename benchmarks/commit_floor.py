"""The floor of one Delta commit on a warm local session: what any fast refresh of a small view pays.

    python benchmarks/commit_floor.py --rows 10 --repeat 5

A Delta table of ``--rows`` rows (an aggregate view's size: a key, a count, a sum), written with
mvlog's session settings (deletion vectors, column mapping, ``snapshotPartitions`` 1). Each
variant rewrites every row with new values ``--repeat`` times, warm (one untimed round
first), and prints the median seconds:

- ``merge``: mvlog's MERGE (matched and changed: update; not matched: insert), adaptive
  execution off as mvlog runs it;
- ``merge, adaptive on``: the same with Spark's defaults;
- ``overwrite``: ``INSERT OVERWRITE`` of the whole table (one commit, no join with the target);
- ``append``: ``INSERT INTO`` of the rows (one commit that reads nothing: the least a commit costs).

Issue #31's target for a 10-group view over 10M rows (fast ≥ 20x faster than complete, whose
cost is ~15 s) needs a whole fast refresh under ~0.8 s; this is the part of it that Delta takes.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from mvlog.config import SparkConfig
from mvlog.spark.session import build_session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    spark = build_session(SparkConfig(master="local[2]", conf={"spark.sql.shuffle.partitions": "2"}))
    with tempfile.TemporaryDirectory(prefix="mvlog-floor-") as tmp:
        path = f"{tmp}/t"
        spark.range(args.rows).selectExpr("id AS k", "id AS n", "CAST(id AS decimal(18,2)) AS total") \
            .write.format("delta").save(path)
        rounds = iter(range(1, 1_000_000))

        def source() -> None:
            r = next(rounds)
            spark.range(args.rows).selectExpr("id AS k", f"id + {r} AS n",
                                              f"CAST(id + {r} AS decimal(18,2)) AS total") \
                .createOrReplaceTempView("s")

        merge = (f"MERGE INTO delta.`{path}` t USING s ON t.k = s.k "
                 "WHEN MATCHED AND NOT (t.n <=> s.n AND t.total <=> s.total) THEN UPDATE SET * "
                 "WHEN NOT MATCHED THEN INSERT *")
        variants = {
            "merge (adaptive off, as mvlog)": ({"spark.sql.adaptive.enabled": "false"}, merge),
            "merge, adaptive on": ({"spark.sql.adaptive.enabled": "true"}, merge),
            "overwrite": ({}, f"INSERT OVERWRITE delta.`{path}` SELECT * FROM s"),
            "append": ({}, f"INSERT INTO delta.`{path}` SELECT * FROM s"),
        }
        results = {}
        for name, (conf, statement) in variants.items():
            for key, value in conf.items():
                spark.conf.set(key, value)
            seconds = []
            for i in range(args.repeat + 1):
                source()
                t = time.perf_counter()
                spark.sql(statement).collect()
                if i:  # the first round warms the variant
                    seconds.append(time.perf_counter() - t)
            spark.conf.unset("spark.sql.adaptive.enabled")
            results[name] = statistics.median(seconds)
    spark.stop()
    print(f"| Delta commit of {args.rows} rows, warm local[2] | median of {args.repeat} (s) |")
    print("|---|---:|")
    for name, seconds in results.items():
        print(f"| {name} | {seconds:.2f} |")


if __name__ == "__main__":
    main()
