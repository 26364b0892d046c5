"""What one small fast refresh costs the test suite's Spark: the JVM's CPU seconds over a loop of
small refreshes, on the suite's own Spark settings (``tests/conftest.py``'s ``TEST_SPARK``), with
one setting changed per run. Each run is a fresh JVM (Spark settings are fixed at its start).

    python tests/tools/suite_refresh_cost.py --rounds 15
    python tests/tools/suite_refresh_cost.py --rounds 15 --conf spark.sql.adaptive.enabled=false
    python tests/tools/suite_refresh_cost.py --rounds 15 --java-options "-XX:TieredStopAtLevel=1"
    python tests/tools/suite_refresh_cost.py --rounds 32 --chunk 4   # the JVM warming: a row per 4 rounds

Six views of every small class (simple, filtered, aggregate, join, aggregate over a join, LEFT
JOIN) over two tables of 40 and 4 rows; each round changes three rows of one table (an update
that moves a group, a delete, an insert), and every fifth round one of the other, then refreshes
all six views fast. The suite's oracles do the same thousands of times. Prints one row: the
build's seconds and JVM CPU-seconds, then the loop's, and the loop's JVM CPU per view refresh.
"""

from __future__ import annotations

import argparse
import copy
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg2
import yaml

from mvlog.config import load_config
from mvlog.postgres.pgtemp import TempPostgres
from mvlog.project import Project

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the suite's conftest
from conftest import TEST_SPARK  # noqa: E402  the suite's settings, as the suite runs them

VIEWS = [
    {"name": "v_all", "refresh": "fast", "query": "SELECT * FROM items"},
    {"name": "v_filtered", "refresh": "fast", "query": "SELECT id, qty * price AS t FROM items WHERE qty > 2"},
    {"name": "v_groups", "refresh": "fast",
     "query": "SELECT grp, sum(qty) AS s, count(*) AS n, max(price) AS m FROM items GROUP BY grp"},
    {"name": "v_join", "refresh": "fast",
     "query": "SELECT i.id, g.name, i.qty FROM items i JOIN grps g ON g.id = i.grp"},
    {"name": "v_join_groups", "refresh": "fast",
     "query": "SELECT g.name, count(*) AS n, sum(i.qty) AS q FROM items i JOIN grps g ON g.id = i.grp GROUP BY g.name"},
    {"name": "v_left", "refresh": "fast",
     "query": "SELECT g.id, g.name, i.id AS item FROM grps g LEFT JOIN items i ON i.grp = g.id AND i.qty > 30"},
]


def thread_cpu_seconds(stat: Path) -> float:
    """User + system CPU of a process or thread, from its ``/proc/…/stat``."""
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spark_jvm_pid() -> int:
    """The process id of this process's Spark JVM (the py4j gateway)."""
    from pyspark import SparkContext

    assert SparkContext._gateway is not None, "no Spark JVM in this process"
    return SparkContext._gateway.proc.pid


def jvm_cpu_seconds() -> float:
    """User + system CPU of this process's Spark JVM and its children."""
    pid = spark_jvm_pid()
    children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return sum(thread_cpu_seconds(Path(f"/proc/{process}/stat")) for process in [pid, *map(int, children)])


def jit_cpu_seconds() -> float:
    """CPU of the Spark JVM's JIT compiler threads (C1 and C2)."""
    total = 0.0
    for task in Path(f"/proc/{spark_jvm_pid()}/task").iterdir():
        try:
            if "Compiler" in (task / "comm").read_text():
                total += thread_cpu_seconds(task / "stat")
        except OSError:  # the thread ended
            continue
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--conf", action="append", default=[], help="a Spark setting, key=value (repeatable)")
    parser.add_argument("--java-options", default="", help="added to the driver's Java options")
    parser.add_argument("--rewrite-max-rows", type=int, default=0, help="0: every refresh MERGEs, as in the suite")
    parser.add_argument("--chunk", type=int, default=0, help="print the JVM CPU per this many rounds too")
    args = parser.parse_args()

    spark = copy.deepcopy(TEST_SPARK)
    spark["conf"].update(dict(item.split("=", 1) for item in args.conf))
    spark["conf"]["spark.driver.extraJavaOptions"] += f" {args.java_options}".rstrip()
    with TempPostgres() as pg, tempfile.TemporaryDirectory() as directory:
        conn = psycopg2.connect(pg.dsn())
        conn.autocommit = True
        cur = conn.cursor()
        cur.execute("CREATE TABLE items (id int PRIMARY KEY, grp int, qty int, price numeric(10,2), label text);"
                    "CREATE TABLE grps (id int PRIMARY KEY, name text);"
                    "INSERT INTO items SELECT g, g % 4, g, g * 1.5, 'x' || g FROM generate_series(1, 40) g;"
                    "INSERT INTO grps SELECT g, 'g' || g FROM generate_series(0, 3) g")
        config = Path(directory) / "mvlog.yaml"
        config.write_text(yaml.safe_dump({
            "source": {"dsn": pg.dsn()}, "warehouse": f"{directory}/wh", "spark": spark,
            "logs": [{"table": "items"}, {"table": "grps"}], "views": VIEWS,
            "delta": {"rewrite_max_rows": args.rewrite_max_rows}}))
        with Project(load_config(config)) as project:
            started = time.monotonic()
            project.apply()
            build_seconds, build_cpu = time.monotonic() - started, jvm_cpu_seconds()
            started = time.monotonic()
            chunks: list[tuple[int, float, float, float]] = []
            mark = (time.monotonic(), jvm_cpu_seconds(), jit_cpu_seconds())
            for round_ in range(args.rounds):
                cur.execute("UPDATE items SET qty = qty + 1, grp = (grp + 1) %% 4 WHERE id = %s", (round_ + 1,))
                cur.execute("DELETE FROM items WHERE id = %s", (round_ + 20,))
                cur.execute("INSERT INTO items VALUES (%s, 1, 5, 2.5, 'n')", (round_ + 100,))
                if round_ % 5 == 0:
                    cur.execute("UPDATE grps SET name = name || 'x' WHERE id = %s", (round_ % 4,))
                failed = [r for r in project.refresh() if r.error]
                assert not failed, failed
                if args.chunk and (round_ + 1) % args.chunk == 0:
                    now = (time.monotonic(), jvm_cpu_seconds(), jit_cpu_seconds())
                    chunks.append((round_ + 1, now[0] - mark[0], now[1] - mark[1], now[2] - mark[2]))
                    mark = now
            loop_seconds, loop_cpu = time.monotonic() - started, jvm_cpu_seconds() - build_cpu
    changed = ", ".join([*args.conf, *([args.java_options] if args.java_options else [])]) or "(the suite's)"
    refreshes = args.rounds * len(VIEWS)
    print("| settings | build s | build JVM CPU-s | loop s | loop JVM CPU-s | JVM CPU-s per view refresh |")
    print("|---|---|---|---|---|---|")
    print(f"| {changed} | {build_seconds:.1f} | {build_cpu:.1f} | {loop_seconds:.1f} | {loop_cpu:.1f} | "
          f"{loop_cpu / refreshes:.2f} |")
    if chunks:
        print()
        print("| rounds up to | s | JVM CPU-s | of it JIT compiler threads | JVM CPU-s per view refresh |")
        print("|---|---|---|---|---|")
        for upto, seconds, cpu, jit in chunks:
            print(f"| {upto} | {seconds:.1f} | {cpu:.1f} | {jit:.1f} | {cpu / (args.chunk * len(VIEWS)):.2f} |")


if __name__ == "__main__":
    main()
