"""How fresh ``mvlog schedule`` keeps small views under a writer: issue #60's freshness target.

    python benchmarks/freshness.py --target 5 --seconds 300 --tps 50

pgbench's tables (``--scale``, 100,000 accounts each) and a one-row ``heartbeat`` table, every
log captured by logical decoding; four views, each with ``freshness: <--target>s``: a filter (the
accounts with a balance), an aggregate (balance per branch), a join (tellers with their branch)
and the heartbeat. ``mvlog apply`` builds them; then ``mvlog schedule`` (a Spark of its own,
``--master``) runs while pgbench's tpcb-like writes at ``--tps`` transactions a second for
``--seconds`` and a second writer stamps the heartbeat with ``clock_timestamp()`` every 0.5 s.

A view holds its source as of its last refresh's stamp (``snaptime``), so at time t it is
``t - snaptime`` behind, where snaptime is that of the last refresh finished by t. That staleness is
sampled every 0.5 s from the refresh history, after the first ``--settle`` seconds, per view:
p50, p95 and the maximum, and the share of samples within ``--bound`` seconds. The heartbeat
view, read with ``deltalake`` (no JVM) at the end, must hold the last stamp it was refreshed to.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg2
import yaml

sys.path.insert(0, str(Path(__file__).parents[1]))  # until this script is a scenario of the runner (#74)
from benchmarks.harness import Bench  # noqa: E402
from benchmarks.log_overhead import pgbench  # noqa: E402

mvlog = Bench.mvlog

from mvlog.postgres.pgtemp import TempPostgres  # noqa: E402

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", type=float, default=5.0, help="every view's freshness target, seconds")
    parser.add_argument("--seconds", type=int, default=300, help="how long pgbench writes")
    parser.add_argument("--tps", type=int, default=50, help="pgbench's rate (-R)")
    parser.add_argument("--scale", type=int, default=1, help="pgbench scale (100,000 accounts each)")
    parser.add_argument("--settle", type=float, default=60.0, help="seconds left out at the start")
    parser.add_argument("--bound", type=float, default=10.0, help="the staleness a view must stay within")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--checkpoint-interval", type=int,
                        help="the views' delta.checkpointInterval (Delta's default: 10 commits)")
    parser.add_argument("--keep-log", type=Path, help="copy the scheduler's output here")
    args = parser.parse_args()

    with TempPostgres(password="bench") as pg, tempfile.TemporaryDirectory() as tmp:
        dsn = pg.dsn("postgres")
        pgbench(pg, "-i", "-q", "-s", str(args.scale), "-I", "dtgvp")
        with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE heartbeat (id int PRIMARY KEY, beat timestamptz NOT NULL);"
                        "INSERT INTO heartbeat VALUES (1, clock_timestamp())")
        config = Path(tmp) / "mvlog.yaml"
        config.write_text(yaml.safe_dump({
            "source": {"dsn": dsn, "capture": "logical"}, "warehouse": str(Path(tmp) / "warehouse"),
            "spark": {"master": args.master, "conf": {} if args.checkpoint_interval is None else {
                "spark.databricks.delta.properties.defaults.checkpointInterval": str(args.checkpoint_interval)}},
            "logs": [{"table": t} for t in ("pgbench_accounts", "pgbench_tellers", "pgbench_branches", "heartbeat")],
            "views": [{"name": name, "query": query, "freshness": f"{args.target:g}s"}
                      for name, query in VIEWS.items()],
        }, sort_keys=False))
        seconds, _ = mvlog(config, "apply")
        print(f"apply: {seconds:.1f} s", flush=True)

        log = open(Path(tmp) / "schedule.out", "w")
        scheduler = subprocess.Popen([sys.executable, "-m", "mvlog", "-c", str(config), "schedule"],
                                     stdout=log, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 180
            while "ready: Spark started" not in (Path(tmp) / "schedule.out").read_text():
                if scheduler.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the scheduler did not start:\n" + (Path(tmp) / "schedule.out").read_text())
                time.sleep(0.5)
            stop = threading.Event()
            beating = threading.Thread(target=beat, args=(dsn, stop))
            started = datetime.now(UTC)
            beating.start()
            pgbench(pg, "-n", "-c", "2", "-j", "1", "-R", str(args.tps), "-T", str(args.seconds))
            ended = datetime.now(UTC)
            stop.set()
            beating.join()
            time.sleep(2 * args.target)  # the refreshes in flight finish
        finally:
            scheduler.send_signal(signal.SIGTERM)
            scheduler.wait(120)
            log.close()
            if args.keep_log:
                args.keep_log.write_text((Path(tmp) / "schedule.out").read_text())

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

        beat_in_view = DeltaTable(str(Path(tmp) / "warehouse" / "heartbeat_view")).to_pyarrow_table() \
            .column("beat").to_pylist()[0]
        if beat_in_view.tzinfo is None:
            beat_in_view = beat_in_view.replace(tzinfo=UTC)
        print(f"\n{platform.node()}, {os.cpu_count()} cores; pgbench -R {args.tps} for {args.seconds} s, scale "
              f"{args.scale}; freshness target {args.target:g} s on each view; logical capture; "
              f"staleness sampled every 0.5 s after the first {args.settle:g} s\n")
        print("| view | refreshes | fast | median refresh (s) | p50 (s) | p95 (s) | max (s) | "
              f"within {args.bound:g} s | failed |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        worst = 0.0
        for name in VIEWS:
            mine = [r for r in rows if r[0] == name]
            samples = staleness([(r[1], r[2]) for r in mine], started + timedelta(seconds=args.settle), ended)
            within = sum(1 for s in samples if s <= args.bound) / len(samples)
            worst = max(worst, max(samples))
            took = statistics.median(r[4].total_seconds() for r in mine)
            print(f"| {name} | {len(mine)} | {sum(1 for r in mine if r[3] == 'fast')} | {took:.2f} | "
                  f"{percentile(samples, 0.5):.1f} | {percentile(samples, 0.95):.1f} | {max(samples):.1f} | "
                  f"{within:.1%} | {failed.get(name, 0)} |")
        print("\nThe longest waits for a new stamp (the staleness peaks): the refresh that ended each")
        print("\n| view | peak (s) | stamps apart (s) | its seconds | method |")
        print("|---|---:|---:|---:|---:|")
        for name in VIEWS:
            mine = sorted((r for r in rows if r[0] == name), key=lambda r: r[2])
            gaps = [(b[1] - a[2], b[2] - a[2], b[4], b[3]) for a, b in zip(mine, mine[1:])
                    if b[1] >= started + timedelta(seconds=args.settle)]
            for peak, gap, took, method in sorted(gaps, reverse=True)[:3]:
                print(f"| {name} | {peak.total_seconds():.1f} | {gap.total_seconds():.1f} | "
                      f"{took.total_seconds():.2f} | {method} |")
        print(f"\nworst staleness {worst:.1f} s (bound {args.bound:g} s); the heartbeat view holds "
              f"{beat_in_view:%H:%M:%S.%f}, its last refresh's stamp {last_stamp:%H:%M:%S.%f}")
        if beat_in_view > last_stamp:
            raise SystemExit("the heartbeat view holds a beat after its refresh's stamp")


if __name__ == "__main__":
    main()
