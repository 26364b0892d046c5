"""Trigger capture against logical capture (issue #41), side by side on one throwaway PostgreSQL.

    python -m benchmarks run capture --set scale=10 --set seconds=30 --set repeat=3 --set warmup=10 \\
        --set backlog_seconds=30 --set refresh_scale=20 --set rounds=5

The cluster runs with PostgreSQL's default durability (fsync, synchronous_commit and
full_page_writes on) and wal_level = logical for every design (TempPostgres sets it: what
logical decoding adds to the WAL is in every column, the none one included). Three measurements:

1. Writers' cost. pgbench's builtin tpcb-like (-c ``clients`` -j ``jobs``, ``seconds`` per run) in ONE
   database, initialised at ``scale`` and switched to each design before its run (databases
   initialised alike differed by ~±10 % in TPS on their own, more than the cost measured):
   ``none`` (no logs: each one dropped with ``Project.drop_log(table, cascade=True)``, the
   replication slot with the last logical one), ``trigger`` (logs of pgbench_accounts,
   pgbench_tellers and pgbench_branches through ``Project.apply()``, capture: trigger) and
   ``logical`` (``Project.apply()`` with the same logs, capture: logical, and ``mvlog capture
   --interval 0.2`` running in its own process for the whole run, stopped with SIGTERM after it).
   Back from logical, apply leaves the trigger logs in ``handover`` (their triggers on; the tables
   stay in the publication and the slot, idle during the run, stays until the logs are dropped),
   as no refresh stamps their decoded rows. After each switch: asserted that none leaves no mvlog
   trigger on the pgbench tables and no replication slot, trigger its four on each table,
   logical one (its TRUNCATE-only statement trigger); then, when there is a slot, one capture
   pass (the slot passes the switch).
   Before each run: the logs emptied, the pgbench tables and logs vacuumed, a capture pass
   (logical), a CHECKPOINT. After one unreported ``warmup`` run per design, rounds rotate the
   order of the designs; each cell is the median of ``repeat`` runs. Reported: TPS and its cost
   against none; keys logged per second (trigger: log rows; logical:
   ``mvlog.capture_state.keys_written`` before and after the run, as the capture had written them
   when pgbench stopped); the capture's lag when pgbench stopped (WAL bytes from its
   ``written_lsn`` to ``pg_current_wal_lsn()``) and how long it then took to catch up.
2. Capture throughput under writers. In the database of 1, switched to logical, with no capture
   running, pgbench runs ``backlog_seconds`` (a backlog of decoded changes); then pgbench starts
   again in the background and, while it writes, one capture pass (``Project.capture(once=True)``,
   in this process) writes the backlog into the logs: its rows, seconds and rows per second
   against the issue's target of 50,000 changed keys per second.
3. Fast refresh, logical against trigger (needs Spark; ``refresh=false`` skips it). Two databases at
   ``refresh_scale``, one view each over pgbench_accounts (trigger; logical with the capture
   running beside, as in 1), built by ``apply``; then ``rounds`` rounds (after one unreported),
   each updating ``changes`` random accounts in one committed transaction and timing
   ``Project.refresh(["accounts"])`` on the same warm Spark. Reported: the median refresh
   seconds per design, its phases, and logical − trigger against the target of 0.5 s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from psycopg2 import sql

from benchmarks.datasets.pgbench import DURABLE, LOGGED
from benchmarks.harness import Bench
from benchmarks.scenarios import Parameter, Scenario
from benchmarks.scenarios.log_cost import SHOWN, connect, filesystem


def note(text: str) -> None:
    print(f"… {text}", file=sys.stderr, flush=True)


from mvlog.config import load_config  # noqa: E402
from mvlog.model import LogInfo  # noqa: E402
from mvlog.pipeline.results import PHASES  # noqa: E402
from mvlog.postgres.pgtemp import SUPERUSER, TempPostgres  # noqa: E402
from mvlog.postgres.source import log_identifier  # noqa: E402
from mvlog.project import Project  # noqa: E402

DESIGNS = ("none", "trigger", "logical")
REFRESH_DESIGNS = ("trigger", "logical")
CAPTURE_INTERVAL = "0.2"  # seconds between the running capture's passes that found nothing
CAPTURE_BACKEND = "mvlog"  # application_name of mvlog's connections
STOP_WAIT = 120.0  # seconds a stopped capture may take to finish its pass, or a capture to catch up
ACCOUNTS_VIEW = {"name": "accounts", "refresh": "fast", "query": "SELECT aid, bid, abalance FROM pgbench_accounts"}
SPARK = {"master": "local[2]", "conf": {"spark.driver.memory": "3g", "spark.sql.shuffle.partitions": "4"}}
TARGET_KEYS_PER_SECOND = 50_000
TARGET_REFRESH_DIFFERENCE = 0.5


@dataclass
class Database:
    """One database of the benchmark and, unless its design is none, its mvlog project."""

    design: str
    name: str
    dsn: str
    config: Path | None = None
    project: Project | None = None

    @property
    def mvlog(self) -> Project:
        assert self.project is not None, f"database {self.name} has no mvlog project"
        return self.project


# -- PostgreSQL and pgbench -------------------------------------------------------------------------


def pgbench_command(pg: TempPostgres, dbname: str, *args: str) -> list[str]:
    """pgbench over TCP as the superuser (the password comes from PGPASSWORD, see :func:`pgbench_env`)."""
    assert pg.bin_dir is not None
    return [str(pg.bin_dir / "pgbench"), "-h", "127.0.0.1", "-p", str(pg.port), "-U", SUPERUSER, *args, dbname]


def pgbench_env(pg: TempPostgres) -> dict[str, str]:
    return {**os.environ, "PGPASSWORD": pg.password}


def pgbench(pg: TempPostgres, dbname: str, *args: str) -> str:
    """Run pgbench on ``dbname``; its stdout."""
    result = subprocess.run(pgbench_command(pg, dbname, *args), env=pgbench_env(pg), capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"pgbench {' '.join(args)} {dbname} failed: {result.stderr.strip()[-800:]}")
    return result.stdout


def tpcb_args(args: argparse.Namespace, seconds: int) -> list[str]:
    """pgbench's builtin tpcb-like for ``seconds``, without its own vacuum (the benchmark vacuums)."""
    return ["-n", "-b", "tpcb-like", "-c", str(args.clients), "-j", str(args.jobs), "-T", str(seconds)]


def tps_of(output: str) -> float:
    found = re.search(r"^tps = ([\d.]+)", output, re.M)
    if found is None:
        raise RuntimeError(f"no tps in pgbench's output: {output.strip()[-500:]}")
    return float(found.group(1))


def create_database(pg: TempPostgres, name: str, scale: int) -> None:
    """A new database initialised by ``pgbench -i`` at ``scale``."""
    with connect(pg.dsn()) as conn, conn.cursor() as cur:
        cur.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    note(f"pgbench -i -s {scale} {name}")
    pgbench(pg, name, "-i", "-q", "-s", str(scale))


def drop_database(pg: TempPostgres, name: str) -> None:
    """Drop a database and its replication slots (a slot keeps WAL for the whole cluster)."""
    with connect(pg.dsn()) as conn, conn.cursor() as cur:
        cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = %s",
                    (name,))
        cur.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def server_settings(pg: TempPostgres) -> list[str]:
    with connect(pg.dsn()) as conn, conn.cursor() as cur:
        cur.execute("SELECT s || '=' || current_setting(s) FROM unnest(%s::text[]) s", (list(SHOWN),))
        return [row[0] for row in cur.fetchall()]


# -- mvlog projects ----------------------------------------------------------------------------------


def write_config(directory: Path, dsn: str, capture: str, views: list[dict[str, str]],
                 spark: dict[str, Any] | None = None) -> Path:
    """An mvlog.yaml in ``directory`` logging the pgbench tables with ``capture``."""
    directory.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {
        "source": {"dsn": dsn}, "warehouse": str(directory / "warehouse"),
        "logs": [{"table": f"public.{table}", "capture": capture} for table in LOGGED], "views": views,
    }
    if spark is not None:
        config["spark"] = spark
    path = directory / "mvlog.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def open_database(pg: TempPostgres, tmp: Path, design: str, name: str, views: list[dict[str, str]] | None = None,
                  spark: dict[str, Any] | None = None, directory: str | None = None) -> Database:
    """The database ``name`` with, unless ``design`` is none, an mvlog project (not applied yet)
    whose mvlog.yaml is in ``tmp / directory`` (default: ``tmp / name``)."""
    db = Database(design, name, pg.dsn(name))
    if design != "none":
        db.config = write_config(tmp / (directory or name), db.dsn, design, views or [], spark)
        db.project = Project(load_config(db.config))
    return db


def registered_logs(db: Database) -> list[LogInfo]:
    return list(db.mvlog.logs.registered().values())


def catch_up(db: Database) -> int:
    """One capture pass in this process; the log rows it wrote."""
    return sum(done.rows for done in db.mvlog.capture(once=True))


def prepare_run(db: Database) -> None:
    """Before a run: the slot caught up (logical), empty logs, vacuumed tables, a checkpoint."""
    logs = registered_logs(db) if db.project is not None else []
    with connect(db.dsn) as conn, conn.cursor() as cur:
        for log in logs:
            cur.execute(sql.SQL("DELETE FROM {}").format(log_identifier(log)))
        cur.execute(sql.SQL("VACUUM {}").format(sql.SQL(", ").join(
            [sql.Identifier("public", table) for table in LOGGED] + [log_identifier(log) for log in logs])))
        cur.execute("TRUNCATE pgbench_history")
        if db.design == "logical":
            catch_up(db)
        cur.execute("CHECKPOINT")


def log_rows(db: Database) -> int:
    with connect(db.dsn) as conn, conn.cursor() as cur:
        cur.execute(sql.SQL(" UNION ALL ").join(sql.SQL("SELECT count(*) FROM {}").format(log_identifier(log))
                                                for log in registered_logs(db)))
        return sum(row[0] for row in cur.fetchall())


def capture_position(db: Database) -> tuple[float, int]:
    """The capture's lag (WAL bytes from its written position to the current one) and keys written."""
    with connect(db.dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), written_lsn), keys_written "
                    "FROM mvlog.capture_state")
        lag, keys = cur.fetchone()
        return float(lag), int(keys)


def wait_caught_up(db: Database) -> float:
    """Seconds until the running capture has written everything up to the current WAL position."""
    started = time.perf_counter()
    with connect(db.dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT pg_current_wal_lsn()")
        goal = cur.fetchone()[0]
        while True:
            cur.execute("SELECT written_lsn >= %s::pg_lsn FROM mvlog.capture_state", (goal,))
            if cur.fetchone()[0]:
                return time.perf_counter() - started
            if time.perf_counter() - started > STOP_WAIT:
                raise RuntimeError(f"the capture of {db.name} did not catch up within {STOP_WAIT:g} s")
            time.sleep(0.02)


def mvlog_triggers(db: Database) -> dict[str, int]:
    """How many mvlog triggers (``mvlog$…``) each pgbench table of LOGGED has."""
    with connect(db.dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT c.relname, count(t.oid) FROM pg_class AS c "
                    "LEFT JOIN pg_trigger AS t ON t.tgrelid = c.oid AND t.tgname LIKE 'mvlog$%%' "
                    "WHERE c.oid = ANY(%s::regclass[]) GROUP BY c.relname",
                    ([f"public.{table}" for table in LOGGED],))
        return dict(cur.fetchall())


def replication_slots(db: Database) -> list[str]:
    """Every replication slot of the cluster, of whatever database."""
    with connect(db.dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT slot_name FROM pg_replication_slots ORDER BY 1")
        return [row[0] for row in cur.fetchall()]


def has_slot(db: Database) -> bool:
    """Whether ``db`` has mvlog's logical capture (its slot)."""
    with connect(db.dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT EXISTS (SELECT FROM pg_replication_slots WHERE database = current_database())")
        return bool(cur.fetchone()[0])


def registered_any(db: Database) -> bool:
    """Whether mvlog is installed in ``db`` and has logs."""
    with connect(db.dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT to_regclass('mvlog.logs') IS NOT NULL")
        if not cur.fetchone()[0]:
            return False
        cur.execute("SELECT EXISTS (SELECT FROM mvlog.logs)")
        return bool(cur.fetchone()[0])


def require(condition: bool, failure: str) -> None:
    """An assertion that ``python -O`` keeps."""
    if not condition:
        raise RuntimeError(f"assertion failed: {failure}")


def switch_design(dbs: dict[str, Database], design: str) -> None:
    """Put the one database of 1 in ``design`` (``dbs``: the same database as each design sees it):
    none drops every log of the pgbench tables, trigger and logical apply their project. Then the
    switch is checked and, when the database has a slot, one capture pass passes the switch."""
    db = dbs[design]
    if design == "none":
        project = dbs["trigger"].mvlog
        registered = project.logs.registered() if registered_any(db) else {}
        for table in LOGGED:
            if f"public.{table}" in registered:
                project.drop_log(f"public.{table}", cascade=True)
    else:
        db.mvlog.apply()  # no views: no Spark
    triggers, slots = mvlog_triggers(db), replication_slots(db)
    if design == "none":
        require(not any(triggers.values()), f"none: mvlog triggers left on the pgbench tables: {triggers}")
        require(not slots, f"none: replication slots left: {slots}")
    elif design == "trigger":
        require(all(triggers.get(table) == 4 for table in LOGGED), f"trigger: mvlog triggers {triggers}")
    else:
        # the TRUNCATE-only statement trigger a logical log keeps (pgoutput does not publish a
        # partition's TRUNCATE through the root, #48); no row trigger
        require(all(triggers.get(table) == 1 for table in LOGGED), f"logical: mvlog triggers {triggers}")
        require(has_slot(db), f"logical: {db.name} has no replication slot")
    if has_slot(db):
        catch_up(dbs["logical"])


def mvlog_backends(db: Database) -> set[int]:
    with connect(db.dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s",
                    (CAPTURE_BACKEND,))
        return {row[0] for row in cur.fetchall()}


@contextlib.contextmanager
def capture_process(db: Database) -> Iterator[None]:
    """``mvlog capture --interval 0.2`` in its own process, from its first connection to the end of
    the ``with``; then SIGTERM, and its pass is waited for."""
    assert db.config is not None
    command = [sys.executable, "-m", "mvlog", "-q", "-c", str(db.config), "capture", "--interval", CAPTURE_INTERVAL]
    stderr_path = db.config.parent / "capture.stderr"
    before = mvlog_backends(db)
    with stderr_path.open("w") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        deadline = time.perf_counter() + 60
        while not mvlog_backends(db) - before:  # its connection: the process is up and about to capture
            if process.poll() is not None:
                raise RuntimeError(f"{' '.join(command)} exited with {process.returncode}: "
                                 f"{stderr_path.read_text().strip()[-2000:]}")
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{' '.join(command)} did not connect to {db.name} within 60 s")
            time.sleep(0.05)
        yield
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=STOP_WAIT)
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
    if code != 0:
        raise RuntimeError(f"{' '.join(command)} exited with {code}: {stderr_path.read_text().strip()[-2000:]}")


# -- 1. writers' cost ---------------------------------------------------------------------------------


def tpcb_run(pg: TempPostgres, db: Database, args: argparse.Namespace, seconds: int) -> dict[str, float]:
    """One pgbench run on ``db``: TPS; keys logged per second; the logical capture's lag and catch-up."""
    prepare_run(db)
    nothing = float("nan")
    if db.design == "none":
        return {"tps": tps_of(pgbench(pg, db.name, *tpcb_args(args, seconds))), "keys": nothing, "lag": nothing,
                "catch_up": nothing}
    if db.design == "trigger":
        tps = tps_of(pgbench(pg, db.name, *tpcb_args(args, seconds)))
        return {"tps": tps, "keys": log_rows(db) / seconds, "lag": nothing, "catch_up": nothing}
    with capture_process(db):
        _, keys_before = capture_position(db)
        tps = tps_of(pgbench(pg, db.name, *tpcb_args(args, seconds)))
        lag, keys_after = capture_position(db)
        caught_up = wait_caught_up(db)
    return {"tps": tps, "keys": (keys_after - keys_before) / seconds, "lag": lag, "catch_up": caught_up}


def writers_cost(pg: TempPostgres, dbs: dict[str, Database], args: argparse.Namespace) -> dict[str, list[dict]]:
    """The runs of 1 on the one database, switched to each design before its run."""
    if args.warmup > 0:
        for design in DESIGNS:
            note(f"warm-up: {design}, {args.warmup} s")
            switch_design(dbs, design)
            tpcb_run(pg, dbs[design], args, args.warmup)
    runs: dict[str, list[dict]] = {design: [] for design in DESIGNS}
    for r in range(args.repeat):
        for design in DESIGNS[r % 3:] + DESIGNS[:r % 3]:
            note(f"round {r + 1}/{args.repeat}: {design}, {args.seconds} s")
            switch_design(dbs, design)
            runs[design].append(tpcb_run(pg, dbs[design], args, args.seconds))
    return runs


# -- 2. capture throughput ----------------------------------------------------------------------------


def wait_for_pgbench(db: Database, clients: int, process: subprocess.Popen) -> None:
    """Until pgbench's clients are connected to ``db`` (or pgbench has stopped)."""
    with connect(db.dsn) as conn, conn.cursor() as cur:
        deadline = time.perf_counter() + 30
        while process.poll() is None and time.perf_counter() < deadline:
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                        "AND application_name = 'pgbench'")
            if cur.fetchone()[0] >= clients:
                return
            time.sleep(0.02)


def capture_throughput(pg: TempPostgres, db: Database, args: argparse.Namespace) -> dict[str, Any]:
    """A backlog of --backlog-seconds of pgbench, then one capture pass while pgbench writes again."""
    prepare_run(db)
    note(f"capture throughput: a backlog of {args.backlog_seconds} s of pgbench")
    tps = tps_of(pgbench(pg, db.name, *tpcb_args(args, args.backlog_seconds)))
    backlog, _ = capture_position(db)
    writers = subprocess.Popen(pgbench_command(pg, db.name, *tpcb_args(args, args.backlog_seconds)),
                               env=pgbench_env(pg), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_pgbench(db, args.clients, writers)
        note("capture throughput: one pass while pgbench writes")
        started = time.perf_counter()
        done = list(db.mvlog.capture(once=True))[0]
        wall = time.perf_counter() - started
        writing = writers.poll() is None
    finally:
        if writers.poll() is None:
            writers.send_signal(signal.SIGINT)
        _, errors = writers.communicate(timeout=STOP_WAIT)
    if not writing:
        note(f"pgbench stopped before the pass did: {errors.strip()[-500:]}")
    return {"tps": tps, "backlog": backlog, "rows": done.rows, "seconds": done.seconds, "wall": wall,
            "writing": writing}


# -- 3. fast refresh ----------------------------------------------------------------------------------


def change_accounts(db: Database, count: int, accounts: int, rng: random.Random) -> None:
    """Update ``count`` random accounts in one committed transaction."""
    ids = rng.sample(range(1, accounts + 1), min(count, accounts))
    with connect(db.dsn) as conn, conn.cursor() as cur:
        cur.execute("UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = ANY(%s)", (ids,))


def timed_refresh(db: Database) -> dict[str, Any]:
    """``Project.refresh(["accounts"])``: wall seconds, keys read and phases; it must be fast."""
    started = time.perf_counter()
    results = db.mvlog.refresh(["accounts"])
    seconds = time.perf_counter() - started
    (result,) = results
    if result.error or result.method != "fast":
        raise RuntimeError(f"refresh of accounts in {db.name} ({db.design}) was {result.method}: "
                         f"{result.error or result.reason}")
    return {"seconds": seconds, "keys": result.keys_read, **{p: result.phases.get(p, 0.0) for p in PHASES}}


def refresh_cost(pg: TempPostgres, tmp: Path, args: argparse.Namespace) -> tuple[dict[str, list[dict]], dict]:
    """Both designs' databases and views, then --rounds rounds of changes and timed fast refreshes."""
    dbs = {}
    for design in REFRESH_DESIGNS:
        name = f"refresh_{design}"
        create_database(pg, name, args.refresh_scale)
        dbs[design] = open_database(pg, tmp, design, name, [ACCOUNTS_VIEW], SPARK)
    builds = {}
    for design, db in dbs.items():
        note(f"apply (build of the view): {design}")
        started = time.perf_counter()
        db.mvlog.apply()
        builds[design] = time.perf_counter() - started
    accounts, rng = args.refresh_scale * 100_000, random.Random(41)
    runs: dict[str, list[dict]] = {design: [] for design in REFRESH_DESIGNS}
    try:
        with capture_process(dbs["logical"]):
            for r in range(args.rounds + 1):  # the first round warms Spark and the caches: not reported
                for design in REFRESH_DESIGNS[r % 2:] + REFRESH_DESIGNS[:r % 2]:
                    note(f"refresh round {r}/{args.rounds}{' (warm-up)' if r == 0 else ''}: {design}")
                    change_accounts(dbs[design], args.changes, accounts, rng)
                    run = timed_refresh(dbs[design])
                    if r:
                        runs[design].append(run)
    finally:
        for db in dbs.values():
            db.mvlog.close()
    return runs, builds


# -- the scenario ------------------------------------------------------------------------------------


def run(bench: Bench, p: dict[str, Any]) -> None:
    args = argparse.Namespace(**p)
    pg = bench.cluster(DURABLE)
    tmp = bench.tmp
    bench.note(f"data directory on {filesystem(pg.datadir)}; server: {'; '.join(server_settings(pg))}")
    bench.note(f"logged: {', '.join(LOGGED)}; capture --interval {CAPTURE_INTERVAL}; designs in rotating order on "
               f"one database, switched before each run")
    name = "bench"
    create_database(pg, name, args.scale)
    # The one database as each design sees it: the projects of trigger and logical (not applied yet).
    dbs = {design: open_database(pg, tmp, design, name, directory=f"{name}_{design}") for design in DESIGNS}
    runs = writers_cost(pg, dbs, args)

    def med(rows: list[dict], key: str) -> float:
        return statistics.median(run[key] for run in rows)

    base = med(runs["none"], "tps")
    for design in DESIGNS:
        bench.measure("tps", med(runs[design], "tps"), "tps", design=design)
        if design != "none":
            bench.measure("tps_cost", 100 * (1 - med(runs[design], "tps") / base), "%", design=design)
            bench.measure("keys_logged_per_second", med(runs[design], "keys"), "keys/s", design=design)
    bench.measure("capture_lag_at_end", med(runs["logical"], "lag"), "B", design="logical")
    bench.measure("capture_catch_up", med(runs["logical"], "catch_up"), "s", design="logical")
    switch_design(dbs, "logical")
    result = capture_throughput(pg, dbs["logical"], args)
    if not result["writing"]:
        raise RuntimeError("pgbench stopped before the capture pass did")
    bench.measure("capture_pass_rows", result["rows"], "rows", backlog_bytes=result["backlog"])
    bench.measure("capture_keys_per_second", result["rows"] / result["seconds"] if result["seconds"] else 0.0,
                  "keys/s", target=TARGET_KEYS_PER_SECOND)
    for db in dbs.values():
        if db.project is not None:
            db.project.close()
    drop_database(pg, name)  # its slot would keep the WAL of the refreshes
    if args.refresh:
        refreshes, builds = refresh_cost(pg, tmp, args)
        for design in REFRESH_DESIGNS:
            bench.measure("refresh", med(refreshes[design], "seconds"), "s", design=design,
                          keys=med(refreshes[design], "keys"))
            for phase in PHASES:
                bench.measure("refresh_phase", med(refreshes[design], phase), "s", design=design, phase=phase)
        bench.measure("refresh_logical_minus_trigger", med(refreshes["logical"], "seconds")
                      - med(refreshes["trigger"], "seconds"), "s", target=TARGET_REFRESH_DIFFERENCE)


SCENARIO = Scenario("capture", "trigger against logical capture: writers' cost, capture throughput, refresh", {
    "scale": Parameter(10, 1, "pgbench scale of the writers' runs and the backlog (100,000 accounts each)"),
    "seconds": Parameter(30, 5, "duration of each pgbench run"),
    "repeat": Parameter(3, 1, "runs per design; the median is kept"),
    "warmup": Parameter(10, 0, "seconds of the unrecorded first run per design (0: none)"),
    "clients": Parameter(2, 2, "pgbench -c"),
    "jobs": Parameter(2, 2, "pgbench -j"),
    "backlog_seconds": Parameter(30, 5, "seconds of pgbench before the capture pass"),
    "refresh": Parameter(True, True, "measure the fast refresh, logical against trigger (needs Spark)"),
    "refresh_scale": Parameter(20, 1, "pgbench scale of the refreshes (100,000 accounts each)"),
    "rounds": Parameter(5, 1, "timed refreshes per design"),
    "changes": Parameter(2000, 200, "accounts updated before each refresh"),
}, run)
