"""What mvlog's change logs cost writers, on a throwaway PostgreSQL (no Spark needed).

    python -m benchmarks run log_cost --set scale=10 --set seconds=30 --set repeat=3 --set stamp_rows=100000

The cluster runs with PostgreSQL's default durability (fsync, synchronous_commit and
full_page_writes on). pgbench is initialised, and pgbench_accounts, pgbench_tellers and
pgbench_branches get logs through `Project.apply()` as a user's mvlog.yaml would give them
(pgbench_history has no primary key, so it cannot be logged). Log designs compared:

- none: no triggers;
- statement: mvlog's own (statement-level AFTER triggers with transition tables);
- row: the alternative, a FOR EACH ROW AFTER trigger writing the same rows into the same log
  tables (PL/pgSQL, SECURITY DEFINER with a fixed search_path like mvlog's; no TRUNCATE).

Workloads: pgbench's builtin tpcb-like, and a one-row UPDATE of pgbench_accounts. After one
unreported ``warmup`` run, rounds rotate the order of the designs; each cell is the median of
``repeat`` runs. Before each run the logs are emptied, the pgbench tables vacuumed and a
CHECKPOINT taken; WAL is counted over the run. Then, on a table of ``stamp_rows`` rows: one bulk
UPDATE of all rows per design; a smaller one (``plan_rows``) in a new session and in a session
that has just updated one row (PL/pgSQL caches the trigger's plans per session); and the time
of `Source.stamp` (entering the context: stamp and ANALYZE) and `Source.purge` (no dependent
views: up to the last stamp) over the big UPDATE's log rows.
"""

from __future__ import annotations

import contextlib
import re
import statistics
import time
from pathlib import Path
from typing import Any

import psycopg2
from psycopg2 import sql

from benchmarks.datasets.pgbench import DURABLE, LOGGED, pgbench
from benchmarks.harness import Bench
from benchmarks.scenarios import Parameter, Scenario
from mvlog.config import load_config
from mvlog.errors import ConfigError
from mvlog.postgres.pgtemp import TempPostgres
from mvlog.postgres.source import log_identifier
from mvlog.project import Project

DESIGNS = ("none", "statement", "row")
BULK = "mvlog_bench_bulk"
SHOWN = ("server_version", "fsync", "synchronous_commit", "full_page_writes", "wal_level", "shared_buffers",
         "max_wal_size")

ROW_BODY = """
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO {log} ({keys}, "dmltype$$", "old_new$$") VALUES ({new}, 'I', 'N');
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO {log} ({keys}, "dmltype$$", "old_new$$") VALUES ({old}, 'D', 'O');
    ELSIF ({old}) = ({new}) THEN
        INSERT INTO {log} ({keys}, "dmltype$$", "old_new$$") VALUES ({new}, 'U', 'N');
    ELSE  -- a key-changing UPDATE logs a delete of the old key and an insert of the new one
        INSERT INTO {log} ({keys}, "dmltype$$", "old_new$$") VALUES ({old}, 'D', 'O'), ({new}, 'I', 'N');
    END IF;
    RETURN NULL;
END
"""
ROW_DDL = """
CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS {body};
CREATE TRIGGER {trigger} AFTER INSERT OR UPDATE OR DELETE ON {table} FOR EACH ROW EXECUTE FUNCTION {fn}();
"""
UPDATE_SCRIPT = """\\set aid random(1, {accounts})
\\set delta random(-5000, 5000)
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
"""


def connect(dsn: str) -> contextlib.closing:
    """An autocommit connection that closes at the end of the ``with``."""
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    return contextlib.closing(conn)


def history_note(project: Project) -> str:
    """mvlog's own answer to a log on pgbench_history (in a transaction that is rolled back)."""
    try:
        with project.source.transaction() as cur:
            project.logs.ensure(cur, project.source.resolve_table(cur, "public", "pgbench_history"))
            raise AssertionError("mvlog accepted a log on pgbench_history")
    except ConfigError as exc:
        return str(exc)


def use_design(project: Project, design: str) -> None:
    """Leave exactly ``design``'s triggers on the logged tables, with empty logs.

    Triggers are dropped, not disabled: a disabled trigger with transition tables still
    makes PostgreSQL collect them.
    """
    logs = project.logs.registered().values()
    with project.source.transaction() as cur:
        cur.execute("SELECT n.nspname, c.relname, t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relname = ANY(%s) "
                    "AND NOT t.tgisinternal", ([log.table_name for log in logs],))
        for schema, table, trigger in cur.fetchall():
            cur.execute(sql.SQL("DROP TRIGGER {} ON {}").format(sql.Identifier(trigger), sql.Identifier(schema, table)))
        for log in logs:
            cur.execute(sql.SQL("TRUNCATE {}").format(log_identifier(log)))
            if design == "row":
                keys = log.key_columns
                body = sql.SQL(ROW_BODY).format(
                    log=log_identifier(log), keys=sql.SQL(", ").join(map(sql.Identifier, keys)),
                    new=sql.SQL(", ").join(sql.Identifier("new", k) for k in keys),
                    old=sql.SQL(", ").join(sql.Identifier("old", k) for k in keys))
                cur.execute(sql.SQL(ROW_DDL).format(
                    fn=sql.Identifier("public", f"{log.log_name}$row"), body=sql.Literal(body.as_string(cur)),
                    trigger=sql.Identifier("bench$row"), table=sql.Identifier(log.table_schema, log.table_name)))
    if design == "statement":
        project.apply()  # recreates mvlog's triggers, as `mvlog apply` does after they went missing


def run_pgbench(pg: TempPostgres, project: Project, p: dict[str, Any], workload: list[str]) -> dict[str, float]:
    """One pgbench run: TPS, WAL bytes and log rows per transaction, log bytes per log row."""
    logs = [log for log in project.logs.registered().values() if log.table_name in LOGGED]
    with connect(pg.dsn()) as conn, conn.cursor() as cur:
        cur.execute(sql.SQL("TRUNCATE {}").format(sql.SQL(", ").join(log_identifier(log) for log in logs)))
        cur.execute("VACUUM pgbench_branches, pgbench_tellers, pgbench_accounts")
        cur.execute("TRUNCATE pgbench_history")
        cur.execute("CHECKPOINT")
        cur.execute("SELECT pg_current_wal_lsn()")
        start = cur.fetchone()[0]
        out = pgbench(pg, "-n", "-c", str(p['clients']), "-j", str(p['jobs']), "-T", str(p['seconds']), *workload)
        cur.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (start,))
        wal = float(cur.fetchone()[0])
        cur.execute(sql.SQL(" UNION ALL ").join(
            sql.SQL("SELECT count(*), pg_total_relation_size({}::regclass) FROM {}").format(
                sql.Literal(log_identifier(log).as_string(cur)), log_identifier(log)) for log in logs))
        rows, size = (sum(column) for column in zip(*cur.fetchall()))
    tps = float(re.search(r"^tps = ([\d.]+)", out, re.M).group(1))
    xacts = int(re.search(r"actually processed: (\d+)", out).group(1))
    return {"tps": tps, "wal": wal / xacts, "rows": rows / xacts, "bytes": size / rows if rows else float("nan")}


def timed_update(dsn: str, rows: int, after_one_row: bool = False) -> float:
    """Seconds of one UPDATE of ``rows`` rows of the bulk table, in a new session.

    ``after_one_row``: that session first updates one row, so PL/pgSQL has already planned
    the trigger's statements (for a one-row transition table) and reuses those plans.
    """
    table = sql.Identifier("public", BULK)
    with connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(sql.SQL("VACUUM {}").format(table))
        cur.execute("CHECKPOINT")
        if after_one_row:
            cur.execute(sql.SQL("UPDATE {} SET n = n + 1 WHERE id = 1").format(table))
        t = time.perf_counter()
        cur.execute(sql.SQL("UPDATE {} SET n = n + 1 WHERE id <= %s").format(table), (rows,))
        return time.perf_counter() - t


def bulk_round(project: Project, dsn: str, design: str, p: dict[str, Any]) -> dict[str, float]:
    """Bulk UPDATEs under ``design``; under mvlog's, then stamp and purge the --stamp-rows log rows."""
    use_design(project, design)
    result = {"small": timed_update(dsn, p['plan_rows']), "warm": timed_update(dsn, p['plan_rows'], True)}
    use_design(project, design)  # empty logs again
    result["update"] = timed_update(dsn, p['stamp_rows'])
    if design == "statement":
        log = project.logs.registered()[f"public.{BULK}"]
        t = time.perf_counter()
        with project.logs.stamp([log]):
            result["stamp"] = time.perf_counter() - t
        t = time.perf_counter()
        result["purged"] = project.logs.purge([log], project.catalog.purge_horizon)[log.qualified_table]
        result["purge"] = time.perf_counter() - t
    return result


def filesystem(path: Path) -> str:
    """The type of the filesystem holding ``path`` (fsync's cost depends on it)."""
    mounts = [line.split()[1:3] for line in Path("/proc/mounts").read_text().splitlines()]
    return max((m for m in mounts if str(path).startswith(m[0].rstrip("/") + "/")), key=lambda m: len(m[0]))[1]


def run(bench: Bench, p: dict[str, Any]) -> None:
    settings = {**DURABLE, **dict(item.split("=", 1) for item in p["settings"].split(",") if item)}
    pg = bench.cluster(settings)
    pgbench(pg, "-i", "-q", "-s", f"{p['scale']:g}")
    bulk_table = sql.Identifier("public", BULK)
    with connect(pg.dsn()) as conn, conn.cursor() as cur:
        cur.execute(sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, n int NOT NULL)").format(bulk_table))
        cur.execute(sql.SQL("INSERT INTO {} SELECT g, 0 FROM generate_series(1, %s) g").format(bulk_table),
                    (p["stamp_rows"],))
        cur.execute("SELECT s || '=' || current_setting(s) FROM unnest(%s::text[]) s", (list(SHOWN),))
        shown = [row[0] for row in cur.fetchall()]
    script = bench.tmp / "update.sql"
    script.write_text(UPDATE_SCRIPT.format(accounts=round(100_000 * p["scale"])))
    workloads = {"tpcb-like": ["-b", "tpcb-like"], "single-row UPDATE": ["-f", str(script)]}
    config = bench.project(pg.dsn(), [f"public.{t}" for t in (*LOGGED, BULK)], [])
    with contextlib.closing(Project(load_config(config))) as project:
        project.apply()
        bench.note(f"data directory on {filesystem(pg.datadir)}; {'; '.join(shown)}")
        bench.note(f"pgbench: scale {p['scale']:g}, -c {p['clients']} -j {p['jobs']}, {p['seconds']} s per run after a "
                   f"{p['warmup']} s warm-up, median of {p['repeat']} runs per cell, designs in rotating order")
        bench.note(f"logged: {', '.join(LOGGED)}. Not logged: {history_note(project)}")
        if p["warmup"] > 0:
            pgbench(pg, "-n", "-c", str(p["clients"]), "-j", str(p["jobs"]), "-T", str(p["warmup"]))
        results: dict[tuple[str, str], list[dict[str, float]]] = {}
        bulk: dict[str, list[dict[str, float]]] = {}
        for r in range(p["repeat"]):
            for design in DESIGNS[r % 3:] + DESIGNS[:r % 3]:
                use_design(project, design)
                for name, workload in workloads.items():
                    results.setdefault((name, design), []).append(run_pgbench(pg, project, p, workload))
                bulk.setdefault(design, []).append(bulk_round(project, pg.dsn(), design, p))

    def med(runs: list[dict[str, float]], key: str) -> float:
        return statistics.median(run[key] for run in runs)

    for name in dict.fromkeys(name for name, _ in results):
        base = med(results[name, "none"], "tps")
        for design in DESIGNS:
            runs = results[name, design]
            bench.measure("tps", med(runs, "tps"), "tps", workload=name, design=design)
            if design != "none":
                bench.measure("tps_overhead", 100 * (1 - med(runs, "tps") / base), "%", workload=name, design=design)
                bench.measure("log_bytes_per_change", med(runs, "bytes"), "B", workload=name, design=design)
            bench.measure("wal_bytes_per_xact", med(runs, "wal"), "B", workload=name, design=design)
    for design in DESIGNS:
        bench.measure("bulk_update", med(bulk[design], "update"), "s", design=design, rows=p["stamp_rows"])
        bench.measure("bulk_update", med(bulk[design], "small"), "s", design=design, rows=p["plan_rows"])
        bench.measure("bulk_update_after_one_row", med(bulk[design], "warm"), "s", design=design,
                      rows=p["plan_rows"])
    rows = int(med(bulk["statement"], "purged"))
    for op in ("stamp", "purge"):
        bench.measure(op, med(bulk["statement"], op), "s", rows=rows)


SCENARIO = Scenario("log_cost", "what trigger-filled logs cost writers (pgbench TPS, WAL), and stamp and purge", {
    "scale": Parameter(10.0, 1.0, "pgbench scale factor (100,000 accounts each)"),
    "seconds": Parameter(30, 5, "duration of each pgbench run"),
    "repeat": Parameter(3, 1, "runs per (workload, design); the median is kept"),
    "clients": Parameter(2, 2, "pgbench -c"),
    "jobs": Parameter(2, 2, "pgbench -j"),
    "warmup": Parameter(10, 0, "seconds of unrecorded tpcb-like before the runs"),
    "stamp_rows": Parameter(100_000, 10_000, "rows changed before stamping and purging"),
    "plan_rows": Parameter(5000, 1000, "rows of the UPDATE timed after a one-row UPDATE in the same session"),
    "settings": Parameter("", "", "server settings for the cluster, NAME=VALUE,… (e.g. synchronous_commit=off)"),
}, run)
