"""``mvlog schedule`` and ``mvlog history``: refreshes on cron, clean stop on SIGTERM."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest
import yaml
from conftest import SUBPROCESS_SPARK
from schedulers import follow, wait_for_line

from mvlog.commands.timing import units_of
from mvlog.config import load_config, parse_config
from mvlog.errors import ConfigError
from mvlog.postgres.pgtemp import free_port
from mvlog.project import Project

pytestmark = pytest.mark.integration


def succeeded_after(db, view: str, after_id: int) -> int:
    return db.execute("SELECT count(*) FROM mvlog.refresh_history WHERE view_name = %s AND status = 'succeeded' "
                      "AND id > %s AND keys_read > 0", (view, after_id))[0][0]


def scrape(port: int) -> dict[tuple, float]:
    """The scheduler's metrics: (name, sorted labels) -> value."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_schedule_refreshes_on_cron_and_stops_cleanly(db, spark, tmp_path):
    db.execute("CREATE TABLE t (id int PRIMARY KEY, a int); INSERT INTO t SELECT g, g FROM generate_series(1, 50) g")
    config = tmp_path / "mvlog.yaml"
    config.write_text(yaml.safe_dump({
        "source": {"dsn": db.dsn}, "warehouse": str(tmp_path / "wh"),
        "spark": SUBPROCESS_SPARK,
        "logs": [{"table": "t"}],
        "views": [{"name": "every2", "schedule": "*/2 * * * * *", "query": "SELECT id, a FROM t WHERE a % 2 = 0"},
                  {"name": "every5", "schedule": "*/5 * * * * *", "query": "SELECT id, a * 10 AS a10 FROM t"}],
    }))
    env = {**os.environ, "TZ": "UTC"}
    run = lambda *args: subprocess.run([sys.executable, "-m", "mvlog", "-q", "-c", str(config), *args],  # noqa: E731
                                       capture_output=True, text=True, env=env, timeout=300)
    with Project(load_config(config)) as project:  # the build, in the test session's Spark
        assert project.warehouse.spark is spark
        assert [r.error for r in project.apply().builds] == [None, None]
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
    # The refresh seen running may end before the signal is handled: the scheduler then has none in
    # flight to wait for. Either way the refresh seen finished (above) and the scheduler stopped.
    assert re.search(r"received SIGTERM: stopping\b", stdout), stdout
    assert stdout.rstrip().endswith("stopped")
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
    with pytest.raises(ConfigError, match="no view has a schedule or a freshness target"):
        units_of(parse_config(base + "  - {name: d, query: 'SELECT 1'}\n"))


def test_the_scheduler_warms_the_tables_its_refreshes_wrote():
    """After a refresh, the views whose refresh committed have their new Delta version's state built
    (``Project.warm``): not those that found nothing, failed or wrote no row."""
    from mvlog.commands.schedule import Scheduler
    from mvlog.model import RefreshMethod
    from mvlog.pipeline.results import RefreshResult

    base = "source: {dsn: 'host=h'}\nwarehouse: w\nviews:\n"
    config = parse_config(base + "".join(f"  - {{name: {v}, query: 'SELECT 1', schedule: '* * * * *'}}\n"
                                         for v in "abcde"))
    results = [RefreshResult("a", RefreshMethod.FAST, "", None, 3, rows_updated=2),
               RefreshResult("b", RefreshMethod.COMPLETE, "", None, rows_inserted=0),
               RefreshResult("c", RefreshMethod.FAST, "", None, 1),  # its one key's row unchanged
               RefreshResult("d", "fresh", "", None),
               RefreshResult("e", RefreshMethod.FAST, "", None, 2, rows_inserted=1, error="boom")]

    class Stub:
        def __init__(self):
            self.config, self.warmed = config, []

        def refresh(self, names):
            return [r for r in results if r.view in names]

        def warm(self, names):
            self.warmed.append(names)

        def reachable(self):
            pass

    project = Stub()
    scheduler = Scheduler(project, lambda line: None)  # type: ignore[arg-type]
    scheduler.refresh(scheduler.units)
    scheduler.warmer.shutdown(wait=True)  # it warms beside the loop
    assert project.warmed == [["a", "b"]]


def test_freshness_units():
    """A group keeps its strictest target; a unit waits while its lag, plus what its last refresh
    took, plus the time to its next look, stays under the target; nothing pending never fires."""
    base = "source: {dsn: 'host=h'}\nwarehouse: w\nviews:\n"
    config = parse_config(base + "  - {name: a, query: 'SELECT 1', freshness: 10m}\n"
                                 "  - {name: b, query: 'SELECT 1', freshness: 1h, group: g}\n"
                                 "  - {name: c, query: 'SELECT 1', freshness: 5m, group: g, schedule: '0 * * * *'}\n")
    a, g = units_of(config)
    assert (a.freshness, a.cron, a.poll) == (timedelta(minutes=10), None, 30.0)
    assert (g.views, g.freshness, g.cron, g.poll) == (["b", "c"], timedelta(minutes=5), "0 * * * *", 30.0)
    a.last_seconds = 20
    assert a.fresh_enough(0.0) and a.fresh_enough(489.0) and not a.fresh_enough(491.0)  # 20 + 30 + 60 to spare
    assert not a.fresh_enough(None)  # never built
    start = datetime(2026, 1, 1, 10, 0, 1, tzinfo=UTC)
    a.advance(start)
    assert a.next_at == start + timedelta(seconds=30)
    g.advance(start)  # the cron's next firing is an hour away; the freshness look comes first
    assert g.next_at == start + timedelta(seconds=30)
    assert not g.cron_due(start + timedelta(minutes=30), start) and g.cron_due(start + timedelta(hours=1), start)
    assert units_of(parse_config(base + "  - {name: q, query: 'SELECT 1', freshness: 5s}\n"))[0].poll == 1.0


def test_a_busy_freshness_unit_looks_again_when_its_lag_will_need_it():
    """After a refresh, the next look comes when the lag since the applied stamp reaches the point
    where the unit must refresh again: at once if it already has, never later than a poll."""
    base = "source: {dsn: 'host=h'}\nwarehouse: w\nviews:\n"
    (unit,) = units_of(parse_config(base + "  - {name: q, query: 'SELECT 1', freshness: 10s}\n"))
    unit.last_seconds = 3.0  # must refresh at a lag of 10 - 3 - 1 (poll) - 1 (spare) = 5 s
    assert unit.fresh_enough(4.9) and not unit.fresh_enough(5.0)
    now = datetime(2026, 1, 1, 10, 0, 0, tzinfo=UTC)
    unit.advance_after_refresh(now - timedelta(seconds=4.5), now)
    assert unit.next_at == now + timedelta(seconds=0.5)
    unit.advance_after_refresh(now - timedelta(seconds=6), now)  # behind already: look at once
    assert unit.next_at == now
    unit.advance_after_refresh(now - timedelta(seconds=1), now)  # far from it: a poll away
    assert unit.next_at == now + timedelta(seconds=1)
    unit.advance_after_refresh(None, now)  # nothing applied (it failed): a poll away
    assert unit.next_at == now + timedelta(seconds=1)


def test_schedule_keeps_views_within_their_freshness_target(db, tmp_path, connect_engine):
    """`freshness: 15s`: nothing is refreshed while nothing is pending; a change is applied after the
    scheduler has let it wait (batching) and before the target; `mvlog status` shows the lag and
    whether the day met the target. A view with a 1h target and pending changes waits. On the
    test session's engine (the cron test above runs a Spark of the scheduler's own)."""
    db.execute("CREATE TABLE f (id int PRIMARY KEY, a int); INSERT INTO f SELECT g, g FROM generate_series(1, 20) g")
    config = tmp_path / "mvlog.yaml"
    config.write_text(yaml.safe_dump({
        "source": {"dsn": db.dsn}, "warehouse": str(tmp_path / "wh"),
        "spark": {"remote": connect_engine.remote},
        "logs": [{"table": "f"}],
        "views": [{"name": "fresh15", "freshness": "15s", "query": "SELECT id, a FROM f"},
                  {"name": "hourly", "freshness": "1h", "query": "SELECT a % 3 AS r, count(*) AS n FROM f GROUP BY 1"}],
    }))
    run = lambda *args: subprocess.run([sys.executable, "-m", "mvlog", "-q", "-c", str(config), *args],  # noqa: E731
                                       capture_output=True, text=True, timeout=300,
                                       env={**os.environ, "COLUMNS": "250"})  # rich: one line per view
    assert run("apply").returncode == 0
    built = db.execute("SELECT coalesce(max(id), 0) FROM mvlog.refresh_history")[0][0]
    errors = tmp_path / "schedule.err"
    port, ui_port = free_port(), free_port()
    scheduler = subprocess.Popen([sys.executable, "-m", "mvlog", "-q", "-c", str(config), "schedule",
                                  "--metrics-port", str(port), "--ui", "--ui-port", str(ui_port)],
                                 stdout=subprocess.PIPE, stderr=errors.open("w"), text=True)
    lines = follow(scheduler)
    try:
        wait_for_line(lines, "ready: Spark started", 120)
        time.sleep(8)  # several looks (every 3 s) with nothing pending
        assert db.execute("SELECT count(*) FROM mvlog.refresh_history WHERE id > %s", (built,))[0][0] == 0

        db.execute("UPDATE f SET a = a + 100 WHERE id IN (1, 2)")
        changed = time.monotonic()
        deadline = changed + 75
        while time.monotonic() < deadline and not succeeded_after(db, "fresh15", built):
            time.sleep(0.2)
        assert succeeded_after(db, "fresh15", built) == 1
        ((lag, waited),) = db.execute(
            "SELECT extract(epoch FROM finished_at - oldest_change), extract(epoch FROM started_at - oldest_change) "
            "FROM mvlog.refresh_history WHERE view_name = 'fresh15' AND id > %s", (built,))
        # It let the change wait (batching) until its lag plus its estimate of the refresh, a look
        # (3 s) and the margin (3 s) reached the target, and decided at the first look after that
        # (the decision, as the scheduler logged it, in whole seconds). Looks are 3 s apart when the
        # scheduler is idle; on a loaded machine one may come a look late (seen once in a suite
        # run: lag 12 s + 2 s), so the bound allows two looks past the target. Whether the refresh
        # then met the target depends on how long it took: status says either way.
        assert waited > 3, waited
        decision = next(re.search(r"fresh15: lag (\d+)s \+ last refresh (\d+)s nears", line) for line in lines
                        if "fresh15: lag" in line)
        lag_then, last = int(decision.group(1)), int(decision.group(2))
        assert lag_then + last + 3 + 3 >= 15 - 1, decision.group(0)  # not before it was due
        # and at most two looks after (due at once when its last refresh, the build on a loaded
        # machine, took about the target: seen in a suite run, lag 1 s + 16 s)
        assert lag_then <= max(15 - 3 - 3 - last, 0) + 2 * 3 + 1, decision.group(0)
        status = json.loads(run("status", "--json").stdout)
        # Prometheus metrics, scraped over HTTP: the refresh counted, the gauges brought up to date.
        ((updated,),) = db.execute("SELECT rows_updated FROM mvlog.refresh_history WHERE view_name = 'fresh15' "
                                   "AND id > %s", (built,))
        deadline = time.monotonic() + 30
        # The gauges follow the catalog at the scheduler's next look after the refresh.
        while ((metrics := scrape(port)).get(("mvlog_view_lag_seconds", (("view", "hourly"),)), 0) <= 0
               or metrics.get(("mvlog_view_lag_seconds", (("view", "fresh15"),))) != 0):
            assert time.monotonic() < deadline, metrics
            time.sleep(1)
        # The dashboard, served from the scheduler's process (--ui): the refresh it just made.
        assert any(f"serving the dashboard on http://127.0.0.1:{ui_port}/" in line for line in lines)
        deadline = time.monotonic() + 30  # the overview is read every 2 s: the next read sees the refresh
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/api/views/fresh15", timeout=60) as response:
                page = json.loads(response.read())
            if (page["latest_refresh"] or {}).get("status") == "succeeded" or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert page["latest_refresh"]["status"] == "succeeded" and page["state"] == "fresh"
        assert page["history"][0]["id"] == page["latest_refresh"]["id"]
    finally:
        scheduler.send_signal(signal.SIGTERM)
        scheduler.wait(timeout=120)
    stdout, stderr = "\n".join(lines), errors.read_text()
    assert scheduler.returncode == 0, stderr
    assert "fresh15: lag" in stdout and "nears the target 15s: refreshing" in stdout, stdout
    views = {v["name"]: v for v in status["views"]}
    assert views["fresh15"]["lag_seconds"] == 0 and views["fresh15"]["freshness_seconds"] == 15
    assert views["fresh15"]["freshness_missed_last_day"] is (lag > 15)
    assert views["fresh15"]["max_lag_last_day_seconds"] == pytest.approx(float(lag), abs=0.01)
    assert views["hourly"]["lag_seconds"] > 0 and views["hourly"]["freshness_missed_last_day"] is False
    assert db.execute("SELECT count(*) FROM mvlog.refresh_history WHERE view_name = 'hourly' AND id > %s",
                      (built,))[0][0] == 0
    human = run("status").stdout
    assert ("15s (missed: " if lag > 15 else "15s (met)") in human and "1h00m (met)" in human
    assert metrics[("mvlog_refreshes_total", (("method", "fast"), ("status", "ok"), ("view", "fresh15")))] == 1
    assert metrics[("mvlog_refresh_rows_total", (("change", "updated"), ("view", "fresh15")))] == updated == 2
    assert metrics[("mvlog_refresh_keys_read_total", (("view", "fresh15"),))] == 2
    assert metrics[("mvlog_view_freshness_target_seconds", (("view", "fresh15"),))] == 15
    assert metrics[("mvlog_view_lag_seconds", (("view", "fresh15"),))] == 0
    assert metrics[("mvlog_log_rows", (("table", "public.f"),))] >= 2  # kept for hourly
    assert metrics[("mvlog_log_bytes", (("table", "public.f"),))] > 0
    assert f"serving metrics on http://127.0.0.1:{port}/metrics" in stdout


def test_the_source_watch_says_once_that_postgresql_is_away_and_when_it_is_back():
    import threading

    from mvlog.commands import schedule
    from mvlog.errors import SourceError

    class Clock(threading.Event):  # waits no time, and remembers how long it was asked to
        def __init__(self):
            super().__init__()
            self.delays: list[float] = []

        def wait(self, timeout=None):
            self.delays.append(timeout)
            return self.is_set()

    answers = [SourceError("PostgreSQL: refused", transient=True)] * 3 + [None]
    pings, lines = [], []

    def ping() -> None:
        pings.append(1)
        if (answer := answers[len(pings) - 1]) is not None:
            raise answer

    clock = Clock()
    watch = schedule.SourceWatch(ping, lines.append, clock)
    assert watch.wait(SourceError("PostgreSQL: server closed the connection unexpectedly", transient=True))
    assert len(pings) == 4
    assert [line.split(" (")[0].split(" after")[0] for line in lines] == ["PostgreSQL is unavailable",
                                                                           "PostgreSQL is back"]
    assert "server closed the connection unexpectedly" in lines[0]
    assert clock.delays == [schedule.RETRY_FIRST * 2 ** i for i in range(4)]  # backoff
    # A non-transient answer (the password changed while it was away) is not waited for.
    answers[:] = [SourceError("PostgreSQL: password authentication failed")]
    pings.clear()
    with pytest.raises(SourceError, match="password"):
        watch.wait(SourceError("PostgreSQL: gone", transient=True))
    # Stopped while it waits: it returns False.
    stopped = threading.Event()
    stopped.set()
    assert not schedule.SourceWatch(ping, lines.append, stopped).wait(SourceError("gone", transient=True))
