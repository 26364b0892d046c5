"""The warm fixed cost of one small view, with and without its Delta state built between refreshes
(issue #60, item 3).

    python benchmarks/warm_state.py --rows 20000 --percent 1 --rounds 8

One table of ``--rows`` rows (the fleet's shape: ``id``, ``g``, ``a``, ``b``) on a throwaway
PostgreSQL and one copy view, in one warm process (as ``mvlog schedule`` runs). Each round changes
``--percent`` of the rows and refreshes the view fast; rounds alternate between ``cold`` (the
refresh's first read builds the state of the version the previous refresh committed) and
``warm`` (``Project.warm`` built it after the previous refresh, untimed, as the scheduler does
between refreshes). Printed: the median seconds and phases of each kind.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import psycopg2
import yaml

from mvlog.config import load_config
from mvlog.postgres.pgtemp import TempPostgres
from mvlog.project import Project

PHASES = ("prepare", "read", "write", "record")
SPARK = {"master": "local[2]", "conf": {"spark.driver.memory": "4g", "spark.sql.shuffle.partitions": "4"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--percent", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=8, help="rounds of each kind (one more warms the JVM)")
    parser.add_argument("--rewrite-max-rows", type=int, default=None, help="delta.rewrite_max_rows (default: mvlog's)")
    args = parser.parse_args()
    step = max(1, round(100 / args.percent))
    runs: dict[str, list] = {"cold": [], "warm": []}
    with TempPostgres() as pg, tempfile.TemporaryDirectory() as tmp:
        dsn = pg.dsn()
        with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE t (id int PRIMARY KEY, g int NOT NULL, a int, b numeric(12,2))")
            cur.execute("INSERT INTO t SELECT n, n %% 100, (n * 7) %% 1000, (n %% 997) * 1.25 "
                        "FROM generate_series(1, %s) n", (args.rows,))
        config = Path(tmp) / "mvlog.yaml"
        delta = {} if args.rewrite_max_rows is None else {"delta": {"rewrite_max_rows": args.rewrite_max_rows}}
        config.write_text(yaml.safe_dump({
            "source": {"dsn": dsn}, "warehouse": str(Path(tmp) / "wh"), "spark": SPARK, "logs": [{"table": "t"}],
            "views": [{"name": "v", "refresh": "fast", "query": "SELECT id, g, a, b FROM t"}], **delta}))
        project = Project(load_config(config))
        try:
            project.apply()
            for r in range(2 * args.rounds + 1):
                kind = "warm" if r % 2 else "cold"
                if kind == "warm":
                    project.warm(["v"])
                with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
                    cur.execute("UPDATE t SET b = b + 1 WHERE id %% %s = %s", (step, r % step))
                result = project.refresh(["v"], raise_on_error=True)[0]
                if r:
                    runs[kind].append(result)
            write = project.plan("v").to_json()["write"]
        finally:
            project.close()

    print(f"# warm state: {platform.node()}, {os.cpu_count()} cores, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; "
          f"{args.rows:,} rows, {args.percent} % changed per refresh, write {write}, medians of {args.rounds}\n")
    print("| Delta state of the last version | seconds | prepare | read | write | record |")
    print("|---|---:|---:|---:|---:|---:|")
    for kind, results in runs.items():
        med = lambda f, rs=results: statistics.median(f(x) for x in rs)  # noqa: E731
        print(f"| {'built by the refresh' if kind == 'cold' else 'built before (warm)'} | "
              f"{med(lambda x: x.seconds):.2f} | "
              + " | ".join(f"{med(lambda x, p=p: x.phases.get(p, 0.0)):.2f}" for p in PHASES) + " |")


if __name__ == "__main__":
    main()
