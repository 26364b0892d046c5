"""TPC-H's two views (``line_revenue``: a row per line item of ``lineitem ⋈ orders ⋈ customer``;
``segment_month``: revenue and lines per market segment and month of the same join), fast against
complete after TPC-H's refresh functions (issues #30, #31, #75).

Each round changes ``fraction`` of the orders: RF1 inserts as many new orders with their line
items, RF2 deletes as many with theirs, as many orders flip their status and a third as many
customers change segment. Then one ``mvlog refresh`` and one ``mvlog refresh --complete``, each a
new process on ``mvlog engine``; ``mvlog verify --full`` after the last fast one. Per view, the
fast refresh's phases (``refresh --json``).
"""

from __future__ import annotations

from typing import Any

from benchmarks.datasets import tpch
from benchmarks.harness import LARGE, Bench, fast_against_complete
from benchmarks.scenarios import Parameter, Scenario


def run(bench: Bench, p: dict[str, Any]) -> None:
    pg = bench.cluster(LARGE)
    counts = tpch.load(pg.dsn(), p["scale"], bench.tmp / "data")
    orders = max(1, round(counts["orders"] * p["fraction"]))
    bench.note(f"{', '.join(f'{t} {n:,}' for t, n in counts.items())} rows; per round RF1 + RF2 of {orders:,} "
               f"orders, {orders:,} status flips, {max(1, orders // 3):,} customers changing segment")
    config = bench.project(pg.dsn(), ["customer", "orders", "lineitem"], tpch.VIEWS,
                           delta={"deletion_vectors": p["deletion_vectors"]})
    bench.engine()
    seconds, _ = bench.mvlog(config, "apply")
    bench.measure("apply", seconds)

    def change() -> None:
        tpch.change(pg.dsn(), orders)

    fast_against_complete(bench, config, p["rounds"], change, verify=True, require_fast=True)


SCENARIO = Scenario("tpch_views", "TPC-H's two views, fast against complete after RF1/RF2", {
    "scale": Parameter(1.0, 0.01, "TPC-H scale factor"),
    "fraction": Parameter(0.001, 0.01, "orders changed by RF1 and by RF2 per round"),
    "rounds": Parameter(2, 1, "counted rounds (one more warms the engine)"),
    "deletion_vectors": Parameter(False, False, "the views' tables with deletion vectors"),
}, run)
