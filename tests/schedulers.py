"""Schedulers run as processes, as users run them: their output followed line by line, and the
two-scheduler scenario (one killed in the middle of a refresh) that tests/ops and tests/spark run
on different warehouses."""

from __future__ import annotations

import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime

import psycopg2
import yaml
from conftest import assert_views_match
from psycopg2 import sql

from mvlog.config import load_config
from mvlog.postgres.catalog.history import INTERRUPTED
from mvlog.postgres.locks import VIEW_LOCK_NAMESPACE
from mvlog.project import Project


def follow(process: subprocess.Popen) -> list[str]:
    """The process's stdout lines as they come (a reader thread appends them)."""
    import threading

    lines: list[str] = []

    def read() -> None:
        for line in process.stdout:
            lines.append(line.rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()
    return lines


def wait_for_line(lines: list[str], text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not any(text in line for line in lines):
        assert time.monotonic() < deadline, f"no {text!r} in {lines}"
        time.sleep(0.2)


VIEWS = [
    {"name": "copy", "schedule": "*/2 * * * * *", "query": "SELECT id, a, note FROM h WHERE a % 7 <> 0"},
    {"name": "sums", "schedule": "*/2 * * * * *",
     "query": "SELECT a % 5 AS r, count(*) AS n, sum(a) AS total FROM h GROUP BY a % 5"},
]


def write_until(db, stop: threading.Event, done: list[float], seed: int = 7) -> None:
    """Random inserts, updates (some of the key) and deletes, one transaction each, until ``stop``;
    as an application does, it connects again when the server went away (a restart). ``done``
    gets the time (this machine's clock, the server's too) after each that changed a row."""
    rng = random.Random(seed)
    conn = None
    while not stop.is_set():
        try:
            if conn is None:
                conn = db.connect(autocommit=True)
            with conn.cursor() as cur:
                k = rng.randint(1, 400)
                op = rng.choice(("insert", "update", "update", "delete", "rekey"))
                if op == "insert":
                    cur.execute("INSERT INTO h VALUES (%s, %s, 'w') ON CONFLICT (id) DO NOTHING",
                                (k, rng.randint(0, 99)))
                elif op == "update":
                    cur.execute("UPDATE h SET a = %s, note = NULL WHERE id = %s", (rng.randint(0, 99), k))
                elif op == "delete":
                    cur.execute("DELETE FROM h WHERE id = %s", (k,))
                else:
                    cur.execute("UPDATE h SET id = %s WHERE id = %s AND NOT EXISTS (SELECT FROM h WHERE id = %s)",
                                (k + 1000, k, k + 1000))
                if cur.rowcount > 0:  # a change (not a key already there, or gone)
                    done.append(time.time())
        except psycopg2.Error:
            if conn is not None:
                conn.close()
            conn = None
            time.sleep(0.1)
        time.sleep(0.02)
    if conn is not None:
        conn.close()


def refreshing(db, pids: set[int]) -> int | None:
    """The scheduler process (of ``pids``) with a refresh in flight: a 'running' history row whose
    view's lock its lock session (named after the process) holds."""
    rows = db.execute(
        "SELECT a.application_name FROM mvlog.refresh_history r "
        "JOIN pg_locks l ON l.locktype = 'advisory' AND l.granted AND l.classid::bigint = %s "
        " AND l.objid::bigint = hashtext(r.view_name)::bigint & 4294967295 "
        "JOIN pg_stat_activity a ON a.pid = l.pid WHERE r.status = 'running'", (VIEW_LOCK_NAMESPACE,))
    for (name,) in rows:
        found = re.match(r"mvlog pid (\d+) on ", name or "")
        if found and int(found.group(1)) in pids:
            return int(found.group(1))
    return None


def refreshes(db, view: str) -> list[tuple]:
    return db.execute("SELECT started_at, finished_at, status, error FROM mvlog.refresh_history "
                      "WHERE view_name = %s ORDER BY started_at", (view,))


def two_schedulers_and_a_sigkill(db, tmp_path, warehouse: str, spark: dict) -> None:
    """Two schedulers on the warehouse and Spark given; one killed in the middle of a refresh."""
    db.execute("CREATE TABLE h (id int PRIMARY KEY, a int, note text);"
               "INSERT INTO h SELECT g, g % 100, 'n' || g FROM generate_series(1, 300) g")
    config = tmp_path / "mvlog.yaml"
    config.write_text(yaml.safe_dump({
        "source": {"dsn": db.dsn}, "warehouse": warehouse,
        "spark": spark, "logs": [{"table": "h"}], "views": VIEWS,
    }))
    with Project(load_config(config)) as project:
        assert not [r for r in project.apply().builds if r.error]
    start = time.time()
    schedulers, outputs = [], []
    for i in range(2):
        process = subprocess.Popen([sys.executable, "-m", "mvlog", "-q", "-c", str(config), "schedule"],
                                   stdout=subprocess.PIPE, stderr=(tmp_path / f"s{i}.err").open("w"), text=True)
        schedulers.append(process)
        outputs.append(follow(process))
    stop, writes = threading.Event(), []
    writer = threading.Thread(target=write_until, args=(db, stop, writes))
    try:
        for lines in outputs:
            wait_for_line(lines, "ready: Spark started", 120)
        writer.start()
        time.sleep(6)  # three firings (every 2 s) of both schedulers
        # Kill the scheduler that is in the middle of a refresh.
        pids = {p.pid for p in schedulers}
        deadline = time.monotonic() + 60
        while (victim := refreshing(db, pids)) is None:
            assert time.monotonic() < deadline, "never saw a scheduler in the middle of a refresh"
            time.sleep(0.01)
        killed = next(p for p in schedulers if p.pid == victim)
        killed.send_signal(signal.SIGKILL)
        killed.wait(30)
        killed_at = time.time()
        survivor = next(p for p in schedulers if p is not killed)
        time.sleep(6)  # writers go on while the survivor takes the views over
        stop.set()
        writer.join(30)
        last_write = writes[-1]
        # The survivor refreshes both views past the last write.
        deadline = time.monotonic() + 90
        while not all(any(s == "succeeded" and started.timestamp() > last_write
                          for started, _, s, _ in refreshes(db, v))
                      for v in ("copy", "sums")):
            assert time.monotonic() < deadline, "the survivor did not refresh past the last write"
            time.sleep(0.5)
        survivor.send_signal(signal.SIGTERM)
        survivor.wait(120)
    finally:
        stop.set()
        for process in schedulers:
            if process.poll() is None:
                process.kill()
    assert survivor.returncode == 0
    assert len(writes) > 100

    # They shared the work: both refreshed, or one found the other holding a view and skipped it.
    done = [sum(" status=ok " in line for line in lines) for lines in outputs]
    skipped = [line for lines in outputs for line in lines if "status=skipped" in line]
    assert all(done) or any(f"pid {p.pid} on " in line for p in schedulers for line in skipped), (done, skipped)
    assert done[schedulers.index(survivor)] > 0
    for view in ("copy", "sums"):
        rows = [r for r in refreshes(db, view) if r[0].timestamp() >= start]
        assert all(status in ("succeeded", "failed") for _, _, status, _ in rows)
        for (_, finished, _, error), (started, _, _, _) in zip(rows, rows[1:]):
            # An interrupted refresh's end is when the next refresh found it dead, not when it died:
            # under load the killed process's last INSERT of a 'running' row can commit after the
            # survivor took the view over, so only the refreshes that ended themselves are ordered.
            if error != INTERRUPTED:
                assert finished <= started, f"{view}: two refreshes overlapped: {rows}"
        after_kill = [r for r in rows if r[0].timestamp() > killed_at and r[2] == "succeeded"]
        assert after_kill, f"{view}: no refresh after the kill"
        # Taken over at the survivor's next firings (every 2 s), not after some lease ran out.
        assert after_kill[0][0].timestamp() - killed_at < 10, (view, after_kill[0][0], killed_at)
    # The killed scheduler's refreshes in flight (one per view at most: it may have been refreshing
    # both at once) are the only failures, and say they were interrupted.
    interrupted = [r for v in ("copy", "sums") for r in refreshes(db, v) if r[2] == "failed"]
    assert 1 <= len(interrupted) <= 2
    assert {e for *_, e in interrupted} == {"interrupted: the refresh process ended before finishing"}
    with Project(load_config(config)) as project:
        assert_views_match(project, ("copy", "sums"))


RESTART_VIEWS = [  # a filter, an aggregate and a join, each at most 5 s behind
    {"name": "copy", "freshness": "5s", "query": "SELECT id, a, note FROM h WHERE a % 7 <> 0"},
    {"name": "sums", "freshness": "5s",
     "query": "SELECT a % 5 AS r, count(*) AS n, sum(a) AS total FROM h GROUP BY a % 5"},
    {"name": "moved", "freshness": "5s",
     "query": "SELECT o.id, o.a, n.id AS moved_to FROM h o JOIN h n ON n.id = o.id + 1000"},
]
# Seconds a view may take, beyond its 5 s target, to be refreshed past a restart: the scheduler's
# wait for PostgreSQL (1 s, then 2 s …), one retry's backoff (2 s) and a refresh on a busy machine.
CATCH_UP = 25.0


def fresh_query(dsn: str, statement: str, params=None) -> list[tuple]:
    """``statement`` on a connection of its own (the server restarts under the test)."""
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(statement, params)
            return cur.fetchall()
    finally:
        conn.close()


def diagnosis(dsn: str, process: subprocess.Popen, errors, lines: list[str], writes: list[float]) -> str:
    """What a scheduler that fell silent was doing, for a failing assertion's message: every
    thread's stack (SIGUSR1), the capture's position against the server's, the slot, the logs'
    unstamped rows and mvlog's connections."""
    (errors.parent / "schedule.out").write_text("\n".join(lines))
    last = f"{datetime.fromtimestamp(writes[-1], UTC):%H:%M:%S.%f}" if writes else None
    said = [f"changes written: {len(writes)}, the last at {last}"]
    if process.poll() is None:
        process.send_signal(signal.SIGUSR1)
        time.sleep(1.0)
    queries = [
        "SELECT written_lsn, pg_current_wal_lsn() FROM mvlog.capture_state",
        "SELECT slot_name, active, active_pid, confirmed_flush_lsn, wal_status FROM pg_replication_slots",
        "SELECT pid, application_name, backend_type, state, wait_event, left(query, 120), "
        "now() - state_change FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
        "SELECT locktype, classid, objid, pid, granted FROM pg_locks WHERE locktype = 'advisory'",
        "SELECT view_name, status, snaptime, started_at FROM mvlog.refresh_history ORDER BY started_at DESC LIMIT 6",
    ]
    try:
        for query in queries:
            said.append(f"{query[:60]}…: {fresh_query(dsn, query)}")
        for (log,) in fresh_query(dsn, "SELECT log_name FROM mvlog.logs"):
            said.append(f"{log}: " + str(fresh_query(dsn, sql.SQL(
                'SELECT count(*), count(*) FILTER (WHERE "snaptime$$" > now()), max("xact_time$$") FROM {}')
                .format(sql.Identifier("mvlog", log)))))
    except psycopg2.Error as exc:
        said.append(f"(PostgreSQL: {exc})")
    return "\n".join([*said, "stderr:", errors.read_text()[-12000:]])


def last_change(writes: list[float]) -> datetime:
    """When the writer's last change had committed: a view refreshed at a stamp after it has applied
    every change (the last refresh may have been, and then none follows: nothing is pending)."""
    assert writes, "the writer changed nothing"
    return datetime.fromtimestamp(writes[-1], UTC)


def caught_up(dsn: str, since) -> set[str]:
    """The views with a successful refresh whose stamp is at or after ``since`` (the server's clock,
    this machine's)."""
    rows = fresh_query(dsn, "SELECT DISTINCT view_name FROM mvlog.refresh_history "
                            "WHERE status = 'succeeded' AND snaptime >= %s", (since,))
    return {name for (name,) in rows}


def schedule_through_restarts(cluster, db, tmp_path, spark: dict, capture: str, modes: list[str]) -> list[str]:
    """``mvlog schedule`` over RESTART_VIEWS with a writer, while the server is restarted once per
    mode (``pg_ctl restart -m <mode>``; ``outage``: stopped for 8 s; ``failover``: back without its
    replication slots, as a standby of PostgreSQL below 17 is promoted): the scheduler stays up,
    each view is refreshed past each restart within its target plus CATCH_UP, no refresh is left
    'running', every view equals its query at the end. Returns the scheduler's output lines."""
    db.execute("CREATE TABLE h (id int PRIMARY KEY, a int, note text);"
               "INSERT INTO h SELECT g, g % 100, 'n' || g FROM generate_series(1, 300) g")
    config = tmp_path / "mvlog.yaml"
    config.write_text(yaml.safe_dump({
        "source": {"dsn": db.dsn, "capture": capture}, "warehouse": str(tmp_path / "wh"),
        "spark": spark, "logs": [{"table": "h"}], "views": RESTART_VIEWS,
    }))
    names = [v["name"] for v in RESTART_VIEWS]
    with Project(load_config(config)) as project:
        assert not [r for r in project.apply().builds if r.error]
    errors = tmp_path / "schedule.err"
    process = subprocess.Popen([sys.executable, "-m", "mvlog", "-q", "-c", str(config), "schedule"],
                               stdout=subprocess.PIPE, stderr=errors.open("w"), text=True)
    lines = follow(process)
    stop, writes = threading.Event(), []
    writer = threading.Thread(target=write_until, args=(db, stop, writes, 11))
    try:
        wait_for_line(lines, "ready: Spark started", 120)
        writer.start()
        time.sleep(6)
        for mode in modes:
            if mode == "outage":  # stopped for longer than the scheduler's looks: it waits, and says so
                cluster.outage(8)
            elif mode == "failover":  # back as a promoted standby that has no replication slot
                cluster.outage(1, lambda data: [shutil.rmtree(slot) for slot in (data / "pg_replslot").iterdir()])
            else:
                cluster.restart(mode)
            (back,) = fresh_query(db.dsn, "SELECT now()")[0]
            started = time.monotonic()
            while (behind := set(names) - caught_up(db.dsn, back)):
                assert process.poll() is None, (f"the scheduler exited after a restart ({mode}): {lines[-5:]}; "
                                                f"it said: {errors.read_text()[-3000:]}")
                assert time.monotonic() - started < 5 + CATCH_UP, (
                    f"after the restart ({mode}), {sorted(behind)} not refreshed within 5 s + {CATCH_UP:g} s: "
                    f"{lines[-8:]}")
                time.sleep(0.5)
        stop.set()
        writer.join(30)
        done = last_change(writes)
        deadline = time.monotonic() + 60
        while set(names) - caught_up(db.dsn, done):
            assert process.poll() is None, (f"the scheduler exited before the last write was applied: {lines[-5:]}; "
                                            f"it said: {errors.read_text()[-3000:]}")
            assert time.monotonic() < deadline, (f"the views did not catch up with the last write (writer stopped: "
                                                 f"{not writer.is_alive()}): {lines[-8:]}; "
                                                 f"{diagnosis(db.dsn, process, errors, lines, writes)}")
            time.sleep(0.5)
        assert process.poll() is None, lines[-5:]
        process.send_signal(signal.SIGTERM)
        process.wait(120)
    finally:
        stop.set()
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, (errors.read_text(), lines[-10:])
    assert errors.read_text().strip() == "", errors.read_text()[-3000:]  # what the scheduler said
    assert len(writes) > 100
    running = fresh_query(db.dsn, "SELECT view_name, started_at FROM mvlog.refresh_history WHERE status = 'running'")
    assert running == []
    with Project(load_config(config)) as project:
        assert_views_match(project, names)
    return lines


STALL_VIEWS = [{**view, "freshness": "10s"} for view in RESTART_VIEWS]  # the 10 s target
STALL_SECONDS = 60.0  # each stall: a minute of silence, every socket left open
HEALED_WITHIN = 120.0  # every view refreshed again within this of the healing
STOPPED_WITHIN = 30.0  # SIGTERM ends the scheduler within this, a connection stalled or not


def in_flight(dsn: str) -> bool:
    """Whether a refresh is running now (a 'running' history row)."""
    return bool(fresh_query(dsn, "SELECT count(*) FROM mvlog.refresh_history WHERE status = 'running'")[0][0])


def schedule_through_stalls(cluster, db, tmp_path, spark: dict, capture: str, stalls: list[str],
                            timeouts: dict | None = None, stall_seconds: float = STALL_SECONDS) -> list[str]:
    """``mvlog schedule`` over STALL_VIEWS with a writer, reaching PostgreSQL through a StallProxy
    that stops forwarding for ``stall_seconds`` once per entry of ``stalls`` (``refresh``: while a
    refresh is in flight; ``idle``: while none is), then forwards new connections again while the
    old ones stay silent. The scheduler never exits, each view is refreshed past each healing
    within HEALED_WITHIN, a SIGTERM during a last stall ends it within STOPPED_WITHIN, no refresh is
    left 'running', nothing reaches stderr, and every view equals its query. Returns the output."""
    from stallproxy import StallProxy

    db.execute("CREATE TABLE h (id int PRIMARY KEY, a int, note text);"
               "INSERT INTO h SELECT g, g % 100, 'n' || g FROM generate_series(1, 300) g")
    proxy = StallProxy("127.0.0.1", cluster.port)
    source = {"dsn": proxy.dsn({"user": "postgres", "password": cluster.password, "dbname": db.name}),
              "capture": capture, **({"timeouts": timeouts} if timeouts else {})}
    config = tmp_path / "mvlog.yaml"
    document = {"source": source, "warehouse": str(tmp_path / "wh"), "spark": spark, "logs": [{"table": "h"}],
                "views": STALL_VIEWS}
    config.write_text(yaml.safe_dump(document))
    # The same project reaching PostgreSQL directly, for the checks after the proxy is gone.
    (tmp_path / "direct.yaml").write_text(yaml.safe_dump({**document, "source": {**source, "dsn": db.dsn}}))
    names = [v["name"] for v in STALL_VIEWS]
    with Project(load_config(config)) as project:
        assert not [r for r in project.apply().builds if r.error]
    errors = tmp_path / "schedule.err"
    process = subprocess.Popen([sys.executable, "-m", "mvlog", "-q", "-c", str(config), "schedule"],
                               stdout=subprocess.PIPE, stderr=errors.open("w"), text=True)
    lines = follow(process)
    stop, writes = threading.Event(), []
    writer = threading.Thread(target=write_until, args=(db, stop, writes, 13))

    def said() -> str:
        (tmp_path / "schedule.out").write_text("\n".join(lines))
        return f"{lines[-12:]}; stderr: {errors.read_text()[-2000:]}"

    try:
        wait_for_line(lines, "ready: Spark started", 120)
        writer.start()
        time.sleep(8)
        for when in stalls:
            deadline = time.monotonic() + 60
            while in_flight(db.dsn) != (when == "refresh"):
                assert time.monotonic() < deadline, f"never saw the scheduler {when}: {said()}"
                time.sleep(0.02 if when == "refresh" else 0.2)
            proxy.stall()
            time.sleep(stall_seconds)
            proxy.heal()
            (healed,) = fresh_query(db.dsn, "SELECT now()")[0]
            started = time.monotonic()
            while (behind := set(names) - caught_up(db.dsn, healed)):
                assert process.poll() is None, f"the scheduler exited after a stall ({when}): {said()}"
                assert time.monotonic() - started < HEALED_WITHIN, (
                    f"after a stall ({when}), {sorted(behind)} not refreshed within {HEALED_WITHIN:g} s of the "
                    f"healing: {said()}")
                time.sleep(0.5)
            # The capture says it resumed at its first write after an outage it noticed: while the writer writes.
            while capture == "logical" and "trying again" in next(
                    (line for line in reversed(lines) if " capture: " in line), ""):
                assert time.monotonic() - started < HEALED_WITHIN, f"the capture did not say it resumed: {said()}"
                time.sleep(0.5)
        stop.set()
        writer.join(30)
        done = last_change(writes)
        deadline = time.monotonic() + 60
        while set(names) - caught_up(db.dsn, done):
            assert time.monotonic() < deadline, (f"the views did not catch up with the last write: {said()}; "
                                                 f"{diagnosis(db.dsn, process, errors, lines, writes)}")
            time.sleep(0.5)
        if capture == "logical":  # the capture streams again (the walsender of the silent stream ended)
            deadline = time.monotonic() + 60
            while not fresh_query(db.dsn, "SELECT count(*) FROM pg_replication_slots s JOIN pg_stat_replication r "
                                          "ON r.pid = s.active_pid WHERE s.database = current_database()")[0][0]:
                assert time.monotonic() < deadline, f"the capture does not stream again: {said()}"
                time.sleep(0.5)
        # Stopped while stalled: a look, a refresh or the capture waits on a silent connection.
        proxy.stall()
        time.sleep(3)
        process.send_signal(signal.SIGTERM)
        stopping = time.monotonic()
        try:
            process.wait(STOPPED_WITHIN + 5)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running {STOPPED_WITHIN + 5:g} s after SIGTERM: {said()}") from None
        assert time.monotonic() - stopping < STOPPED_WITHIN, said()
        proxy.heal()
    finally:
        stop.set()
        if process.poll() is None:
            process.kill()
            process.wait(30)
        said()
        proxy.close()  # the server's ends of the silent connections close: their backends (the stream's) end
    assert process.returncode == 0, said()
    assert errors.read_text().strip() == "", errors.read_text()[-3000:]
    assert len(writes) > 100
    running = fresh_query(db.dsn, "SELECT view_name, started_at FROM mvlog.refresh_history WHERE status = 'running'")
    with Project(load_config(config.parent / "direct.yaml")) as project:
        assert_views_match(project, names)
    # A refresh cut by the last stall is ended by the next process that refreshes its view; none other.
    assert len(running) <= len(names), running
    return lines
