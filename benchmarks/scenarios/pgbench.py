"""Fast against complete at pgbench scale, as a scheduler pays it: every refresh a new ``mvlog
refresh`` process (cron, Airflow), on a running ``mvlog engine`` and (with ``own_spark``) on a
Spark of its own (issues #13, #39, #60, #75).

    python -m benchmarks run pgbench --set scale=100 --set changes=2000 --set deletion_vectors=true

pgbench's accounts table (``scale`` x 100,000 rows), two views — a copy of the accounts and their
balance per branch (count, sum and max) — and ``changes`` random accounts updated before each
fast refresh. Each figure is the median of ``rounds`` runs of one command in a new process (``mvlog
refresh`` of both views; ``--complete`` for the complete refresh), process start, the connection
to the engine and the JVM's warm-up included. Per view, the fast refresh's phases.
"""

from __future__ import annotations

import random
from typing import Any

import psycopg2

from benchmarks.datasets.pgbench import initialize
from benchmarks.harness import ENGINE_SPARK, Bench, fast_against_complete
from benchmarks.scenarios import Parameter, Scenario

VIEWS = [
    {"name": "accounts", "refresh": "fast", "query": "SELECT aid, bid, abalance, filler FROM pgbench_accounts"},
    {"name": "branch_balance", "refresh": "fast",  # issue #39's view: max() next to count and sum
     "query": "SELECT bid, count(*) AS accounts, sum(abalance) AS balance, max(abalance) AS top_balance "
              "FROM pgbench_accounts GROUP BY bid"},
]


def change(dsn: str, count: int, accounts: int, rng: random.Random) -> None:
    ids = rng.sample(range(1, accounts + 1), count)
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = ANY(%s)", (ids,))


def run(bench: Bench, p: dict[str, Any]) -> None:
    accounts = round(p["scale"] * 100_000)
    rng = random.Random(4711)
    pg = bench.cluster()
    initialize(pg, p["scale"])
    delta = {"deletion_vectors": p["deletion_vectors"]}
    bench.note(f"{accounts:,} accounts, {p['changes']:,} changed before each fast refresh, 2 views; medians of "
               f"{p['rounds']} new processes per command")
    # Every command with a Spark of its own, or (SPARK_REMOTE) on the engine.
    config = bench.project(pg.dsn(), ["pgbench_accounts"], VIEWS, spark=ENGINE_SPARK, delta=delta)
    on_engine = {"SPARK_REMOTE": bench.engine()}
    seconds, _ = bench.mvlog(config, "apply", env=on_engine)
    bench.measure("apply", seconds)
    for mode, env in [("engine", on_engine), *([("own Spark", {})] if p["own_spark"] else [])]:
        fast_against_complete(bench, config, p["rounds"], lambda: change(pg.dsn(), p["changes"], accounts, rng),
                              require_fast=True, env=env, spark=mode)


SCENARIO = Scenario("pgbench", "pgbench accounts: fast against complete, a new process per command", {
    "scale": Parameter(100.0, 1.0, "pgbench scale (100,000 accounts each)"),
    "changes": Parameter(2000, 200, "accounts updated before each fast refresh"),
    "rounds": Parameter(3, 1, "counted rounds per command (one more warms)"),
    "deletion_vectors": Parameter(False, False, "the views' tables with deletion vectors"),
    "own_spark": Parameter(False, False, "also every command with a Spark of its own"),
}, run)
