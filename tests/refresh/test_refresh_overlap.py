"""Runs that overlap, as real processes: a slow `mvlog refresh` holds its views while another
refresh and `mvlog schedule` start. A view another process is refreshing is waited for
(`--wait`) or skipped and said so — never a failure — and nothing is lost."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import assert_views_match

from mvlog.config import load_config
from mvlog.postgres.locks import VIEW_LOCK_NAMESPACE
from mvlog.project import Project

pytestmark = pytest.mark.integration

SCHEMA = """
CREATE TABLE items (id int PRIMARY KEY, grp int NOT NULL, qty int NOT NULL);
INSERT INTO items SELECT g, g % 3, g FROM generate_series(1, 30) g;
"""
VIEWS = [
    {"name": "all_items", "refresh": "fast", "schedule": "*/2 * * * * *", "query": "SELECT id, grp, qty FROM items"},
    {"name": "per_grp", "refresh": "fast", "group": "g",
     "query": "SELECT grp, count(*) AS n, sum(qty) AS qty FROM items GROUP BY grp"},
    {"name": "big_items", "refresh": "fast", "group": "g", "query": "SELECT id, qty FROM items WHERE qty > 10"},
]
PAUSE = 18  # seconds the first refresh holds its views after stamping


def mvlog(config: Path, *args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "mvlog", "-q", "-c", str(config), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TZ": "UTC", **env})


def finished(process: subprocess.Popen, timeout: float = 240) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


def view_locks_held(db) -> int:
    return db.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid::bigint = %s "
                      "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                      (VIEW_LOCK_NAMESPACE,))[0][0]


def test_overlapping_refreshes_and_a_scheduler_wait_or_skip_and_exit_0(db, tmp_path, connect_engine):
    db.execute(SCHEMA)
    config = tmp_path / "mvlog.yaml"
    config.write_text(yaml.safe_dump({
        "source": {"dsn": db.dsn}, "warehouse": str(tmp_path / "wh"), "spark": {"remote": connect_engine.remote},
        "logs": [{"table": "items"}], "views": VIEWS}, sort_keys=False))
    assert finished(mvlog(config, "apply"))[0] == 0
    db.execute("UPDATE items SET qty = qty + 20 WHERE id <= 5; DELETE FROM items WHERE id = 30")

    # A: a slow run (both units at once) that holds every view after its stamp.
    slow = mvlog(config, "refresh", "--json", MVLOG_PAUSE=f"after_stamp:{PAUSE}")
    deadline = time.monotonic() + 120
    while view_locks_held(db) < len(VIEWS):
        assert slow.poll() is None and time.monotonic() < deadline, slow.stderr.read() if slow.poll() else "timeout"
        time.sleep(0.2)
    db.execute("INSERT INTO items VALUES (31, 1, 31); UPDATE items SET grp = 2 WHERE id = 6")  # writers go on

    # B: does not wait: every view skipped, the holder named; exit 0.
    code, out, err = finished(mvlog(config, "refresh", "--wait", "0", "--json"))
    assert code == 0, err
    skipped = {r["view"]: r for r in json.loads(out)}
    holder = f"being refreshed by pid {slow.pid} on {socket.gethostname()} since "
    for view in VIEWS:
        result = skipped[view["name"]]
        assert (result["status"], result["method"], result["error"]) == ("skipped", "-", None), result
        assert result["reason"].startswith(holder), result
    # C waits for A and then refreshes; a scheduler started meanwhile skips, then refreshes.
    waiting = mvlog(config, "refresh", "--wait", "180", "--json")
    scheduler = mvlog(config, "schedule")

    code, out, err = finished(slow)
    assert code == 0, err
    assert {r["view"]: r["status"] for r in json.loads(out)} == {v["name"]: "succeeded" for v in VIEWS}
    code, out, err = finished(waiting)
    assert code == 0, err
    assert {(r["status"], r["method"]) for r in json.loads(out)} == {("succeeded", "fast")}
    project = Project(load_config(config))  # C stamped after every write: the views are exact now
    try:
        assert_views_match(project, VIEWS)
    finally:
        project.close()

    lines: list[str] = []
    deadline = time.monotonic() + 120
    while not any("view=all_items status=ok" in line for line in lines):
        assert scheduler.poll() is None and time.monotonic() < deadline, lines
        lines.append(scheduler.stdout.readline())
    scheduler.send_signal(signal.SIGTERM)
    code, out, err = finished(scheduler, 120)
    assert code == 0, err
    # It started while A (or then C) held the view: it skipped it and went on.
    holders = [f"being refreshed by pid {p.pid} on {socket.gethostname()} since " for p in (slow, waiting)]
    assert any(f"view=all_items status=skipped reason='{h}" in line for line in lines for h in holders), lines
    assert not any("status=failed" in line for line in lines + out.splitlines()), lines
