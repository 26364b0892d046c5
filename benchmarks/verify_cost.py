"""What `mvlog verify` costs, per view class, on a throwaway PostgreSQL.

    python benchmarks/verify_cost.py --rows 1000000
    python benchmarks/verify_cost.py --rows 10000000 --views simple,aggregate

The orders/customers data and views of ``refresh_vs_complete.py``. Per view, with a warm
SparkSession: a complete refresh (for scale), ``verify --full`` and ``verify --sample 1000`` of
the clean view, then the same after 0.1 % of the orders changed (their view keys are pending and
left out). "PostgreSQL part" is the full mode's one statement on the source (the view's query,
fingerprinted and summed into 256 buckets), timed alone: it is the load a scheduled verify puts
on the production database.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg2
from psycopg2 import sql
from refresh_vs_complete import change, load, write_config

from mvlog.config import load_config
from mvlog.ops import fingerprint
from mvlog.postgres.pgtemp import TempPostgres
from mvlog.project import Project


def source_part(dsn: str, project: Project, view: str) -> float:
    """Seconds of the full mode's PostgreSQL statement alone (no pending keys)."""
    delta = project.warehouse.spark.read.format("delta").load(project.config.view_location(view))
    columns = [fingerprint.Column(n, t) for n, t in delta.dtypes]
    shape = project.registrar.check(project.config.view(view)).shape
    keys = [c for c in columns if c.name in shape.key_columns]
    hashed = sql.SQL(fingerprint.pg_hashes(shape.select_sql, columns, keys).sql(dialect="postgres").replace("%", "%%"))
    statement = sql.SQL(fingerprint.pg_bucket_sums_sql()).format(hashed)
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        t = time.perf_counter()
        cur.execute(statement)
        assert cur.fetchall()
        return time.perf_counter() - t


def timed_verify(project: Project, view: str, sample: int | None):
    t = time.perf_counter()
    (result,) = project.verify([view], sample=sample)
    assert result.status == "ok", (view, result.status, result.reason)
    return time.perf_counter() - t, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="orders rows (customers: rows/100)")
    parser.add_argument("--views", default="simple,join,aggregate")
    parser.add_argument("--changes", type=float, default=0.001, help="fraction of orders changed before the last pass")
    args = parser.parse_args()
    kinds = args.views.split(",")

    with TempPostgres(settings={"shared_buffers": "1GB", "max_wal_size": "4GB"}) as pg, \
            tempfile.TemporaryDirectory(prefix="mvlog-bench-") as tmp:
        t = time.perf_counter()
        load(pg.dsn(), args.rows)
        print(f"loaded {args.rows} orders in {time.perf_counter() - t:.1f} s", flush=True)
        config = write_config(Path(tmp), pg.dsn(), kinds)
        rows_out = []
        with Project(load_config(config)) as project:
            project.apply()
            timed_verify(project, kinds[0], 100)  # warm-up: the first Spark jobs of the session
            for kind in kinds:
                t = time.perf_counter()
                (complete,) = project.refresh([kind], complete=True)
                assert not complete.error, complete.error
                complete_s = time.perf_counter() - t
                pg_s = source_part(pg.dsn(), project, kind)
                full_s, full = timed_verify(project, kind, None)
                sample_s, sample = timed_verify(project, kind, 1000)
                rows_out.append((kind, complete.row_count, complete_s, pg_s, full_s, sample_s, sample.rows_compared))
                print(rows_out[-1], flush=True)
            changed = change(pg.dsn(), args.rows, args.changes, 1, "random")
            pending = []
            for kind in kinds:
                full_s, full = timed_verify(project, kind, None)
                sample_s, sample = timed_verify(project, kind, 1000)
                pending.append((kind, full.pending_keys, full_s, sample_s))
                print(pending[-1], flush=True)

    print()
    print(f"machine: {platform.machine()}, {platform.system()} {platform.release()}, {os.cpu_count()} cores; "
          f"date: {datetime.now(UTC):%Y-%m-%d}; orders: {args.rows:,}")
    print("| view | view rows | complete refresh (s) | PostgreSQL part (s) | verify --full (s) "
          "| verify --sample 1000 (s) | rows sampled |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for kind, rows, complete_s, pg_s, full_s, sample_s, sampled in rows_out:
        print(f"| {kind} | {rows:,} | {complete_s:.1f} | {pg_s:.1f} | {full_s:.1f} | {sample_s:.1f} | {sampled:,} |")
    print()
    print(f"After {changed:,} orders changed (not refreshed): their keys are pending")
    print()
    print("| view | pending keys | verify --full (s) | verify --sample 1000 (s) |")
    print("|---|---:|---:|---:|")
    for kind, keys, full_s, sample_s in pending:
        print(f"| {kind} | {keys:,} | {full_s:.1f} | {sample_s:.1f} |")


if __name__ == "__main__":
    main()
