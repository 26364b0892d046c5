"""Fast, complete and what ``force`` chose, over view size x changed share (issue #60, item 4).

    python benchmarks/sweep.py --sizes 20000,200000,2000000 --shares 0.01,0.1,1,10,50
    python benchmarks/sweep.py --sizes 2000000 --shares 0.1,10 --deletion-vectors

One table per size, shaped as pgbench's accounts (``aid`` key, ``bid``, ``abalance``, an
84-character ``filler``), on a throwaway PostgreSQL; per table two copy views, ``fast_<size>``
(``refresh: fast``) and ``force_<size>`` (``refresh: force``), both built by ``mvlog apply``. Per
point, ``share`` % of the rows (random keys) are updated in one statement, then, in one warm
process (the same Project, as under ``mvlog schedule`` or the engine), three refreshes of the
same window:

- ``force``: the force view refreshed: the method it chose and its seconds;
- ``fast``: the fast view refreshed fast;
- ``complete``: a third view, ``complete_<size>`` (``refresh: complete``), refreshed.

Each view has its own Delta table. The three run in a rotating order (each first at every third
point): the first to read a window's rows from PostgreSQL pays for bringing them into its cache.

The shares run in order ``--passes`` times; ``force`` learns from its own refreshes (issue #60,
item 2), so the first pass shows it learning and the last what it settled on. Printed: one table
row per point of the last pass, with force's seconds over the cheaper method's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import random
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg2
import yaml

from mvlog.config import load_config
from mvlog.postgres.pgtemp import TempPostgres
from mvlog.project import Project

KINDS = ["force", "fast", "complete"]  # the views of each size, by their refresh: setting
SPARK = {"master": "local[2]", "conf": {"spark.driver.memory": "8g", "spark.sql.shuffle.partitions": "4"}}


def load(dsn: str, sizes: list[int]) -> None:
    conn = psycopg2.connect(dsn)
    conn.autocommit = True  # VACUUM; psycopg2's "with conn" would open a transaction
    with contextlib.closing(conn), conn.cursor() as cur:
        for size in sizes:
            cur.execute(f"CREATE TABLE accounts_{size} (aid int PRIMARY KEY, bid int NOT NULL, abalance int NOT NULL, "
                        "filler char(84))")
            cur.execute(f"INSERT INTO accounts_{size} SELECT n, 1 + (n - 1) / 100000, 0, '' "
                        "FROM generate_series(1, %s) n", (size,))
            cur.execute(f"VACUUM ANALYZE accounts_{size}")


def change(dsn: str, size: int, share: float, rng: random.Random) -> int:
    ids = rng.sample(range(1, size + 1), max(1, round(size * share / 100)))
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(f"UPDATE accounts_{size} SET abalance = abalance + 1 WHERE aid = ANY(%s)", (ids,))
    return len(ids)


def timed(project: Project, view: str, complete: bool = False) -> tuple[float, str]:
    started = time.perf_counter()
    result = project.refresh([view], complete=complete, raise_on_error=True)[0]
    return time.perf_counter() - started, result.method


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="20000,200000,2000000")
    parser.add_argument("--shares", default="0.01,0.1,1,10,50", help="percent of the rows changed per point")
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--deletion-vectors", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    shares = [float(s) for s in args.shares.split(",")]
    rng = random.Random(60)
    rows = []
    with TempPostgres(settings={"shared_buffers": "1GB"}) as pg, tempfile.TemporaryDirectory() as tmp:
        dsn = pg.dsn()
        load(dsn, sizes)
        views = [{"name": f"{kind}_{size}", "refresh": kind,
                  "query": f"SELECT aid, bid, abalance, filler FROM accounts_{size}"}
                 for size in sizes for kind in KINDS]
        config = Path(tmp) / "mvlog.yaml"
        config.write_text(yaml.safe_dump({
            "source": {"dsn": dsn}, "warehouse": str(Path(tmp) / "wh"), "spark": SPARK,
            "logs": [{"table": f"accounts_{size}"} for size in sizes], "views": views,
            "delta": {"deletion_vectors": args.deletion_vectors}}, sort_keys=False))
        project = Project(load_config(config))
        try:
            project.apply()
            point = 0
            for size in sizes:
                for p in range(args.passes):
                    for share in shares:
                        keys = change(dsn, size, share, rng)
                        turn, point = point % len(KINDS), point + 1
                        measured = {kind: timed(project, f"{kind}_{size}") for kind in KINDS[turn:] + KINDS[:turn]}
                        (force, chose), (fast, _), (complete, _) = (measured[kind] for kind in KINDS)
                        print(f"pass {p + 1}: {size} rows, {share} %: force {chose} {force:.2f} s, fast {fast:.2f} s, "
                              f"complete {complete:.2f} s ({KINDS[turn]} first)", flush=True)
                        if p == args.passes - 1:
                            rows.append((size, share, keys, fast, complete, chose, force))
        finally:
            project.close()

    print(f"\n# sweep: {platform.node()}, {os.cpu_count()} cores, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
          f"deletion vectors {'on' if args.deletion_vectors else 'off'}, pass {args.passes} of {args.passes}\n")
    print("| view rows | changed | keys | fast (s) | complete (s) | force chose | force (s) | force / cheaper |")
    print("|---:|---:|---:|---:|---:|---|---:|---:|")
    for size, share, keys, fast, complete, chose, force in rows:
        print(f"| {size:,} | {share} % | {keys:,} | {fast:.2f} | {complete:.2f} | {chose} | {force:.2f} | "
              f"{force / min(fast, complete):.2f}x |")


if __name__ == "__main__":
    main()
