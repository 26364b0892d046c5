"""The 22 TPC-H queries and their five top-N forms as views (``examples/tpch22``), every one
``refresh: force`` (issue #61): per query the method its fast refresh took, fast and complete
seconds and the rows it read.

All 8 tables with their primary keys, a log on each. Each round: RF1 and RF2 on ``fraction`` of
the orders, as many customers' balances and segments, a tenth as many parts' prices and
suppliers' balances and as many part-supplier costs updated; then one ``mvlog refresh`` of all the
views and one ``mvlog refresh --complete`` (new processes on ``mvlog engine``); ``mvlog verify
--full`` after the last fast one.
"""

from __future__ import annotations

from typing import Any

import yaml

from benchmarks.datasets import tpch
from benchmarks.harness import LARGE, Bench, fast_against_complete
from benchmarks.scenarios import Parameter, Scenario


def run(bench: Bench, p: dict[str, Any]) -> None:
    views = yaml.safe_load((tpch.EXAMPLE / "views.yaml").read_text())
    if p["views"]:
        views = [v for v in views if v["name"] in p["views"].split(",")]
    pg = bench.cluster(LARGE)
    counts = tpch.load(pg.dsn(), p["scale"], bench.tmp / "data", tpch.TABLES, (tpch.EXAMPLE / "schema.sql").read_text())
    orders = max(1, round(counts["orders"] * p["fraction"]))
    bench.note(f"{', '.join(f'{t} {n:,}' for t, n in counts.items())} rows; per round RF1 + RF2 of {orders:,} "
               f"orders each and the updates")
    config = bench.project(pg.dsn(), list(tpch.TABLES), [{**v, "refresh": "force"} for v in views])
    bench.engine()
    seconds, _ = bench.mvlog(config, "apply")
    bench.measure("apply", seconds)
    fast_against_complete(bench, config, p["rounds"], lambda: tpch.change_all(pg.dsn(), orders), verify=True)


SCENARIO = Scenario("tpch_queries", "TPC-H's 22 queries and 5 top-N forms as views, fast against complete", {
    "scale": Parameter(1.0, 0.01, "TPC-H scale factor"),
    "fraction": Parameter(0.001, 0.01, "orders changed by RF1 and by RF2 per round"),
    "rounds": Parameter(1, 1, "counted rounds (one more warms the engine)"),
    "views": Parameter("", "q01,q13,q18_top", "a comma-separated subset of the views (default: all 27)"),
}, run)
