"""Fast, complete and what ``force`` chose, over view size x changed share (issue #60, item 4).

    python -m benchmarks run sweep --set sizes=20000,200000,2000000 --set shares=0.01,0.1,1,10,50
    python -m benchmarks run sweep --set sizes=2000000 --set shares=0.1,10 --set deletion_vectors=true

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

The shares run in order ``passes`` times; ``force`` learns from its own refreshes (issue #60,
item 2), so the first pass shows it learning and the last what it settled on. Printed: one table
row per point of the last pass, with force's seconds over the cheaper method's.
"""

from __future__ import annotations

import contextlib
import random
import time
from typing import Any

import psycopg2

from benchmarks.harness import ENGINE_SPARK, Bench
from benchmarks.scenarios import Parameter, Scenario
from mvlog.config import load_config
from mvlog.project import Project

KINDS = ["force", "fast", "complete"]  # the views of each size, by their refresh: setting


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


def run(bench: Bench, p: dict[str, Any]) -> None:
    sizes = [int(s) for s in str(p["sizes"]).split(",")]
    shares = [float(s) for s in str(p["shares"]).split(",")]
    rng = random.Random(60)
    pg = bench.cluster({"shared_buffers": "1GB"})
    load(pg.dsn(), sizes)
    views = [{"name": f"{kind}_{size}", "refresh": kind,
              "query": f"SELECT aid, bid, abalance, filler FROM accounts_{size}"} for size in sizes for kind in KINDS]
    # One warm process (the same Project), as under ``mvlog schedule``: a Spark of its own.
    config = bench.project(pg.dsn(), [f"accounts_{size}" for size in sizes], views, spark=ENGINE_SPARK,
                           delta={"deletion_vectors": p["deletion_vectors"]})
    with contextlib.closing(Project(load_config(config))) as project:
        project.apply()
        point = 0
        for size in sizes:
            for pass_ in range(p["passes"]):
                for share in shares:
                    keys = change(pg.dsn(), size, share, rng)
                    turn, point = point % len(KINDS), point + 1
                    measured = {kind: timed(project, f"{kind}_{size}") for kind in KINDS[turn:] + KINDS[:turn]}
                    if pass_ < p["passes"] - 1:
                        continue
                    (force, chose), (fast, _), (complete, _) = (measured[kind] for kind in KINDS)
                    point_labels = {"rows": size, "share": share, "keys": keys}
                    bench.measure("fast", fast, "s", **point_labels)
                    bench.measure("complete", complete, "s", **point_labels)
                    bench.measure("force", force, "s", chose=chose, **point_labels)
                    bench.measure("force_over_cheaper", force / min(fast, complete), "x", **point_labels)
    cheaper = [m for m in bench.measures if m.name == "force_over_cheaper"]
    bench.measure("points_within_1.1x", sum(m.value <= 1.1 for m in cheaper), "count", points=len(cheaper))


SCENARIO = Scenario("sweep", "fast, complete and what force chose, over view size x changed share (#60)", {
    "sizes": Parameter("20000,200000,2000000", "2000", "view sizes (rows), comma-separated"),
    "shares": Parameter("0.01,0.1,1,10,50", "1,50", "percent of the rows changed per point, comma-separated"),
    "passes": Parameter(2, 1, "passes over the shares (force learns in the first)"),
    "deletion_vectors": Parameter(False, False, "the views' tables with deletion vectors"),
}, run)
