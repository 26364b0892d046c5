"""``mvlog schedule`` and ``mvlog history``: refreshes on cron, clean stop on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from mvlog.config import parse_config
from mvlog.errors import ConfigError
from mvlog.schedule import units_of

pytestmark = pytest.mark.integration


def succeeded_after(db, view: str, after_id: int) -> int:
    return db.execute("SELECT count(*) FROM mvlog.refresh_history WHERE view_name = %s AND status = 'succeeded' "
                      "AND id > %s AND keys_read > 0", (view, after_id))[0][0]


def test_schedule_refreshes_on_cron_and_stops_cleanly(db, tmp_path):
    db.execute("CREATE TABLE t (id int PRIMARY KEY, a int); INSERT INTO t SELECT g, g FROM generate_series(1, 50) g")
    config = tmp_path / "mvlog.yaml"
    config.write_text(yaml.safe_dump({
        "source": {"dsn": db.dsn}, "warehouse": str(tmp_path / "wh"),
        "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "2"}},
        "logs": [{"table": "t"}],
        "views": [{"name": "every2", "schedule": "*/2 * * * * *", "query": "SELECT id, a FROM t WHERE a % 2 = 0"},
                  {"name": "every5", "schedule": "*/5 * * * * *", "query": "SELECT id, a * 10 AS a10 FROM t"}],
    }))
    env = {**os.environ, "TZ": "UTC"}
    run = lambda *args: subprocess.run([sys.executable, "-m", "mvlog", "-q", "-c", str(config), *args],  # noqa: E731
                                       capture_output=True, text=True, env=env, timeout=300)
    assert run("apply").returncode == 0
    last_id = db.execute("SELECT coalesce(max(id), 0) FROM mvlog.refresh_history")[0][0]
    scheduler = subprocess.Popen([sys.executable, "-m", "mvlog", "-q", "-c", str(config), "schedule"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 240
        round_ = 0
        while time.monotonic() < deadline and not (succeeded_after(db, "every2", last_id) >= 2
                                                     and succeeded_after(db, "every5", last_id) >= 1):
            round_ += 1
            db.execute("UPDATE t SET a = a + 1 WHERE id = %s", (1 + round_ % 50,))
            time.sleep(0.5)
        assert succeeded_after(db, "every2", last_id) >= 2 and succeeded_after(db, "every5", last_id) >= 1
        # Stop while a refresh is in flight: it must finish, not be cut in half.
        in_flight = None
        deadline = time.monotonic() + 60
        while in_flight is None and time.monotonic() < deadline:
            db.execute("UPDATE t SET a = a + 1 WHERE id = 7")
            rows = db.execute("SELECT id FROM mvlog.refresh_history WHERE status = 'running'")
            in_flight = rows[0][0] if rows else None
            time.sleep(0.05)
        assert in_flight is not None, "never saw a refresh in flight"
        scheduler.send_signal(signal.SIGTERM)
        stdout, stderr = scheduler.communicate(timeout=120)
    finally:
        if scheduler.poll() is None:
            scheduler.kill()
    assert scheduler.returncode == 0, stderr
    assert db.execute("SELECT status FROM mvlog.refresh_history WHERE id = %s", (in_flight,))[0][0] == "succeeded"
    assert db.execute("SELECT count(*) FROM mvlog.refresh_history WHERE status = 'running'")[0][0] == 0
    assert "view=every2 status=ok method=fast" in stdout and "view=every5 status=ok" in stdout
    assert "received SIGTERM: stopping after the refresh in flight" in stdout and stdout.rstrip().endswith("stopped")
    assert "Traceback" not in stderr

    history = run("history", "every2", "--json")
    assert history.returncode == 0, history.stderr
    entries = json.loads(history.stdout)
    assert entries[0]["status"] == "succeeded" and entries[-1]["method"] == "complete"  # newest first; the build last
    assert {"started_at", "finished_at", "seconds", "keys_read", "rows_inserted", "rows_updated", "rows_deleted",
            "reason", "error", "snaptime"} <= set(entries[0])
    human = run("history", "every5")
    assert human.returncode == 0 and "succeeded" in human.stdout


def test_schedule_units():
    base = "source: {dsn: 'host=h'}\nwarehouse: w\nviews:\n"
    config = parse_config(base + "  - {name: a, query: 'SELECT 1', schedule: '* * * * *'}\n"
                                 "  - {name: b, query: 'SELECT 1', schedule: '*/5 * * * *', group: g}\n"
                                 "  - {name: c, query: 'SELECT 1', schedule: '*/5 * * * *', group: g}\n"
                                 "  - {name: d, query: 'SELECT 1'}\n")
    assert [(u.name, u.views, u.group) for u in units_of(config)] == [("a", ["a"], None), ("group g", ["b", "c"], "g")]
    clash = parse_config(base + "  - {name: b, query: 'SELECT 1', schedule: '*/5 * * * *', group: g}\n"
                                "  - {name: c, query: 'SELECT 1', schedule: '* * * * *', group: g}\n")
    with pytest.raises(ConfigError, match="views of refresh group g have different schedules"):
        units_of(clash)
    with pytest.raises(ConfigError, match="no view has a schedule"):
        units_of(parse_config(base + "  - {name: d, query: 'SELECT 1'}\n"))
