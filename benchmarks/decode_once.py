"""Decode once (issue #48): capture passes against the stream while a transaction stays open.

    python benchmarks/decode_once.py --rows 200000 --rounds 10

One throwaway PostgreSQL (default durability), one table of --rows rows captured logically, and
another session holding a transaction that wrote a row open for the whole run, so the slot's
restart position cannot move. --rounds rounds per mode, each one ``UPDATE`` of every row in one
transaction, then the time until the capture has written everything committed before it:

- ``pass``: no capture running; one pass in this process (``Decoding.catch_up``), as a refresh
  without a running capture does: it peeks the slot, and PostgreSQL decodes from the restart
  position again;
- ``stream``: ``mvlog capture``'s loop (``Decoding.run``) in a thread, and the wait a refresh
  does for it (``Decoding.reach_now``).

The stream's rounds run after the passes', with the same transaction still open: it faces more
retained WAL than the passes did. Printed: per round, each mode's seconds and the WAL retained,
and the seconds of one more wait with nothing written (a pass with nothing to do).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).parent))
from log_overhead import DURABLE, connect, note  # noqa: E402

from mvlog.config import load_config  # noqa: E402
from mvlog.postgres.capture.decoding import Decoding  # noqa: E402
from mvlog.postgres.pgtemp import TempPostgres  # noqa: E402
from mvlog.project import Project  # noqa: E402


def retained_mb(dsn: str) -> float:
    with connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn) FROM pg_replication_slots")
        return float(cur.fetchone()[0]) / 1e6


def update_all(dsn: str) -> None:
    with connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("UPDATE t SET v = v + 1")


def rounds(dsn: str, n: int, wait) -> list[tuple[float, float]]:
    """``n`` rounds: update every row, then time ``wait()``; (seconds, MB retained) each."""
    out = []
    for i in range(n):
        update_all(dsn)
        started = time.perf_counter()
        wait()
        out.append((time.perf_counter() - started, retained_mb(dsn)))
        note(f"round {i + 1}: {out[-1][0]:.2f} s, {out[-1][1]:.0f} MB retained")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, TempPostgres(settings=DURABLE) as pg:
        dsn = pg.dsn()
        with connect(dsn) as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE t (id int PRIMARY KEY, v int)")
            cur.execute("INSERT INTO t SELECT g, 0 FROM generate_series(1, %s) g", (args.rows,))
        path = Path(tmp) / "mvlog.yaml"
        path.write_text(yaml.safe_dump({"source": {"dsn": dsn}, "warehouse": str(Path(tmp) / "warehouse"),
                                        "logs": [{"table": "public.t", "capture": "logical"}], "views": []}))
        project = Project(load_config(path))
        project.apply()
        decoding = Decoding(project.source)
        holder = connect(dsn)
        with holder as held, held.cursor() as cur:
            held.autocommit = False
            # open until the end, with a change of its own: the slot's restart position stays
            # before it (a transaction that wrote nothing would not hold it)
            cur.execute("CREATE TABLE IF NOT EXISTS held (id int)")
            held.commit()
            cur.execute("INSERT INTO held VALUES (1)")
            note("passes")
            passes = rounds(dsn, args.rounds, decoding.catch_up)
            started = time.perf_counter()
            decoding.catch_up()
            idle_pass = time.perf_counter() - started
            note("stream")
            stop = threading.Event()
            thread = threading.Thread(target=lambda: list(project.capture(stop=stop.is_set)))
            thread.start()
            try:
                streamed = rounds(dsn, args.rounds, lambda: decoding.reach_now(600))
                started = time.perf_counter()
                decoding.reach_now(600)
                idle_stream = time.perf_counter() - started
            finally:
                stop.set()
                thread.join()
        project.close()
    print(f"\n{args.rows:,} rows updated per round, one transaction held open throughout\n")
    print("| round | pass (s) | retained (MB) | stream (s) | retained (MB) |")
    print("|---:|---:|---:|---:|---:|")
    for i, ((p, pr), (s, sr)) in enumerate(zip(passes, streamed, strict=True), 1):
        print(f"| {i} | {p:.2f} | {pr:.0f} | {s:.2f} | {sr:.0f} |")
    print(f"| nothing written | {idle_pass:.2f} | | {idle_stream:.2f} | |")


if __name__ == "__main__":
    main()
