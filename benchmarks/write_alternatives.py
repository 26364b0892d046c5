"""Single-commit ways to write a fast refresh's changed keys into a large, wide view (issue #60, item 1).

    python benchmarks/write_alternatives.py --rows 2000000 --keys 2000,20000 --repeat 2

A Delta table shaped as pgbench's accounts copy (``aid`` key, ``bid``, ``abalance``, an 84-character
``filler``), written in files of about 500k rows as a complete refresh writes them; each round
changes ``--keys`` random keys (80 % updated, 10 % deleted, 10 % new) and writes them, in one
commit each, by:

- ``merge``: a Delta MERGE on the key (update, delete, insert), copy-on-write;
- ``merge+dv``: the same MERGE into a table with deletion vectors;
- ``replace``: ``replaceWhere aid IN (<changed keys>)`` with the keys' present rows (a delete by the
  key column and an append in one commit), copy-on-write;
- ``replace+dv``: the same into a table with deletion vectors.

Every path's table must equal the others after each round (checked). Per path and key count: the
median seconds of the warm rounds, and from the commit's own metrics the files removed and added,
the bytes added and the deletion vectors written. Then which readers open each table: Spark,
``deltalake`` (delta-rs), polars, DuckDB over ``deltalake``'s Arrow dataset.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import tempfile
import time

from mvlog.config import SparkConfig
from mvlog.spark.session import build_session

PATHS = ("merge", "merge+dv", "replace", "replace+dv")
FILE_ROWS = 500_000


def accounts(spark, rows: int):
    return spark.range(1, rows + 1).selectExpr(
        "CAST(id AS int) AS aid", "CAST((id - 1) DIV 100000 + 1 AS int) AS bid", "0 AS abalance",
        "rpad('', 84, ' ') AS filler")


def create(spark, path: str, rows: int, dv: bool) -> None:
    files = max(rows // FILE_ROWS, 1)
    accounts(spark, rows).repartitionByRange(files, "aid").write.format("delta").mode("overwrite") \
        .option("delta.enableDeletionVectors", str(dv).lower()).save(path)


def changes(spark, rows: int, keys: int, rng: random.Random, salt: int):
    """The present rows of ``keys`` changed keys (deleted ones absent), and all the changed keys."""
    changed = rng.sample(range(1, rows + 1), keys - keys // 10)
    new = list(range(rows + 1 + salt * keys, rows + 1 + salt * keys + keys // 10))
    deleted = set(changed[: keys // 10])
    present = [(k, 1 + (k - 1) // 100000, salt * 7 + k % 1000) for k in changed + new if k not in deleted]
    df = spark.createDataFrame(present, "aid int, bid int, abalance int").selectExpr(
        "aid", "bid", "abalance", "rpad(CAST(abalance AS string), 84, ' ') AS filler")
    return df.localCheckpoint(), changed + new


def write(spark, path_name: str, path: str, staged, keys: list[int]) -> None:
    if path_name.startswith("merge"):
        staged.createOrReplaceTempView("staged")
        spark.createDataFrame([(k,) for k in keys], "aid int").createOrReplaceTempView("changed")
        spark.sql(f"""
            MERGE INTO delta.`{path}` t
            USING (SELECT c.aid AS key, s.* FROM changed c LEFT JOIN staged s ON s.aid = c.aid) s ON t.aid = s.key
            WHEN MATCHED AND s.aid IS NULL THEN DELETE
            WHEN MATCHED THEN UPDATE SET t.bid = s.bid, t.abalance = s.abalance, t.filler = s.filler
            WHEN NOT MATCHED AND s.aid IS NOT NULL THEN INSERT (aid, bid, abalance, filler)
                VALUES (s.aid, s.bid, s.abalance, s.filler)""").collect()
    else:
        predicate = f"aid IN ({', '.join(map(str, sorted(keys)))})"
        # Delta checks every written row against replaceWhere's predicate, an IN list it does not
        # turn into a hash set: 4 of 6 s at 20,000 keys. The rows match it by construction.
        spark.conf.set("spark.databricks.delta.replaceWhere.constraintCheck.enabled", "false")
        staged.write.format("delta").mode("overwrite").option("replaceWhere", predicate).save(path)


def last_commit(spark, path: str) -> dict:
    row = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").collect()[0]
    return {k: int(v) for k, v in (row["operationMetrics"] or {}).items() if v and v.isdigit()}


def readers(path: str) -> dict[str, str]:
    found = {}
    try:
        import deltalake
        table = deltalake.DeltaTable(path)
        found["deltalake"] = str(table.to_pyarrow_table().num_rows)
    except Exception as exc:  # noqa: BLE001 - a reader's refusal is the result
        found["deltalake"] = "refuses: " + str(exc).splitlines()[0][:60]
    try:
        import polars as pl
        found["polars"] = str(pl.scan_delta(path).select(pl.len()).collect().item())
    except Exception as exc:  # noqa: BLE001
        found["polars"] = "refuses: " + str(exc).splitlines()[0][:60]
    try:
        import deltalake
        import duckdb
        con = duckdb.connect()
        con.register("dataset", deltalake.DeltaTable(path).to_pyarrow_dataset())
        found["duckdb"] = str(con.execute("SELECT count(*) FROM dataset").fetchone()[0])
    except Exception as exc:  # noqa: BLE001
        found["duckdb"] = "refuses: " + str(exc).splitlines()[0][:60]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--keys", default="2000,20000")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    spark = build_session(SparkConfig(master="local[2]", conf={"spark.driver.memory": "8g",
                                                               "spark.sql.shuffle.partitions": "2"}))
    rng = random.Random(60)
    table = []
    with tempfile.TemporaryDirectory(prefix="mvlog-writes-") as tmp:
        for keys in map(int, args.keys.split(",")):
            paths = {p: f"{tmp}/{p.replace('+', '_')}_{keys}" for p in PATHS}
            for name, path in paths.items():
                create(spark, path, args.rows, name.endswith("+dv"))
            seconds: dict[str, list[float]] = {p: [] for p in PATHS}
            metrics: dict[str, dict] = {}
            for r in range(args.repeat + 1):  # round 0 warms every path
                staged, changed = changes(spark, args.rows, keys, rng, r + 1)
                for name in (PATHS if r % 2 else PATHS[::-1]):
                    t = time.perf_counter()
                    write(spark, name, paths[name], staged, changed)
                    if r:
                        seconds[name].append(time.perf_counter() - t)
                        metrics[name] = last_commit(spark, paths[name])
                first = spark.read.format("delta").load(paths["merge"])
                for name in PATHS[1:]:
                    other = spark.read.format("delta").load(paths[name])
                    assert first.exceptAll(other).count() == 0 and other.exceptAll(first).count() == 0, (name, r)
            for name in PATHS:
                m = metrics[name]

                def metric(*names: str, m: dict = m) -> int:
                    return sum(m.get(n, 0) for n in names)

                table.append((keys, name, statistics.median(seconds[name]),
                              metric("numTargetFilesRemoved", "numRemovedFiles"),
                              metric("numTargetFilesAdded", "numFiles"),
                              metric("numTargetRowsCopied", "numCopiedRows"),
                              metric("numTargetBytesAdded", "numOutputBytes"),
                              metric("numTargetDeletionVectorsAdded", "numTargetDeletionVectorsUpdated",
                                     "numDeletionVectorsAdded", "numDeletionVectorsUpdated"),
                              readers(paths[name])))
                print(json.dumps({"keys": keys, "path": name, "seconds": table[-1][2], "metrics": m}), flush=True)
    spark.stop()
    print(f"\n{platform.node()}, local[2], {args.rows:,} rows, median of {args.repeat} warm rounds\n")
    print("| changed keys | write | seconds | files removed | files added | rows copied | bytes added | DVs written | "
          "deltalake | polars | DuckDB |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---|---|---|")
    for keys, name, sec, removed, added, copied, size, dvs, opened in table:
        print(f"| {keys:,} | {name} | {sec:.2f} | {removed} | {added} | {copied:,} | {size / 1e6:.1f} MB | {dvs} | "
              f"{opened['deltalake']} | {opened['polars']} | {opened['duckdb']} |")


if __name__ == "__main__":
    main()
