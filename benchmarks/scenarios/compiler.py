"""What the compiler costs: every view of the shop, TPC-H's 22 queries and TPC-DS's 99 (with their
top-N forms) compiled as ``mvlog apply`` compiles them — parsed, rewritten, analysed, split into
pieces, shaped, every statement of a fast refresh generated and planned by PostgreSQL — over the
examples' schemas without data (issue #74, item 4).

    python -m benchmarks run compiler --set rounds=5

Per example, the median over ``rounds`` of ``Project.validate()`` in one process: its wall seconds
(PostgreSQL's catalog lookups and planning included) and the Python process's own CPU seconds —
the compiler's cost, which a change to ``mvlog.sql`` moves. No Spark, no data.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import yaml

from benchmarks.datasets import tpcds, tpch
from benchmarks.harness import ROOT, Bench, median
from benchmarks.scenarios import Parameter, Scenario
from mvlog.config import load_config
from mvlog.project import Project


def examples() -> dict[str, tuple[str, list[str], list[dict]]]:
    """Per example: its schema, the tables logged and its views."""
    shop = yaml.safe_load((ROOT / "examples" / "shop" / "mvlog.yaml").read_text())
    return {
        "shop": ((ROOT / "examples" / "shop" / "schema.sql").read_text(), [log["table"] for log in shop["logs"]],
                 shop["views"]),
        "tpch22": ((tpch.EXAMPLE / "schema.sql").read_text(), list(tpch.TABLES),
                   yaml.safe_load((tpch.EXAMPLE / "views.yaml").read_text())),
        "tpcds99": ((tpcds.EXAMPLE / "schema.sql").read_text(), tpcds.tables(), list(tpcds.views())),
    }


def run(bench: Bench, p: dict[str, Any]) -> None:
    pg = bench.cluster()
    for name, (schema, tables, views) in examples().items():
        if p["examples"] and name not in p["examples"].split(","):
            continue
        pg.run_script(f"CREATE DATABASE {name}")
        pg.run_script(schema, dbname=name)
        config = bench.project(pg.dsn(name), tables, [{**v, "refresh": "force"} for v in views],
                               name=f"{name}.yaml")
        walls, cpus = [], []
        with contextlib.closing(Project(load_config(config))) as project:
            for _ in range(p["rounds"]):
                wall, cpu = time.perf_counter(), time.process_time()
                project.validate()
                walls.append(time.perf_counter() - wall)
                cpus.append(time.process_time() - cpu)
        bench.measure("validate", median(walls), "s", example=name, views=len(views))
        bench.measure("compiler_cpu", median(cpus), "s", example=name, views=len(views))
        bench.measure("compiler_cpu_per_view", median(cpus) / len(views), "s", example=name)


SCENARIO = Scenario("compiler", "every example view compiled as apply compiles it: wall and the compiler's CPU", {
    "rounds": Parameter(3, 1, "compilations of every view, per example"),
    "examples": Parameter("", "shop,tpch22", "a comma-separated subset of shop, tpch22, tpcds99 (default: all)"),
}, run)
