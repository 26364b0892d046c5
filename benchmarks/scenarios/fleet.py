"""A fleet of views on one schedule: what a refresh costs when nothing, one table, or every table
changed, against a complete refresh of the fleet; and what an idle scheduler spends per tick.

    python -m benchmarks run fleet --set tables=20 --set views_per_table=3 --set rows=20000

``tables`` tables ``t00…`` of ``rows`` rows each; per table up to three views with
``refresh: force``: a filtered copy, an aggregate, and a join with the next table. Every command
runs as a new ``mvlog`` process with a Spark of its own (``local[2]``; with ``engine``, on one
running ``mvlog engine``), as a cron job would, and
is timed as a whole (process start, Spark start, PostgreSQL, Delta). In order:

  apply (creates the logs and builds every view), a refresh with nothing changed, a refresh after
  ``changed_percent`` of ``changed_tables`` tables changed, one after that share of every
  table changed, ``refresh --complete`` of the fleet, ``status --json``; ``rounds`` pairs of a
  refresh and a ``refresh --complete``, every table changed before each (force has measured both
  methods of every view by then: the medians of each, and their ratio, #75's target); then ``mvlog schedule``
  with every view under a ``freshness:`` target and no writes (CPU seconds of the scheduler and
  its children per look at the lags), and once more with views on a cron schedule (every look a
  refresh of the whole fleet that finds nothing changed); finally a write to one table under the
  cron scheduler, and which views its next tick refreshed.

Beside the one-table refresh, its primitive (``refresh_one_table_primitive``, #75): a new Python
process that starts Spark as the command does (its own, or a Connect session on the engine) and,
for each view that refresh did not find fresh, reads the view's query by one Spark JDBC read and
overwrites a Delta table with the rows, the views at once (a thread each) — nothing of mvlog but its
Spark settings; the wall from start to exit, the median of ``PRIMITIVE_ROUNDS``.

Every view is checked against PostgreSQL after the changed refreshes (``mvlog verify``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg2
import yaml

from benchmarks.harness import Bench, median
from benchmarks.scenarios import Parameter, Scenario
from mvlog.config import SparkConfig
from mvlog.postgres.pgtemp import free_port
from mvlog.spark.settings import session_conf

mvlog = Bench.mvlog
PRIMITIVE_ROUNDS = 3
# The one-table refresh's primitive, run as ``python -c PRIMITIVE <JSON arguments>``.
PRIMITIVE = """
import json, sys, threading
from pyspark.sql import SparkSession
a = json.loads(sys.argv[1])
builder = SparkSession.builder.remote(a["remote"]) if a["remote"] else SparkSession.builder.master(a["master"])
for key, value in ({} if a["remote"] else a["conf"]).items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
failed = []
def copy(i, query):
    try:
        (spark.read.format("jdbc").option("url", a["url"]).option("driver", "org.postgresql.Driver")
         .option("user", a["user"]).option("password", a["password"]).option("query", query).load()
         .write.format("delta").mode("overwrite").save(f"{a['out']}/v{i}"))
    except Exception as exc:
        failed.append(str(exc)[:500])
threads = [threading.Thread(target=copy, args=(i, q)) for i, q in enumerate(a["queries"])]
[t.start() for t in threads]
[t.join() for t in threads]
sys.exit("; ".join(failed) or None)
"""
TICKS = 6  # scheduler looks measured per mode
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def view_definitions(tables: int, per_table: int) -> list[dict]:
    views = []
    for i in range(tables):
        t, nxt = f"t{i:02d}", f"t{(i + 1) % tables:02d}"
        shapes = [
            (f"copy_{t}", f"SELECT id, g, a, b FROM {t} WHERE a % 10 <> 0"),
            (f"agg_{t}", f"SELECT g, count(*) AS n, sum(b) AS total FROM {t} GROUP BY g"),
            (f"join_{t}", f"SELECT x.id, x.b, y.b AS next_b FROM {t} x JOIN {nxt} y ON y.id = x.id WHERE x.g < 50"),
        ]
        views += [{"name": name, "refresh": "force", "query": query} for name, query in shapes[:per_table]]
    return views


def load(dsn: str, tables: int, rows: int) -> None:
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        for i in range(tables):
            cur.execute(f"CREATE TABLE t{i:02d} (id int PRIMARY KEY, g int NOT NULL, a int, b numeric(12,2))")
            cur.execute(f"INSERT INTO t{i:02d} SELECT n, n %% 100, (n * 7) %% 1000, (n %% 997) * 1.25 "
                        f"FROM generate_series(1, %s) AS n", (rows,))
            cur.execute(f"ANALYZE t{i:02d}")


def change(dsn: str, tables: list[int], rows: int, percent: float, round_: int) -> None:
    step = max(1, round(100 / percent))
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        for i in tables:
            cur.execute(f"UPDATE t{i:02d} SET b = b + 1, g = (g + %s) %% 100 WHERE id %% %s = %s",
                        (round_, step, round_ % step))


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a process and every live descendant (the Spark JVM included)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry))
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        todo += children.get(p, [])
    return total


def primitive(document: dict, dsn: str, names: list[str], out: Path) -> float:
    """The seconds of the one-table refresh's primitive (see the module's docstring) for the views
    ``names``: the median wall of ``PRIMITIVE_ROUNDS`` new processes."""
    spark = document["spark"]
    parts = psycopg2.extensions.parse_dsn(dsn)
    queries = [v["query"] for v in document["views"] if v["name"] in names]
    arguments = {"remote": spark.get("remote"), "master": spark.get("master", "local[2]"),
                 "conf": {} if spark.get("remote") else session_conf(SparkConfig(**spark)),
                 "url": f"jdbc:postgresql://{parts.get('host', '127.0.0.1')}:{parts['port']}/{parts['dbname']}",
                 "user": parts["user"], "password": parts.get("password", ""), "out": str(out), "queries": queries}
    walls = []
    for _ in range(PRIMITIVE_ROUNDS):
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", PRIMITIVE, json.dumps(arguments)], capture_output=True, text=True)
        walls.append(time.perf_counter() - started)
        if done.returncode:
            raise RuntimeError(f"the one-table refresh's primitive failed: {done.stderr.strip()[-2000:]}")
    return median(walls)


def affected_since(dsn: str, after: int) -> list[str]:
    """The views refreshed (not found fresh) since the history row ``after``."""
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT view_name FROM mvlog.refresh_history WHERE id > %s AND status = 'succeeded' "
                    "AND method <> 'fresh' ORDER BY view_name", (after,))
        return [row[0] for row in cur.fetchall()]


def history_ids(dsn: str) -> int:
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT coalesce(max(id), 0) FROM mvlog.refresh_history")
        return cur.fetchone()[0]


def refreshed_since(dsn: str, after: int) -> dict[str, int]:
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT method, count(*) FROM mvlog.refresh_history WHERE id > %s AND status = 'succeeded' "
                    "GROUP BY method", (after,))
        return dict(cur.fetchall())


def schedule(config: Path, dsn: str, seconds_per_tick: float, write: list[int] | None = None
             ) -> tuple[float, int, dict[str, int], str]:
    """CPU seconds per scheduler tick with no writes, the ticks measured, and (``write``) what the
    refreshes after a write to those tables did."""
    log = config.parent / "schedule.log"
    process = subprocess.Popen([sys.executable, "-m", "mvlog", "-q", "-c", str(config), "schedule"],
                               stdout=log.open("w"), stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while "ready" not in log.read_text():
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"the scheduler did not start:\n{log.read_text()}")
            time.sleep(0.2)
        time.sleep(seconds_per_tick * 2)  # the first looks (and their imports) are behind it
        before, started = tree_cpu(process.pid), time.monotonic()
        time.sleep(seconds_per_tick * TICKS)
        cpu = (tree_cpu(process.pid) - before) / ((time.monotonic() - started) / seconds_per_tick)
        done: dict[str, int] = {}
        if write is not None:
            after = history_ids(dsn)
            change(dsn, write, 0, 1, 99)
            time.sleep(seconds_per_tick * 2 + 60)  # the tick after the write, with Spark's start
            done = refreshed_since(dsn, after)
        return cpu, TICKS, done, log.read_text()
    finally:
        process.terminate()
        process.wait(timeout=120)


def run(bench: Bench, p: dict[str, Any]) -> None:
    views = view_definitions(p["tables"], p["views_per_table"])
    pg = bench.cluster({"shared_buffers": "512MB"})
    dsn = pg.dsn()
    load(dsn, p["tables"], p["rows"])
    config = bench.project(dsn, [f"t{i:02d}" for i in range(p["tables"])], views, spark={"master": p["master"]})
    document = yaml.safe_load(config.read_text())
    if p["engine"]:
        os.environ["MVLOG_ENGINE_DIR"] = str(bench.tmp / "engine")
        port = free_port()
        mvlog(config, "engine", "start", "--port", str(port))
        document["spark"] = {"remote": f"sc://127.0.0.1:{port}"}
        config.write_text(yaml.safe_dump(document, sort_keys=False))
    try:
        timings, complete, fresh_cpu, cron_cpu, written = measure(p, config, document, dsn)
    finally:
        if p["engine"]:
            mvlog(config, "engine", "stop")
    where = "on one running mvlog engine" if p["engine"] else f"with a Spark of its own ({p['master']})"
    bench.note(f"{p['tables']} tables x {p['rows']:,} rows, {len(views)} views (refresh: force), a new process per "
               f"command {where}")
    for key, label, seconds in timings:
        bench.measure(key, seconds, "s", command=label)
        bench.measure(key + "_over_complete", seconds / complete, "x", command=label)
    paired = {key: seconds for key, _, seconds in timings}
    bench.measure("refresh_every_table_again_over_complete_after_change",
                  paired["refresh_every_table_again"] / paired["refresh_complete_after_change"], "x",
                  command="force's refresh against refresh --complete, each after every table changed")
    if p["scheduler"]:
        bench.measure("idle_tick_cpu", fresh_cpu, "s", mode="freshness 30s (a look every 3 s)")
        bench.measure("idle_tick_cpu", cron_cpu, "s", mode="cron every 10 s (a refresh of the quiet fleet)")
        for method in ("fast", "complete", "fresh"):
            bench.measure("after_one_write", written.get(method, 0), "count", method=method)


def every_table_changed(p: dict[str, Any], config: Path, dsn: str, round_: int, *args: str
                        ) -> tuple[float, dict[str, int]]:
    """``--changed-percent`` of every table changed, then one refresh (``args``: its options): its
    seconds and methods."""
    change(dsn, list(range(p['tables'])), p['rows'], p['changed_percent'], round_)
    mark = history_ids(dsn)
    seconds, _ = mvlog(config, "refresh", *args)
    return seconds, refreshed_since(dsn, mark)


def measure(p: dict[str, Any], config: Path, document: dict, dsn: str
            ) -> tuple[list[tuple[str, str, float]], float, float, float, dict[str, int]]:
    """Every command of the fleet, timed; the scheduler's CPU per idle tick, both ways."""
    views, timings = document["views"], []
    seconds, _ = mvlog(config, "apply")
    timings.append(("apply", f"apply (creates and builds {len(views)} views)", seconds))
    seconds, _ = mvlog(config, "apply")
    timings.append(("apply_again", "apply again, nothing changed", seconds))
    mark = history_ids(dsn)
    seconds, _ = mvlog(config, "refresh")
    timings.append(("refresh_unchanged", "refresh, nothing changed", seconds))
    assert refreshed_since(dsn, mark) == {"fresh": len(views)}, refreshed_since(dsn, mark)
    change(dsn, list(range(p['changed_tables'])), p['rows'], p['changed_percent'], 1)
    mark = history_ids(dsn)
    seconds, _ = mvlog(config, "refresh")
    affected = affected_since(dsn, mark)
    timings.append(("refresh_one_table", f"refresh, {p['changed_percent']:g} % of {p['changed_tables']} table(s) "
                    f"changed ({len(affected)} views affected)", seconds))
    seconds = primitive(document, dsn, affected, config.parent / "primitive")
    timings.append(("refresh_one_table_primitive", f"its primitive: a new process, Spark started as the command "
                    f"does, a JDBC read and a Delta overwrite of each of the {len(affected)} views", seconds))
    seconds, _ = every_table_changed(p, config, dsn, 2)
    timings.append(("refresh_every_table", f"refresh, {p['changed_percent']:g} % of every table changed", seconds))
    _, verified = mvlog(config, "verify", "--json")
    wrong = [v for v in json.loads(verified) if v["status"] != "ok"]
    assert not wrong, wrong
    seconds, _ = mvlog(config, "refresh", "--complete")
    complete = seconds
    timings.append(("refresh_complete", f"refresh --complete (all {len(views)})", seconds))
    seconds, _ = mvlog(config, "status", "--json")
    timings.append(("status", "status --json", seconds))
    # Again, now that force has measured both methods of every view (its choice by cost), in turn with
    # a complete refresh after the same kind of change: one run of each is within this machine's
    # noise of the other (60-90 s commands, 0.98-1.21x in single runs of the same 60 complete refreshes).
    forced, completed, fast, full = [], [], 0, 0
    for round_ in range(p["rounds"]):
        seconds, chosen = every_table_changed(p, config, dsn, 3 + 2 * round_)
        forced.append(seconds)
        fast, full = fast + chosen.get("fast", 0), full + chosen.get("complete", 0)
        seconds, _ = every_table_changed(p, config, dsn, 4 + 2 * round_, "--complete")
        completed.append(seconds)
    rounds = f"median of {p['rounds']} pairs of force's refresh and refresh --complete, each after such a change"
    timings.append(("refresh_every_table_again", f"refresh, {p['changed_percent']:g} % of every table changed, "
                    f"again (force chose {fast} fast, {full} complete in all; {rounds})", median(forced)))
    timings.append(("refresh_complete_after_change", f"refresh --complete, {p['changed_percent']:g} % of every "
                    f"table changed ({rounds})", median(completed)))
    if not p['scheduler']:
        return timings, complete, float("nan"), float("nan"), {}

    # The scheduler, idle: freshness targets (looks at the lags every 3 s) ...
    for view in document["views"]:
        view["freshness"] = "30s"
    config.write_text(yaml.safe_dump(document, sort_keys=False))
    fresh_cpu, _, _, _ = schedule(config, dsn, 3.0)
    # ... and a cron firing every 10 s (each tick a refresh of the fleet that finds nothing to do).
    for view in document["views"]:
        del view["freshness"]
        view["schedule"] = "*/10 * * * * *"
    config.write_text(yaml.safe_dump(document, sort_keys=False))
    cron_cpu, _, written, _ = schedule(config, dsn, 10.0, write=[0])

    return timings, complete, fresh_cpu, cron_cpu, written




SCENARIO = Scenario("fleet", "a fleet of views: nothing, one table or every table changed, against complete; "
                    "an idle scheduler's CPU", {
    "tables": Parameter(20, 2, "tables t00… of the fleet"),
    "views_per_table": Parameter(3, 3, "views per table: a copy, an aggregate, a join (1 to 3)"),
    "rows": Parameter(20_000, 1_000, "rows per table"),
    "changed_tables": Parameter(1, 1, "tables changed in the second case"),
    "changed_percent": Parameter(1.0, 1.0, "share of a changed table's rows"),
    "master": Parameter("local[2]", "local[2]", "spark.master of each command's own Spark"),
    "engine": Parameter(False, False, "every command on one running mvlog engine"),
    "rounds": Parameter(3, 1, "pairs of force's refresh and refresh --complete, every table changed before each"),
    "scheduler": Parameter(True, False, "measure the idle scheduler too"),
}, run)
