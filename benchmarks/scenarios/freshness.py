"""How fresh ``mvlog schedule`` keeps small views under a writer: issue #60's freshness target.

    python -m benchmarks run freshness --set target=5 --set seconds=300 --set tps=50

pgbench's tables (``scale``, 100,000 accounts each) and a one-row ``heartbeat`` table, every
log captured by logical decoding; four views, each with ``freshness: <target>s``: a filter (the
accounts with a balance), an aggregate (balance per branch), a join (tellers with their branch)
and the heartbeat. ``mvlog apply`` builds them; then ``mvlog schedule`` (a Spark of its own,
``master``) runs while pgbench's tpcb-like writes at ``tps`` transactions a second for
``seconds`` and a second writer stamps the heartbeat with ``clock_timestamp()`` every 0.5 s.

A view holds its source as of its last refresh's stamp (``snaptime``), so at time t it is
``t - snaptime`` behind, where snaptime is that of the last refresh finished by t. That staleness is
sampled every 0.5 s from the refresh history, after the first ``settle`` seconds, per view:
p50, p95 and the maximum, and the share of samples within ``bound`` seconds. The heartbeat
view, read with ``deltalake`` (no JVM) at the end, must hold the last stamp it was refreshed to.
"""

from __future__ import annotations

import signal
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg2
import yaml

from benchmarks.datasets.pgbench import initialize, pgbench
from benchmarks.harness import Bench
from benchmarks.scenarios import Parameter, Scenario

VIEWS = {
    "rich_accounts": "SELECT aid, bid, abalance FROM pgbench_accounts WHERE abalance > 0",
    "branch_balances": "SELECT bid, count(*) AS accounts, sum(abalance) AS total FROM pgbench_accounts GROUP BY bid",
    "teller_branches": "SELECT t.tid, t.tbalance, b.bid, b.bbalance FROM pgbench_tellers t "
                       "JOIN pgbench_branches b ON b.bid = t.bid",
    "heartbeat_view": "SELECT id, beat FROM heartbeat",
}


def beat(dsn: str, stop: threading.Event) -> None:
    """Stamp the heartbeat row every 0.5 s until ``stop``."""
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    with conn.cursor() as cur:
        while not stop.wait(0.5):
            cur.execute("UPDATE heartbeat SET beat = clock_timestamp() WHERE id = 1")
    conn.close()


def staleness(history: list[tuple], start: datetime, end: datetime, step: float = 0.5) -> list[float]:
    """``t - snaptime`` of the last refresh finished by t, for t from ``start`` to ``end``;
    ``history``: (finished_at, snaptime) of the view's succeeded refreshes."""
    done = sorted(history)
    samples, i, stamp = [], 0, None
    t = start
    while t <= end:
        while i < len(done) and done[i][0] <= t:
            stamp = done[i][1] if stamp is None else max(stamp, done[i][1])
            i += 1
        if stamp is not None:
            samples.append((t - stamp).total_seconds())
        t += timedelta(seconds=step)
    return samples


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def run(bench: Bench, p: dict[str, Any]) -> None:
    pg = bench.cluster()
    dsn = pg.dsn("postgres")
    initialize(pg, p["scale"])
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE heartbeat (id int PRIMARY KEY, beat timestamptz NOT NULL);"
                    "INSERT INTO heartbeat VALUES (1, clock_timestamp())")
    conf = {} if not p["checkpoint_interval"] else {
        "spark.databricks.delta.properties.defaults.checkpointInterval": str(p["checkpoint_interval"])}
    config = bench.project(dsn, ["pgbench_accounts", "pgbench_tellers", "pgbench_branches", "heartbeat"],
                           [{"name": name, "query": query, "freshness": f"{p['target']:g}s"}
                            for name, query in VIEWS.items()], spark={"master": p["master"], "conf": conf},
                           capture="logical")
    seconds, _ = bench.mvlog(config, "apply")
    bench.measure("apply", seconds)
    out = bench.tmp / "schedule.out"
    with out.open("w") as log:
        scheduler = subprocess.Popen([sys.executable, "-m", "mvlog", "-c", str(config), "schedule"],
                                     stdout=log, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 180
            while "ready: Spark started" not in out.read_text():
                if scheduler.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the scheduler did not start:\n" + out.read_text())
                time.sleep(0.5)
            stop = threading.Event()
            beating = threading.Thread(target=beat, args=(dsn, stop))
            started = datetime.now(UTC)
            beating.start()
            pgbench(pg, "-n", "-c", "2", "-j", "1", "-R", str(p["tps"]), "-T", str(p["seconds"]))
            ended = datetime.now(UTC)
            stop.set()
            beating.join()
            time.sleep(2 * p["target"])  # the refreshes in flight finish
        finally:
            scheduler.send_signal(signal.SIGTERM)
            scheduler.wait(120)
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT view_name, finished_at, snaptime, method, finished_at - started_at FROM "
                    "mvlog.refresh_history WHERE status = 'succeeded' AND finished_at >= %s", (started,))
        rows = cur.fetchall()
        cur.execute("SELECT view_name, count(*) FROM mvlog.refresh_history WHERE status = 'failed' "
                    "AND started_at >= %s GROUP BY 1", (started,))
        failed = dict(cur.fetchall())
        cur.execute("SELECT snaptime FROM mvlog.refresh_history WHERE view_name = 'heartbeat_view' "
                    "AND status = 'succeeded' ORDER BY snaptime DESC LIMIT 1")
        (last_stamp,) = cur.fetchone()
    from deltalake import DeltaTable

    warehouse = Path(yaml.safe_load(config.read_text())["warehouse"])
    beat_in_view = DeltaTable(str(warehouse / "heartbeat_view")).to_pyarrow_table() \
        .column("beat").to_pylist()[0]
    if beat_in_view.tzinfo is None:
        beat_in_view = beat_in_view.replace(tzinfo=UTC)
    if beat_in_view > last_stamp:
        raise RuntimeError("the heartbeat view holds a beat after its refresh's stamp")
    bench.note(f"pgbench -R {p['tps']} for {p['seconds']} s at scale {p['scale']:g}; freshness target "
               f"{p['target']:g} s on each view; logical capture; staleness sampled every 0.5 s after the first "
               f"{p['settle']:g} s; the heartbeat view holds its last refresh's stamp")
    worst = 0.0
    for name in VIEWS:
        mine = [r for r in rows if r[0] == name]
        samples = staleness([(r[1], r[2]) for r in mine], started + timedelta(seconds=p["settle"]), ended)
        if not samples:
            raise RuntimeError(f"{name} was never refreshed after the first {p['settle']:g} s")
        worst = max(worst, max(samples))
        bench.measure("refreshes", len(mine), "count", view=name, fast=sum(1 for r in mine if r[3] == "fast"),
                      failed=failed.get(name, 0))
        bench.measure("refresh_median", statistics.median(r[4].total_seconds() for r in mine), "s", view=name)
        bench.measure("staleness_p50", percentile(samples, 0.5), "s", view=name)
        bench.measure("staleness_p95", percentile(samples, 0.95), "s", view=name)
        bench.measure("staleness_max", max(samples), "s", view=name)
        bench.measure("within_bound", 100 * sum(1 for s in samples if s <= p["bound"]) / len(samples), "%",
                      view=name, bound=p["bound"])
    bench.measure("staleness_worst", worst, "s")


SCENARIO = Scenario("freshness", "how fresh mvlog schedule keeps small views under a writer (#60)", {
    "target": Parameter(5.0, 5.0, "every view's freshness target, seconds"),
    "seconds": Parameter(300, 40, "how long pgbench writes"),
    "tps": Parameter(50, 20, "pgbench's rate (-R)"),
    "scale": Parameter(1.0, 1.0, "pgbench scale (100,000 accounts each)"),
    "settle": Parameter(60.0, 10.0, "seconds left out at the start"),
    "bound": Parameter(10.0, 10.0, "the staleness a view must stay within"),
    "master": Parameter("local[2]", "local[2]", "the scheduler's spark.master"),
    "checkpoint_interval": Parameter(0, 0, "the views' delta.checkpointInterval (0: mvlog's, 8 to 12 in turn; "
                                           "else one for all, by spark.conf)"),
}, run)
