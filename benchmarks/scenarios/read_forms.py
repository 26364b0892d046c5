"""The form of a read PostgreSQL is sent, measured against the query as written, over the TPC-DS
queries where mvlog sends another form (issue #73): a CTE read several times and restricted by a
constant each time, inlined (``sql/rewrite/restricted_ctes``), a correlated aggregate joined where
PostgreSQL estimates that cheaper (``sql/rewrite/decorrelate``) — and the TPC-DS queries with a
CTE read more than once that the rule leaves materialized, timed inlined too, so that the rule's
choices are measured both ways.

    python -m benchmarks run read_forms --set scale=1

Per query, the seconds of ``SELECT count(*)`` over each form (``timeout``: the statement timeout;
a form cut off at it is recorded at the timeout, labelled ``cut``): ``written`` (the query as
written), ``sent`` (the form mvlog sends, where it differs) and ``inlined`` (every CTE read more
than once ``NOT MATERIALIZED``, where the rule leaves them). No Spark: the reads alone.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import psycopg2
import psycopg2.errors

from benchmarks.datasets import tpcds
from benchmarks.harness import Bench
from benchmarks.scenarios import Parameter, Scenario
from mvlog.pipeline import readform
from mvlog.postgres.source import Source
from mvlog.sql.parse.sqltree import parsed, sql_text
from mvlog.sql.rewrite.restricted_ctes import materialized_ctes


def every_cte_inlined(query: str) -> str | None:
    """``query`` with every CTE PostgreSQL would materialize ``NOT MATERIALIZED``; None if it has none."""
    tree = parsed(query)
    materialized = materialized_ctes(tree)
    for cte, _ in materialized:
        cte.set("materialized", False)
    return sql_text(tree) if materialized else None


def forms(query: str, source: Source) -> dict[str, str]:
    """The forms of ``query`` timed (see the module); empty when mvlog sends it as written and it
    reads no CTE more than once."""
    with source.inspection() as cur:
        form = readform.sent(query, query, lambda sql: source.estimated_cost(cur, sql))
    found = {"sent": form.sql} if form.sql != query else {}
    if (inlined := every_cte_inlined(query)) is not None and inlined != form.sql:
        found["inlined"] = inlined
    return {"written": query, **found} if found else {}


def timed(dsn: str, query: str, timeout: int) -> float | None:
    """Seconds of ``SELECT count(*)`` over ``query``; None if cut off at ``timeout`` seconds."""
    with contextlib.closing(psycopg2.connect(dsn)) as conn, conn.cursor() as cur:
        cur.execute("SET statement_timeout = %s", (f"{timeout}s",))
        start = time.perf_counter()
        try:
            cur.execute(f"SELECT count(*) FROM ({query}) AS q")  # noqa: S608 (the benchmark's own queries)
        except psycopg2.errors.QueryCanceled:
            return None
        return time.perf_counter() - start


def run(bench: Bench, p: dict[str, Any]) -> None:
    pg = bench.cluster()
    pg.run_script("CREATE DATABASE tpcds")
    dsn = pg.dsn("tpcds")
    counts = tpcds.load_dsn(dsn, p["scale"])
    bench.note(f"TPC-DS at scale {p['scale']}: store_sales {counts['store_sales']:,} rows")
    wanted = set(p["queries"].split(",")) if p["queries"] else None
    source = Source(dsn)
    try:
        for view in tpcds.views(wanted):
            for form, sql in forms(view["query"], source).items():
                seconds = timed(dsn, sql, p["timeout"])
                bench.measure("read", p["timeout"] if seconds is None else seconds, "s", query=view["name"],
                              form=form, cut=seconds is None)
    finally:
        source.close()


SCENARIO = Scenario("read_forms", "TPC-DS reads as written and in the form mvlog sends them (no Spark)", {
    "scale": Parameter(1.0, 0.01, "TPC-DS scale factor"),
    "timeout": Parameter(90, 30, "statement timeout, seconds, per form"),
    "queries": Parameter("", "q04,q30,q06", "a comma-separated subset of the TPC-DS queries (default: all)"),
}, run)
