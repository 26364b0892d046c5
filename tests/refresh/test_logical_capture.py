"""capture: logical (#41): the refresh's exactness protocol under concurrent writers, a capture
killed mid-batch, switching a log between capture kinds, the slot's operations."""

from __future__ import annotations

import io
import os
import random
import signal
import subprocess
import sys
import threading
import time

import psycopg2
import pytest
import yaml
from conftest import assert_views_match, refresh_ok

from mvlog.commands.schedule import Scheduler
from mvlog.config import load_config
from mvlog.errors import ConfigError
from mvlog.ops.metrics import SchedulerMetrics
from mvlog.project import Project

pytestmark = pytest.mark.integration

ACCOUNTS = 200
TOTAL = ACCOUNTS * 100
SCHEMA = f"""
CREATE TABLE accounts (id int PRIMARY KEY, branch int NOT NULL, balance int NOT NULL);
CREATE TABLE branches (id int PRIMARY KEY, name text NOT NULL);
INSERT INTO branches SELECT g, 'b' || g FROM generate_series(0, 4) g;
INSERT INTO accounts SELECT g, g % 5, 100 FROM generate_series(1, {ACCOUNTS}) g;
"""
VIEWS = [
    {"name": "balances", "refresh": "fast", "query": "SELECT id, branch, balance FROM accounts"},
    {"name": "rich", "refresh": "fast",  # accounts move in and out of the filter
     "query": "SELECT a.id, b.name, a.balance FROM accounts a JOIN branches b ON b.id = a.branch "
              "WHERE a.balance > 100"},
    {"name": "per_branch", "refresh": "fast",  # kept by deltas
     "query": "SELECT branch, count(*) AS n, sum(balance) AS total FROM accounts GROUP BY branch"},
]


class Transfers:
    """A writer moving money between random accounts, one transfer per transaction (the sum of
    balances never changes), and now and then an account moving branch or being re-keyed."""

    def __init__(self, db, pause: float = 0.005):
        self.db, self.pause = db, pause
        self.stop = threading.Event()
        self.commits = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Transfers:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)
        assert self.error is None, self.error

    def _run(self) -> None:
        rng = random.Random(41)
        conn = self.db.connect()
        try:
            with conn.cursor() as cur:
                while not self.stop.is_set():
                    a, b = rng.sample(range(1, ACCOUNTS + 1), 2)
                    amount = rng.randint(1, 30)
                    cur.execute("UPDATE accounts SET balance = balance - %s WHERE id = %s", (amount, a))
                    cur.execute("UPDATE accounts SET balance = balance + %s WHERE id = %s", (amount, b))
                    if rng.random() < 0.05:
                        cur.execute("UPDATE accounts SET branch = (branch + 1) %% 5 WHERE id = %s", (a,))
                    if rng.random() < 0.02:  # a primary-key update: the old key leaves, a new one comes
                        cur.execute("UPDATE accounts SET id = id + 100000 WHERE id = %s", (b,))
                        cur.execute("UPDATE accounts SET id = id - 100000 WHERE id = %s", (b + 100000,))
                    conn.commit()
                    self.commits += 1
                    time.sleep(self.pause)
        except BaseException as exc:  # noqa: BLE001  reported by __exit__
            self.error = exc
        finally:
            conn.close()


def only_truncate_triggers(db) -> bool:
    """A logically captured table (and each partition) carries mvlog's TRUNCATE trigger and no other."""
    return db.execute("SELECT count(*) FILTER (WHERE tgname <> 'mvlog$truncate'), count(*) FROM pg_trigger "
                      "WHERE tgname LIKE 'mvlog$%'")[0] == (0, db.execute(
                          "SELECT count(*) FROM mvlog.logs WHERE capture = 'logical'")[0][0]
                          + db.execute("SELECT count(*) FROM mvlog.log_partitions AS p JOIN mvlog.logs AS l "
                                       "ON l.table_oid = p.table_oid WHERE l.capture = 'logical'")[0][0])


def delta_total(project) -> int:
    spark = project.warehouse.spark
    df = spark.read.format("delta").load(project.config.view_location("balances"))
    return int(df.groupBy().sum("balance").collect()[0][0])


@pytest.fixture
def bank(db, make_project):
    db.execute(SCHEMA)
    project = make_project([{"table": "accounts", "capture": "logical"}, {"table": "branches", "capture": "logical"}],
                           VIEWS)
    project.apply()
    return project


@pytest.mark.slow
@pytest.mark.deep  # the main tier: the capture contract suite (visibility, held transactions), the soak under triggers
def test_refreshes_under_writers_are_exact_at_their_snapshot_and_lose_nothing(bank, db, monkeypatch):
    """A writer commits all the time, also between the refresh's snapshot and the capture's wait
    (the refresh pauses there). Each refresh's view holds whole transactions (the sum of balances
    is exact); transactions the snapshot did not see are applied by the next refresh, none lost.
    (With the stamp ignoring visibility, the transactions of the pause are lost: checked.)"""
    monkeypatch.setenv("MVLOG_PAUSE", "after_snapshot:0.6")
    with Transfers(db) as writer:
        for _ in range(3):
            results = refresh_ok(bank)
            assert {r.method for r in results.values()} <= {"fast", "fresh"}
            assert delta_total(bank) == TOTAL
        assert writer.commits > 20
    monkeypatch.delenv("MVLOG_PAUSE")
    refresh_ok(bank)
    assert_views_match(bank, VIEWS)
    assert only_truncate_triggers(db)


@pytest.mark.deep  # the main tier: the capture contract suite (transactions the stamp's snapshot does not see)
def test_transactions_committing_after_the_snapshot_are_the_next_refreshs(bank, db, monkeypatch):
    """Transfers committed while a refresh holds its snapshot (before it reads the WAL position it
    waits for): the capture writes them before the refresh stamps, but the snapshot does not see
    them, so this refresh leaves them (the sum stays exact) and the next applies them. A stamp
    that ignored visibility would consume their keys at a snapshot without their changes, and
    lose them for good (checked: this test fails then)."""
    db.execute("UPDATE accounts SET balance = balance WHERE id = 60")  # a change: the refresh stamps (not fresh)
    monkeypatch.setenv("MVLOG_PAUSE", "after_snapshot:1.5")
    refreshing = threading.Thread(target=lambda: refresh_ok(bank, ["balances"]))  # one unit: one snapshot
    refreshing.start()
    deadline = time.monotonic() + 60
    while not db.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                         "AND state = 'idle in transaction' AND query = 'SELECT pg_export_snapshot()'")[0][0]:
        assert time.monotonic() < deadline, "the refresh never took its snapshot"
        time.sleep(0.02)
    for a in range(1, 21):  # while it pauses: twenty transfers, from accounts 1-20 to 101-120
        db.execute("BEGIN; UPDATE accounts SET balance = balance - 7 WHERE id = %s; "
                   "UPDATE accounts SET balance = balance + 7 WHERE id = %s; COMMIT", (a, a + 100))
    refreshing.join(120)
    monkeypatch.delenv("MVLOG_PAUSE")
    assert delta_total(bank) == TOTAL
    moved = bank.warehouse.spark.read.format("delta").load(bank.config.view_location("balances"))
    assert moved.where("id <= 20 AND balance <> 100").count() == 0  # none of them in this refresh
    results = refresh_ok(bank)
    assert {r.method for r in results.values()} <= {"fast", "fresh"}
    assert_views_match(bank, VIEWS)


@pytest.mark.slow
def test_a_capture_killed_mid_batch_again_and_again_loses_nothing(bank, db, tmp_path):
    """``mvlog capture`` SIGKILLed right after committing a batch (its position not recorded, the
    slot not advanced), and at random moments, under a writer: the views converge exactly."""
    config = tmp_path / "mvlog.yaml"  # the project's own file (make_project wrote it there)
    env = {**os.environ, "TZ": "UTC"}
    with Transfers(db, pause=0.001):
        for round_ in range(6):
            time.sleep(0.3)
            if round_ % 2 == 0:  # killed by itself, in the middle of a pass
                killed = subprocess.run(
                    [sys.executable, "-m", "mvlog", "-q", "-c", str(config), "capture", "--batch-rows", "20"],
                    env={**env, "MVLOG_FAULT": "capture_batch"}, capture_output=True, text=True, timeout=120)
                assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
            else:  # killed from outside, wherever it is, once it has recorded a batch (under load its
                # start alone can take seconds)
                before = db.execute("SELECT keys_written FROM mvlog.capture_state")[0][0]
                running = subprocess.Popen(
                    [sys.executable, "-m", "mvlog", "-q", "-c", str(config), "capture", "--batch-rows", "7",
                     "--interval", "0.05"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                deadline = time.monotonic() + 60
                while (db.execute("SELECT keys_written FROM mvlog.capture_state")[0][0] == before
                       and time.monotonic() < deadline and running.poll() is None):
                    time.sleep(0.1)
                time.sleep(random.random())
                running.kill()
                running.wait(30)
                assert db.execute("SELECT keys_written FROM mvlog.capture_state")[0][0] > before
    results = refresh_ok(bank)
    assert {r.method for r in results.values()} <= {"fast", "fresh"}
    assert_views_match(bank, VIEWS)


@pytest.mark.slow
def test_switching_capture_kinds_under_a_writer_is_exact(db, make_project):
    db.execute(SCHEMA)
    triggers = make_project(["accounts", "branches"], VIEWS)
    triggers.apply()
    with Transfers(db):
        time.sleep(0.5)
        logical = make_project([{"table": "accounts", "capture": "logical"}, "branches"], VIEWS)
        logical.apply()  # accounts: triggers off, decoded from the switch on
        assert db.execute("SELECT array_agg(tgname::text) FROM pg_trigger WHERE tgrelid = 'accounts'::regclass "
                          "AND tgname LIKE 'mvlog$%'") == [(["mvlog$truncate"],)]
        refresh_ok(logical)
        time.sleep(0.5)
        back = make_project(["accounts", "branches"], VIEWS)
        back.apply()  # triggers again; decoded rows of transactions before the switch still arrive
        assert db.execute("SELECT capture FROM mvlog.logs WHERE table_name = 'accounts'") in ([("handover",)],
                                                                                              [("trigger",)])
        refresh_ok(back)
        time.sleep(0.5)
    results = refresh_ok(back)
    assert {r.method for r in results.values()} <= {"fast", "fresh"}
    assert_views_match(back, VIEWS)
    # Every decoded row is stamped now: the next apply finishes the hand-over and drops the slot.
    back.apply()
    assert db.execute("SELECT capture FROM mvlog.logs ORDER BY table_name") == [("trigger",), ("trigger",)]
    assert db.execute("SELECT count(*) FROM pg_replication_slots WHERE database = current_database()") == [(0,)]
    assert db.execute("SELECT count(*) FROM pg_publication") == [(0,)]
    db.execute("UPDATE accounts SET balance = balance + 1 WHERE id = 1")
    refresh_ok(back)
    assert_views_match(back, VIEWS)


def test_status_and_metrics_show_the_slot_and_a_lost_slot_makes_views_complete(bank, db):
    db.execute("UPDATE accounts SET balance = balance + 5 WHERE id < 10")
    captures = bank.status()["captures"]
    assert len(captures) == 1 and captures[0]["wal_status"] in ("reserved", "extended")
    assert captures[0]["lag_bytes"] > 0 and captures[0]["retained_bytes"] > 0
    assert {log["capture"] for log in bank.status()["logs"]} == {"logical"}
    metrics = SchedulerMetrics()
    metrics.update_gauges(bank.config.views, bank.freshness, bank.status_reader, force=True)
    labels = {"slot": captures[0]["slot"]}
    assert metrics.registry.get_sample_value("mvlog_capture_retained_bytes", labels) > 0
    assert metrics.registry.get_sample_value("mvlog_capture_lag_bytes", labels) > 0
    assert metrics.registry.get_sample_value("mvlog_capture_slot_lost", labels) == 0
    refresh_ok(bank)
    # PostgreSQL invalidating the slot (max_slot_wal_keep_size) is, to mvlog, a slot that lost WAL:
    slot = captures[0]["slot"]
    db.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    db.execute("UPDATE accounts SET balance = balance - 5 WHERE id < 10")  # never decoded
    first = bank.refresh()  # refresh: fast views cannot be fast now (as after a TRUNCATE or DDL): said, not done
    assert all(r.error and "lost WAL" in r.error for r in first), [(r.view, r.method, r.error) for r in first]
    statuses = {v["name"]: v for v in bank.status()["views"]}
    assert all("lost WAL" in (v["needs_complete_reason"] or "") for v in statuses.values()), statuses
    assert all("lost WAL" in r.error for r in bank.refresh())  # until it is done completely, as asked
    results = refresh_ok(bank, complete=True)
    assert {r.method for r in results.values()} == {"complete"}, {r.view: r.reason for r in results.values()}
    assert_views_match(bank, VIEWS)
    db.execute("UPDATE accounts SET balance = balance + 1 WHERE id = 3")  # the new slot decodes it
    results = refresh_ok(bank)
    assert {r.method for r in results.values()} <= {"fast", "fresh"}
    assert_views_match(bank, VIEWS)


def test_drop_of_the_last_logical_log_drops_the_slot_and_publication(bank, db):
    bank.drop_log("branches", cascade=True)
    assert db.execute("SELECT count(*) FROM pg_replication_slots WHERE database = current_database()") == [(1,)]
    bank.drop_log("accounts", cascade=True)
    assert db.execute("SELECT count(*) FROM pg_replication_slots WHERE database = current_database()") == [(0,)]
    assert db.execute("SELECT count(*) FROM pg_publication") == [(0,)]
    assert db.execute("SELECT count(*) FROM mvlog.capture_state") == [(0,)]


def test_a_table_without_its_key_as_replica_identity_is_refused_in_one_sentence(db, make_project):
    db.execute(SCHEMA)
    db.execute("ALTER TABLE accounts REPLICA IDENTITY FULL")
    project = make_project([{"table": "accounts", "capture": "logical"}], VIEWS[:1])
    with pytest.raises(ConfigError, match=r"table public\.accounts has REPLICA IDENTITY FULL; capture: logical "
                                          r"needs its primary key"):
        project.apply()
    assert db.execute("SELECT count(*) FROM pg_replication_slots WHERE database = current_database()") == [(0,)]


def test_a_role_without_replication_is_refused_in_one_sentence(db, make_project, pg):
    db.execute(SCHEMA)
    db.execute("CREATE ROLE mvlog_norepl LOGIN PASSWORD 'app-secret'; ALTER TABLE accounts OWNER TO mvlog_norepl; "
               "ALTER TABLE branches OWNER TO mvlog_norepl")
    db.execute(f'GRANT CREATE ON DATABASE "{db.name}" TO mvlog_norepl')
    try:
        dsn = pg.dsn(db.name, user="mvlog_norepl", password="app-secret")
        path = make_project([{"table": "accounts", "capture": "logical"}], VIEWS[:1]).config.base_dir / "mvlog.yaml"
        doc = yaml.safe_load(path.read_text())
        doc["source"]["dsn"] = dsn
        path.write_text(yaml.safe_dump(doc))
        with Project(load_config(path)) as project, pytest.raises(ConfigError, match="REPLICATION attribute"):
            project.apply()
    finally:
        db.execute('DROP OWNED BY mvlog_norepl')
        try:
            db.execute("DROP ROLE mvlog_norepl")
        except psycopg2.Error:
            pass


EVERY_WRITE = """
CREATE TABLE parents (id int PRIMARY KEY, name text);
CREATE TABLE kids (id int PRIMARY KEY, parent int REFERENCES parents ON DELETE CASCADE, toy text);
INSERT INTO parents SELECT g, 'p' || g FROM generate_series(1, 10) g;
INSERT INTO kids SELECT g, 1 + g % 10, 'toy' || g FROM generate_series(1, 30) g;
"""
KID_VIEWS = [
    {"name": "kids_of", "refresh": "fast",
     "query": "SELECT k.id, k.toy, p.name FROM kids k JOIN parents p ON p.id = k.parent"},
    {"name": "toys", "refresh": "fast", "query": "SELECT parent, count(*) AS n FROM kids GROUP BY parent"},
]


def test_every_kind_of_write_is_captured_as_the_triggers_capture_it(db, make_project):
    """ON CONFLICT, MERGE, COPY, a cascade, key updates, rolled-back savepoints and transactions,
    a transaction open across a refresh, a column added to a captured table, TRUNCATE."""
    db.execute(EVERY_WRITE)
    project = make_project(["parents", "kids"], KID_VIEWS, spark_mode="logical")
    project.apply()
    db.execute("INSERT INTO kids VALUES (1, 2, 'upserted'), (99, 3, 'new') "
               "ON CONFLICT (id) DO UPDATE SET toy = excluded.toy, parent = excluded.parent")
    db.execute("MERGE INTO kids k USING (VALUES (2, 'merged'), (98, 'merged-new')) AS s(id, toy) ON k.id = s.id "
               "WHEN MATCHED THEN UPDATE SET toy = s.toy WHEN NOT MATCHED THEN INSERT VALUES (s.id, 4, s.toy)")
    with db.connect() as conn, conn.cursor() as cur:
        cur.copy_expert("COPY kids FROM STDIN", io.StringIO("50\t5\tcopied\n51\t6\tcopied\n"))
    db.execute("DELETE FROM parents WHERE id = 7")  # its kids go by the cascade
    db.execute("UPDATE kids SET id = id + 1000 WHERE parent = 8")  # key updates
    db.execute("BEGIN; UPDATE kids SET toy = 'kept' WHERE id = 3; SAVEPOINT s; DELETE FROM kids WHERE id = 4; "
               "ROLLBACK TO SAVEPOINT s; COMMIT")
    db.execute("BEGIN; DELETE FROM kids WHERE id = 5; ROLLBACK")
    db.execute("ALTER TABLE kids ADD COLUMN colour text")  # not published: decoding goes on
    db.execute("UPDATE kids SET colour = 'red', toy = 'painted' WHERE id = 6")
    held = db.connect()
    with held.cursor() as cur:
        cur.execute("UPDATE kids SET toy = 'held' WHERE id = 9")  # open across the refresh
        results = refresh_ok(project)
        assert {r.method for r in results.values()} <= {"fast", "fresh"}
        assert_views_match(project, KID_VIEWS)
    held.commit()
    held.close()
    results = refresh_ok(project)
    assert {r.method for r in results.values()} <= {"fast", "fresh"}
    assert_views_match(project, KID_VIEWS)
    assert db.execute("SELECT toy FROM kids WHERE id = 9") == [("held",)]
    db.execute("TRUNCATE kids")
    db.execute("INSERT INTO kids VALUES (1, 1, 'after')")
    refused = project.refresh()
    assert all(r.error and "was truncated" in r.error for r in refused)
    refresh_ok(project, complete=True)
    assert_views_match(project, KID_VIEWS)
    assert only_truncate_triggers(db)


def test_the_scheduler_captures_beside_its_refreshes(db, make_project):
    """``mvlog schedule``'s capture thread: passes until the scheduler stops."""
    db.execute(SCHEMA)
    project = make_project([{"table": "accounts", "capture": "logical"}], [{**VIEWS[0], "freshness": "1h"}])
    project.apply()
    lines: list[str] = []
    scheduler = Scheduler(project, lines.append)
    before = db.execute("SELECT keys_written FROM mvlog.capture_state")[0][0]
    capturing = threading.Thread(target=scheduler._capture)
    capturing.start()
    db.execute("UPDATE accounts SET balance = balance + 1 WHERE id <= 50")
    deadline = time.monotonic() + 30
    while db.execute("SELECT keys_written FROM mvlog.capture_state")[0][0] < before + 50:
        assert time.monotonic() < deadline, lines
        time.sleep(0.1)
    scheduler.stop.set()
    capturing.join(30)
    assert not capturing.is_alive() and "capturing: logical decoding into the logs" in lines
