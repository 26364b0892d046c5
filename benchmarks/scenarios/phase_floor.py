"""Each phase of a fast refresh beside the primitive it rests on, done by hand with nothing of
mvlog (issue #75, item 1).

    python -m benchmarks run phase_floor --set scale=100 --set changes=2000 --set deletion_vectors=true
    python -m benchmarks run phase_floor --set workloads=tpch --set tpch_scale=1 --set deletion_vectors=true

Two workloads (``workloads``, comma-separated): **pgbench**'s accounts (``scale`` x 100,000 rows)
and the pgbench scenario's two views, ``changes`` random accounts updated before each round; and
**tpch**, TPC-H's two views of the tpch_views scenario at ``tpch_scale``, TPC-H's RF1/RF2 on
``fraction`` of the orders with status flips and customers moving segment before each round.
Each view is refreshed fast by a command of its own (``mvlog refresh VIEW``, a new process on the
engine), so that PostgreSQL's log of the command's statements is the view's. The keys a round
changed are the view's table's versions compared (the rows of one not in the other, both ways).
Medians over ``rounds``, each phase beside its primitive:

- **start**: the command's wall seconds less the view's own (process start, configuration,
  compile, the connection to the engine, exit), against a new Python process that connects to the
  engine and runs ``SELECT 1``, timed the same way: its wall from start to exit, the median of
  ``rounds`` (at least 3) — the seconds its script counts from its first line (not of record:
  they leave out the interpreter's start and exit, ~0.4 s, which the command's start includes) and
  an empty Spark Connect round trip in a warm process beside it.
- **prepare + record** (locks, stamp, plan; key map, catalog, purge): against what a client pays
  at least for the command's statements on mvlog's own connections, as psql running them would
  (issue #75's primitive): PostgreSQL's time executing them (``log_min_duration_statement = 0``:
  the server's durations, application ``mvlog``), an empty statement's round trip for each, and a
  session opened (password authentication over TCP) for each server process they ran on — each
  of the two timed by psycopg2 beside the run, medians. The server's time alone is shown too (not
  of record). Both count the whole command's statements, its start's among them, so they are the
  more generous to mvlog.
- **read** (the changed rows from PostgreSQL, staged in Spark): against PostgreSQL's time for the
  JDBC read mvlog made (application ``mvlog-spark``), and the changed keys' rows of the view's
  query fetched by ``COPY (…) TO STDOUT`` and by one Spark JDBC read of the same query; and, not of
  record, one Spark JDBC read of the refresh's own read statement (its text from the server's log,
  in a transaction with the same ``SET LOCAL``s but no snapshot), into ``noop`` and staged by an
  eager ``localCheckpoint``: the window's log rows, purged by the refresh, are copied before it and
  put back for the read (then taken out again), so it reads the rows the refresh read. It shows
  which part of the read's ratio is mvlog's query (the keys found in the log, joined to the
  view's query) and which its Spark side.
- **table + write** (the look at the view's Delta table before the write — its fit check, which
  loads the state of the table's newest version, the state the write then uses — and the Delta
  commit; counted together because a write that finds the state loaded skips that load, and the
  primitive's write pays it: sessions 16, 49 and 51 moved the look and found the same total):
  against the same keys written into a copy of the view's table
  (restored to the version before the refresh) by a ``MERGE`` (delete, update, insert clauses), by
  a ``DELETE`` of the keys then an ``INSERT`` (two commits), and by one ``replaceWhere`` overwrite
  on the keys (one commit), the fastest taken; and, not of record, what a write must do at least to
  report exact inserted/updated/deleted counts and leave unchanged rows alone with Delta's public
  API: the keys' stored row hashes scanned (one job), then the ``replaceWhere``. Delta's DELETE and
  ``replaceWhere`` take no subquery: the keys are listed as literals, a composite key by the 64-bit
  hash of its columns (an IN list of tuples is compared struct by struct, far slower).

Ratios above 1.25 are what #75 asks to explain or remove.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg2
from psycopg2 import sql

from benchmarks.datasets import pgbench, tpch
from benchmarks.harness import LARGE, Bench, median
from benchmarks.scenarios import Parameter, Scenario
from mvlog.model import ROW_HASH_COLUMN
from mvlog.pipeline.results import PHASES
from mvlog.postgres.pgtemp import SUPERUSER, TempPostgres
from mvlog.spark.sparksql import spark_literal

# What a client pays at least to have PostgreSQL run a command's statements, as psql running them
# would: the server's time for each, a round trip each, and the sessions they were sent on opened.
CLIENT_FLOOR = "PostgreSQL executing mvlog's statements, a round trip each, its sessions opened"
LOGGED = {"log_min_duration_statement": "0", "log_line_prefix": "'%m [%p] app=%a '"}
DURATION = re.compile(r"\[(\d+)\] app=(\S*) LOG:  duration: ([0-9.]+) ms")
STATEMENT = re.compile(r"^\S+ \S+ \S+ \[\d+\] app=(\S*) LOG:  duration: [0-9.]+ ms  (?:execute [^:]*|statement): ")
ENTRY = re.compile(r"^\d{4}-\d\d-\d\d ")
# The settings of mvlog's reads at a snapshot, by hand: the same SET LOCALs in a read-only transaction.
READ_SETTINGS = ("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET LOCAL jit = off; "
                 "SET LOCAL max_parallel_workers_per_gather = 0")
# Each phase's primitive of record (the worst ratio among them is the #75 target): what the phase
# must do at least — a read lands its rows in Spark, so its floor is Spark's JDBC read, not COPY.
OF_RECORD = {"a new process: Spark Connect, SELECT 1", CLIENT_FLOOR,
             "one Spark JDBC read of the rows", "the fastest of MERGE, DELETE + INSERT and replaceWhere"}
NO_CONSTRAINT_CHECK = "spark.databricks.delta.replaceWhere.constraintCheck.enabled"
WRITES = ("merge", "delete_insert", "replace_where", "scan_replace_where")
CONNECT = """
import sys, time
started = time.perf_counter()
from pyspark.sql import SparkSession
SparkSession.builder.remote(sys.argv[1]).getOrCreate().sql("SELECT 1").collect()
print(time.perf_counter() - started)
"""


@dataclass(frozen=True)
class Workload:
    """What a round of one workload changes and which views it refreshes (each view's key columns)."""

    name: str
    logs: tuple[str, ...]
    views: list[dict]
    keys: dict[str, tuple[str, ...]]
    change: Callable[[], None]


def pgbench_workload(bench: Bench, pg: TempPostgres, p: dict[str, Any]) -> Workload:
    from benchmarks.scenarios.pgbench import VIEWS

    accounts = round(p["scale"] * 100_000)
    pgbench.initialize(pg, p["scale"])
    rng = random.Random(4711)
    bench.note(f"pgbench: {accounts:,} accounts, {p['changes']:,} changed per round")

    def change() -> None:
        with psycopg2.connect(pg.dsn()) as conn, conn.cursor() as cur:
            cur.execute("UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = ANY(%s)",
                        (rng.sample(range(1, accounts + 1), p["changes"]),))

    return Workload("pgbench", ("pgbench_accounts",), VIEWS, {"accounts": ("aid",), "branch_balance": ("bid",)},
                    change)


def tpch_workload(bench: Bench, pg: TempPostgres, p: dict[str, Any]) -> Workload:
    counts = tpch.load(pg.dsn(), p["tpch_scale"], bench.tmp / "tpch")
    orders = max(1, round(counts["orders"] * p["fraction"]))
    bench.note(f"tpch: {', '.join(f'{t} {n:,}' for t, n in counts.items())} rows; per round RF1 + RF2 of "
               f"{orders:,} orders, {orders:,} status flips, {max(1, orders // 3):,} customers changing segment")
    return Workload("tpch", ("customer", "orders", "lineitem"), tpch.VIEWS,
                    {"line_revenue": ("l_orderkey", "l_linenumber"), "segment_month": ("c_mktsegment", "month")},
                    lambda: tpch.change(pg.dsn(), orders))


WORKLOADS = {"pgbench": pgbench_workload, "tpch": tpch_workload}


def server_work(log: Path, since: int) -> dict[str, tuple[float, int, int]]:
    """Per application, in PostgreSQL's log after ``since``: the seconds it spent executing
    statements, how many statements, and on how many sessions (server processes)."""
    spent: dict[str, float] = {}
    statements: dict[str, int] = {}
    sessions: dict[str, set[str]] = {}
    with log.open("rb") as f:
        f.seek(since)
        for line in f.read().decode(errors="replace").splitlines():
            if m := DURATION.search(line):
                pid, app = m.group(1), m.group(2)
                spent[app] = spent.get(app, 0.0) + float(m.group(3)) / 1000
                statements[app] = statements.get(app, 0) + 1
                sessions.setdefault(app, set()).add(pid)
    return {app: (spent[app], statements[app], len(sessions[app])) for app in spent}


def executed(log: Path, since: int, app: str) -> list[str]:
    """The statements ``app`` executed, as PostgreSQL's log after ``since`` has them (a statement
    of several lines whole)."""
    found: list[str] = []
    current: list[str] | None = None
    with log.open("rb") as f:
        f.seek(since)
        for line in f.read().decode(errors="replace").splitlines():
            if ENTRY.match(line):
                if current is not None:
                    found.append("\n".join(current))
                m = STATEMENT.match(line)
                current = [line[m.end():]] if m and m.group(1) == app else None
            elif current is not None:
                current.append(line)
    if current is not None:
        found.append("\n".join(current))
    return found


def the_read(statements: Sequence[str]) -> str:
    """Of a refresh's JDBC statements, the read of its rows (not the schema's ``WHERE 1=0``; logged
    once per batch the driver fetched: ``execute fetch from …``)."""
    reads = sorted({s for s in statements if "AS mvlog_src" in s and not s.rstrip().endswith("WHERE 1=0")})
    if len(reads) != 1:
        raise RuntimeError(f"expected one read in the refresh's JDBC statements, found {len(reads)}")
    return reads[0]


def log_tables(dsn: str, tables: Sequence[str]) -> list[str]:
    """The names (in schema mvlog) of the logs of ``tables``."""
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT log_name FROM mvlog.logs WHERE table_name = ANY(%s) ORDER BY log_name", (list(tables),))
        return [r[0] for r in cur.fetchall()]


def saved(name: str) -> sql.Identifier:
    """The table that keeps a copy of the log ``name``'s rows."""
    return sql.Identifier(f"bench_saved_{name}")


def save_logs(dsn: str, logs: Sequence[str]) -> None:
    """A copy of each log's rows (the window a refresh is about to read; it purges them after)."""
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        for name in logs:
            cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(saved(name)))
            cur.execute(sql.SQL("CREATE TABLE {} AS SELECT * FROM mvlog.{}").format(saved(name), sql.Identifier(name)))


@contextlib.contextmanager
def logs_put_back(dsn: str, logs: Sequence[str]) -> Iterator[None]:
    """The saved rows in their logs again for the block (committed, so that Spark's sessions see
    them), taken out after it: the next refresh would stamp them as changes."""
    put: dict[str, list] = {}
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        for name in logs:
            cur.execute(sql.SQL("INSERT INTO mvlog.{} SELECT * FROM {} RETURNING ctid").format(
                sql.Identifier(name), saved(name)))
            put[name] = [r[0] for r in cur.fetchall()]
    try:
        yield
    finally:
        with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
            for name, rows in put.items():
                cur.execute(sql.SQL("DELETE FROM mvlog.{} WHERE ctid = ANY(%s::tid[])").format(sql.Identifier(name)),
                            (rows,))


def client_costs(dsn: str, rounds: int = 20) -> tuple[float, float]:
    """Medians of opening a session (the run's password authentication, over TCP) and of an empty
    statement's round trip on an open one, as psycopg2 does them."""
    opened, trips = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        conn = psycopg2.connect(dsn)
        opened.append(time.perf_counter() - started)
        with conn.cursor() as cur:
            for _ in range(5):
                started = time.perf_counter()
                cur.execute("SELECT 1")
                trips.append(time.perf_counter() - started)
        conn.close()
    return median(opened), median(trips)


def rows_of_keys_sql(query: str, columns: Sequence[str], keys: Sequence[tuple]) -> sql.Composed:
    """The rows of ``keys`` (tuples of ``columns``, at least one) of the view's ``query``, as it
    computes them now."""
    listed = sql.SQL(", ").join(sql.SQL("({})").format(sql.SQL(", ").join(map(sql.Literal, key))) for key in keys)
    return sql.SQL("SELECT v.* FROM ({}) v WHERE ({}) IN (VALUES {})").format(
        sql.SQL(query), sql.SQL(", ").join(sql.SQL("v.{}").format(sql.Identifier(c)) for c in columns), listed)


def copy_seconds(dsn: str, statement: sql.Composed) -> float:
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        started = time.perf_counter()
        cur.copy_expert(sql.SQL("COPY ({}) TO STDOUT").format(statement), io.BytesIO())
        return time.perf_counter() - started


def keys_predicate(columns: Sequence[str], types: Sequence[str], keys: Sequence[tuple],
                   hashes: Sequence[int] = ()) -> str:
    """``columns IN (keys)`` as Spark SQL, literals cast to the columns' ``types``; for a composite
    key, its ``hashes`` (``xxhash64`` of each key's columns) listed instead: an IN list of tuples is
    compared struct by struct, far slower (a row sharing a key's 64-bit hash would
    be written too: a primitive's timing, not an exact write)."""
    if len(columns) == 1:
        return f"`{columns[0]}` IN ({', '.join(f'CAST({spark_literal(k[0])} AS {types[0]})' for k in keys)})"
    return f"xxhash64({', '.join(f'`{c}`' for c in columns)}) IN ({', '.join(str(h) for h in hashes)})"


def latest_version(spark: Any, location: str) -> int:
    """The latest version of the Delta table at ``location``."""
    return int(spark.sql(f"DESCRIBE HISTORY delta.`{location}` LIMIT 1").collect()[0]["version"])


def changed_keys(spark: Any, location: str, columns: Sequence[str], before: int, after: int) -> list[tuple]:
    """The keys whose rows differ between two versions of the table at ``location`` (inserted,
    updated or deleted by the refresh that committed ``after``)."""
    def at(version: int) -> Any:
        return spark.read.format("delta").option("versionAsOf", version).load(location)

    old, new = at(before), at(after)
    differ = old.exceptAll(new).select(*columns).union(new.exceptAll(old).select(*columns)).distinct()
    return sorted(tuple(r) for r in differ.collect())


def run(bench: Bench, p: dict[str, Any]) -> None:
    from pyspark.sql import SparkSession

    pg = bench.cluster({**LARGE, **LOGGED})
    remote = bench.engine()
    env = {"SPARK_REMOTE": remote}
    spark = SparkSession.builder.remote(remote).getOrCreate()
    jdbc_url = f"jdbc:postgresql://127.0.0.1:{pg.port}/postgres"
    jdbc = {"user": SUPERUSER, "password": pg.password, "driver": "org.postgresql.Driver"}
    log = pg.root / "server.log"
    bench.note(f"one command per view, medians of {p['rounds']} rounds (one more warms); deletion vectors "
               f"{'on' if p['deletion_vectors'] else 'off'}")
    seen: dict[tuple[str, str], list[float]] = {}

    def seen_as(view: str, name: str, seconds: float) -> None:
        seen.setdefault((view, name), []).append(seconds)

    views: dict[str, Workload] = {}
    for name in p["workloads"].split(","):
        work = WORKLOADS[name.strip()](bench, pg, p)
        config = bench.project(pg.dsn(), work.logs, work.views, name=f"{work.name}.yaml",
                               delta={"deletion_vectors": p["deletion_vectors"]})
        bench.mvlog(config, "apply", env=env)
        locations = {v["name"]: v["location"] for v in Bench.mvlog_json(config, "status", env=env)[1]["views"]}
        queries = {v["name"]: v["query"] for v in work.views}
        views.update({view: work for view in work.keys})
        logs = log_tables(pg.dsn(), [t.split(".")[-1] for t in work.logs])
        for r in range(p["rounds"] + 1):
            work.change()
            for view, columns in work.keys.items():
                before = latest_version(spark, locations[view])
                save_logs(pg.dsn(), logs)
                offset = log.stat().st_size
                wall, out = Bench.mvlog(config, "refresh", view, "--json", env=env)
                (result,) = json.loads(out)
                if result["method"] != "fast":
                    raise RuntimeError(f"{view} was not refreshed fast: {result['reason']}")
                if not r:
                    continue
                phases = result.get("phases") or {}
                seen_as(view, "start", wall - result["seconds"])
                for phase in PHASES:
                    seen_as(view, phase, phases.get(phase, 0.0))
                seen_as(view, "prepare+record", phases.get("prepare", 0.0) + phases.get("record", 0.0))
                seen_as(view, "table+write", phases.get("table", 0.0) + phases.get("write", 0.0))
                for app, (seconds, statements, sessions) in server_work(log, offset).items():
                    seen_as(view, f"server:{app or '-'}", seconds)
                    seen_as(view, f"statements:{app or '-'}", statements)
                    seen_as(view, f"sessions:{app or '-'}", sessions)
                after = latest_version(spark, locations[view])
                keys = changed_keys(spark, locations[view], columns, before, after)
                seen_as(view, "keys", len(keys))
                rows = rows_of_keys_sql(queries[view], columns, keys)
                seen_as(view, "copy", copy_seconds(pg.dsn(), rows))
                with psycopg2.connect(pg.dsn()) as conn:
                    query = rows.as_string(conn)
                started = time.perf_counter()
                spark.read.jdbc(jdbc_url, f"({query}) q", properties=jdbc).write.format("noop").mode("overwrite") \
                    .save()
                seen_as(view, "jdbc_read", time.perf_counter() - started)
                own = the_read(executed(log, offset, "mvlog-spark"))
                with logs_put_back(pg.dsn(), logs):
                    for name, land in (("own_read", lambda df: df.write.format("noop").mode("overwrite").save()),
                                       ("own_read_staged", lambda df: df.localCheckpoint(eager=True))):
                        started = time.perf_counter()
                        land(spark.read.jdbc(jdbc_url, f"({own}) q",
                                             properties={**jdbc, "sessionInitStatement": READ_SETTINGS}))
                        seen_as(view, name, time.perf_counter() - started)
                writes = _writes(bench, spark, locations[view], columns, keys, before, after, f"{view}-{r}")
                for variant, seconds in writes.items():
                    seen_as(view, f"write:{variant}", seconds)
                seen_as(view, "write_best", min(v for k, v in writes.items() if not k.startswith("scan")))
                seen_as(view, "write_exact", writes["scan_replace_where"])
        for _ in range(max(3, p["rounds"])):  # timed as the command is: the process's wall, start to exit
            started = time.perf_counter()
            inside = float(subprocess.run([sys.executable, "-c", CONNECT, remote], capture_output=True, text=True,
                                          check=True).stdout)
            seen_as("-", "connect_process", time.perf_counter() - started)
            seen_as("-", "connect_process_inside", inside)
        trips = []
        for _ in range(10):
            started = time.perf_counter()
            spark.sql("SELECT 1").collect()
            trips.append(time.perf_counter() - started)
        seen_as("-", "connect_round_trip", median(trips))
        session, trip = client_costs(pg.dsn())
        seen_as("-", "pg_session", session)
        seen_as("-", "pg_round_trip", trip)
    _report(bench, seen, views)


def _report(bench: Bench, seen: dict[tuple[str, str], list[float]], views: dict[str, Workload]) -> None:
    """Each view's phases beside their primitives, and the worst ratio of record per workload."""
    def m(view: str, name: str) -> float:
        return median(seen[(view, name)])

    def logged(view: str, what: str, app: str) -> float:  # from the server's log: see server_work
        return median(seen.get((view, f"{what}:{app}"), [0.0]))

    def server(view: str, app: str) -> float:
        return logged(view, "server", app)

    def client(view: str) -> float:  # CLIENT_FLOOR
        return (server(view, "mvlog") + logged(view, "statements", "mvlog") * m("-", "pg_round_trip")
                + logged(view, "sessions", "mvlog") * m("-", "pg_session"))

    worst: dict[str, tuple[float, str, str]] = {}
    for view, work in views.items():
        for (of, name), values in seen.items():
            if of == view:
                unit = "rows" if name == "keys" else "count" if name.startswith(("statements:", "sessions:")) else "s"
                bench.measure("phase_seconds", median(values), unit, view=view, what=name, workload=work.name)
        floors = [("start", "a new process: Spark Connect, SELECT 1", m("-", "connect_process")),
                  ("prepare+record", "PostgreSQL executing mvlog's statements", server(view, "mvlog")),
                  ("prepare+record", CLIENT_FLOOR, client(view)),
                  ("read", "PostgreSQL executing the JDBC read", server(view, "mvlog-spark")),
                  ("read", "COPY (the rows) TO STDOUT", m(view, "copy")),
                  ("read", "one Spark JDBC read of the rows", m(view, "jdbc_read")),
                  ("read", "one Spark JDBC read of the refresh's own read statement", m(view, "own_read")),
                  ("read", "the same, its rows staged (localCheckpoint)", m(view, "own_read_staged")),
                  ("table+write", "the fastest of MERGE, DELETE + INSERT and replaceWhere", m(view, "write_best")),
                  ("table+write", "the stored hashes scanned, then replaceWhere", m(view, "write_exact"))]
        for phase, primitive, floor in floors:
            ratio = m(view, phase) / floor if floor else float("inf")
            bench.measure("phase_over_primitive", ratio, "x", view=view, phase=phase, primitive=primitive,
                          primitive_seconds=round(floor, 3), workload=work.name)
            if primitive in OF_RECORD:
                worst[work.name] = max(worst.get(work.name, (0.0, "", "")), (ratio, view, phase))
    for workload, (ratio, view, phase) in worst.items():
        bench.measure("worst_phase_over_primitive", ratio, "x", view=view, phase=phase, workload=workload)
    bench.measure("connect_round_trip", m("-", "connect_round_trip"), "s")
    bench.measure("connect_process", m("-", "connect_process"), "s")
    bench.measure("connect_process_inside", m("-", "connect_process_inside"), "s")
    bench.measure("pg_session", m("-", "pg_session"), "s")
    bench.measure("pg_round_trip", m("-", "pg_round_trip"), "s")


def _writes(bench: Bench, spark: Any, location: str, columns: Sequence[str], keys: list[tuple], before: int,
            after: int, tag: str) -> dict[str, float]:
    """Seconds of each way of writing ``keys``' rows as of version ``after`` into a copy of the
    table at ``location`` restored to ``before`` (the rows staged as Parquet first, not timed): a
    MERGE; a DELETE by the keys then an INSERT; a replaceWhere on the keys; and the replaceWhere
    after a scan of the copy's key and row-hash columns for the keys, what an exact write (counts
    by kind, unchanged rows left alone) needs."""
    staging = bench.tmp / f"staged-{tag}"
    new = spark.read.format("delta").option("versionAsOf", after).load(location)
    types = {f.name: f.dataType.simpleString() for f in new.schema.fields}
    listed = spark.createDataFrame(keys, schema=new.select(*columns).schema)
    hashes = [r[0] for r in listed.selectExpr(f"xxhash64({', '.join(f'`{c}`' for c in columns)})").collect()] \
        if len(columns) > 1 else []
    predicate = keys_predicate(columns, [types[c] for c in columns], keys, hashes)
    listed.join(new.selectExpr("*", "true AS mvlog_bench_present"), list(columns), "left") \
        .write.mode("overwrite").parquet(str(staging))
    spark.read.parquet(str(staging)).createOrReplaceTempView("mvlog_bench_staged")
    names = list(new.columns)
    on = " AND ".join(f"t.`{c}` = s.`{c}`" for c in columns)
    assign = ", ".join(f"t.`{c}` = s.`{c}`" for c in names)
    values = ", ".join(f"s.`{c}`" for c in names)
    present = "SELECT " + ", ".join(f"`{c}`" for c in names) + " FROM mvlog_bench_staged WHERE mvlog_bench_present"
    timings = {}
    for variant in WRITES:
        copy = bench.tmp / f"copy-{variant}-{tag}"
        shutil.copytree(location, copy)
        target = f"delta.`{copy}`"
        spark.sql(f"RESTORE TABLE {target} TO VERSION AS OF {before}").collect()
        started = time.perf_counter()
        if variant == "merge":
            spark.sql(f"MERGE INTO {target} t USING mvlog_bench_staged s ON {on} "
                      "WHEN MATCHED AND s.mvlog_bench_present IS NULL THEN DELETE "
                      f"WHEN MATCHED THEN UPDATE SET {assign} "
                      f"WHEN NOT MATCHED AND s.mvlog_bench_present THEN INSERT ({', '.join(f'`{c}`' for c in names)}) "
                      f"VALUES ({values})").collect()
        elif variant == "delete_insert":
            spark.sql(f"DELETE FROM {target} WHERE {predicate}").collect()
            spark.sql(f"INSERT INTO {target} {present}").collect()
        else:
            if variant == "scan_replace_where":
                spark.sql(f"SELECT {', '.join(f'`{c}`' for c in columns)}, `{ROW_HASH_COLUMN}` FROM {target} "
                          f"WHERE {predicate}").collect()
            # Delta checks each written row against the predicate unless told not to (its IN list
            # row by row: most of the write at 20,000 keys); the rows are the predicate's here.
            spark.conf.set(NO_CONSTRAINT_CHECK, "false")
            try:
                spark.sql(present).write.format("delta").mode("overwrite").option("replaceWhere", predicate) \
                    .save(str(copy))
            finally:
                spark.conf.unset(NO_CONSTRAINT_CHECK)
        timings[variant] = time.perf_counter() - started
        bench.measure("write_variant", timings[variant], "s", key=",".join(columns), variant=variant, round=tag)
        shutil.rmtree(copy)
    return timings


SCENARIO = Scenario("phase_floor", "each phase of a fast refresh beside the primitive it rests on (#75)", {
    "workloads": Parameter("pgbench", "pgbench,tpch", "pgbench, tpch or both, comma-separated"),
    "scale": Parameter(100.0, 1.0, "pgbench scale (100,000 accounts each)"),
    "changes": Parameter(2000, 200, "pgbench: accounts updated before each round"),
    "tpch_scale": Parameter(1.0, 0.01, "TPC-H scale factor"),
    "fraction": Parameter(0.001, 0.01, "tpch: orders changed by RF1 and by RF2 per round"),
    "rounds": Parameter(3, 1, "counted rounds (one more warms)"),
    "deletion_vectors": Parameter(True, False, "the views' tables with deletion vectors"),
}, run)
