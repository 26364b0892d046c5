"""mvlog's fast refresh against the floor of the stack: the one Delta MERGE any Spark + Delta
pipeline pays for the same change (issue #39).

    python benchmarks/floor.py --rows 1000000 --keys 1000
    python benchmarks/floor.py --rows 10000000 --keys 10000 --views simple,join,aggregate

On one warm session, for each view and change pattern (``recent``: the newest orders; ``random``:
spread over all of them): an identical copy of the view's Delta table is made, the orders change,
mvlog's fast refresh runs (timed, with its phases), and then a hand-written job does the ideal
thing with the same changes already known — exactly the view rows that changed (and the keys that
went), staged in Spark, merged into the copy by one ``MERGE … WHEN MATCHED … UPDATE SET * … WHEN
NOT MATCHED … INSERT *`` (timed). The copy must then equal the view (checked). The ratio
mvlog / hand-written says what mvlog's machinery (stamp, key read, join-back, key map, record)
costs beyond the MERGE every pipeline pays.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from refresh_vs_complete import change, load, write_config  # noqa: E402  (a sibling script)

from mvlog.config import load_config  # noqa: E402
from mvlog.model import ROW_HASH_COLUMN  # noqa: E402
from mvlog.postgres.pgtemp import TempPostgres  # noqa: E402
from mvlog.project import Project  # noqa: E402
from mvlog.spark.sparksql import delta_table, quote_spark, spark_literal  # noqa: E402

MERGE_CONF = {"spark.databricks.delta.merge.materializeSource": "none", "spark.sql.adaptive.enabled": "false"}


def changed_rows(spark, before: str, after: str, keys: list[str]):
    """The rows of ``after`` that differ from ``before`` (by key and row hash), and the keys of
    ``before`` that ``after`` lacks (with ``_gone``), staged in executor memory."""
    on = " AND ".join(f"a.{quote_spark(k)} <=> b.{quote_spark(k)}" for k in keys)
    h = quote_spark(ROW_HASH_COLUMN)
    a_cols = ", ".join(f"a.{quote_spark(c)}" for c in spark.read.format("delta").load(after).columns)
    b_keys = ", ".join(f"b.{quote_spark(k)} AS {quote_spark(k)}" for k in keys)
    changed = spark.sql(f"""
        SELECT {a_cols}, false AS _gone FROM {delta_table(after)} a LEFT JOIN {delta_table(before)} b ON {on}
        WHERE b.{h} IS NULL OR NOT (a.{h} <=> b.{h})""")
    gone = spark.sql(f"""
        SELECT {b_keys}, true AS _gone FROM {delta_table(before)} b LEFT ANTI JOIN {delta_table(after)} a ON {on}""")
    staged = changed.unionByName(gone, allowMissingColumns=True).localCheckpoint(eager=True)
    return staged, staged.count()


def ideal_merge(spark, target: str, staged, keys: list[str], narrow: bool) -> float:
    """Seconds of one MERGE of ``staged`` into ``target`` on ``keys`` (``narrow``: the condition
    also bounds the target's first key by the staged keys' range, so that Delta skips the files
    outside it, as a careful hand-written job would; the time includes finding the range)."""
    t = time.perf_counter()
    staged.createOrReplaceTempView("floor_staged")
    columns = [c for c in staged.columns if c != "_gone"]
    on = " AND ".join(f"t.{quote_spark(k)} <=> s.{quote_spark(k)}" for k in keys)
    if narrow:
        low, high = staged.selectExpr(f"min({quote_spark(keys[0])})", f"max({quote_spark(keys[0])})").collect()[0]
        if low is not None:
            on += (f" AND (t.{quote_spark(keys[0])} BETWEEN {spark_literal(low)} AND {spark_literal(high)}"
                   f" OR t.{quote_spark(keys[0])} IS NULL)")
    statement = (f"MERGE INTO {delta_table(target)} t USING floor_staged s ON {on} "
                 f"WHEN MATCHED AND s._gone THEN DELETE "
                 f"WHEN MATCHED THEN UPDATE SET {', '.join(f'{quote_spark(c)} = s.{quote_spark(c)}' for c in columns)} "
                 f"WHEN NOT MATCHED AND NOT s._gone THEN INSERT ({', '.join(map(quote_spark, columns))}) "
                 f"VALUES ({', '.join(f's.{quote_spark(c)}' for c in columns)})")
    for key, value in MERGE_CONF.items():
        spark.conf.set(key, value)
    try:
        spark.sql(statement).collect()
        return time.perf_counter() - t
    finally:
        for key in MERGE_CONF:
            spark.conf.unset(key)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=1_000, help="orders changed per batch")
    parser.add_argument("--views", default="simple,join,aggregate")
    parser.add_argument("--patterns", default="recent,random")
    parser.add_argument("--repeat", type=int, default=2, help="batches per pattern (the first warms up)")
    parser.add_argument("--plain", action="store_true",
                        help="the hand-written MERGE without the key-range bound (scans every file; session 18)")
    args = parser.parse_args()
    kinds = args.views.split(",")

    results = []
    with TempPostgres(settings={"shared_buffers": "1GB", "max_wal_size": "4GB"}) as pg, \
            tempfile.TemporaryDirectory(prefix="mvlog-floor-") as tmp:
        load(pg.dsn(), args.rows)
        config = write_config(Path(tmp), pg.dsn(), kinds)
        with Project(load_config(config)) as project:
            spark = project.warehouse.spark
            assert not [r.error for r in project.apply().builds if r.error]
            seed = 0
            for pattern in args.patterns.split(","):
                for batch in range(args.repeat):
                    copies = {}
                    for kind in kinds:  # an identical copy of each view's table, before the change
                        copies[kind] = f"{tmp}/copy_{kind}_{pattern}_{batch}"
                        spark.read.format("delta").load(project.config.view_location(kind)) \
                            .write.format("delta").save(copies[kind])
                    seed += 1
                    change(pg.dsn(), args.rows, args.keys / args.rows, seed, pattern)
                    for kind in kinds:
                        location = project.config.view_location(kind)
                        keys = list(project.plan(kind).key_columns)
                        t = time.perf_counter()
                        (fast,) = project.refresh([kind])
                        mvlog_s = time.perf_counter() - t
                        assert not fast.error and fast.method == "fast", (fast.error, fast.reason)
                        staged, n = changed_rows(spark, copies[kind], location, keys)
                        merge_s = ideal_merge(spark, copies[kind], staged, keys, not args.plain)
                        copy, view = (spark.read.format("delta").load(p) for p in (copies[kind], location))
                        differ = copy.exceptAll(view).count() + view.exceptAll(copy).count()
                        assert differ == 0, f"{kind}: the hand-written MERGE's copy differs from the view"
                        results.append((pattern, batch, kind, fast.keys_read, n, mvlog_s, fast.phases, merge_s))
                        print(results[-1][:6], f"{merge_s:.2f}", flush=True)

    print()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores; date: {datetime.now(UTC):%Y-%m-%d}; "
          f"rows: {args.rows}; keys per batch: {args.keys}; hand-written MERGE "
          f"{'plain' if args.plain else 'bounded by the key range'}; "
          "warm batches only (the first of each pattern warms up)")
    print("| pattern | view | view keys read | rows changed | mvlog (s) | prepare | read | write | record "
          "| hand-written MERGE (s) | mvlog / hand-written |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for pattern, batch, kind, keys_read, n, mvlog_s, phases, merge_s in results:
        if batch == 0 and args.repeat > 1:
            continue
        print(f"| {pattern} | {kind} | {keys_read} | {n} | {mvlog_s:.2f} | "
              + " | ".join(f"{phases.get(p, 0.0):.2f}" for p in ("prepare", "read", "write", "record"))
              + f" | {merge_s:.2f} | {mvlog_s / merge_s:.2f}x |")


if __name__ == "__main__":
    main()
