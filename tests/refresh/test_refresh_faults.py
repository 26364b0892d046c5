"""Crash safety: a refresh SIGKILLed at any point leaves a readable view, and the next one converges."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import yaml
from conftest import SUBPROCESS_SPARK, assert_views_match

from mvlog.config import load_config
from mvlog.faults import POINTS
from mvlog.project import Project

pytestmark = pytest.mark.integration

SCHEMA = """
CREATE TABLE customers (id int PRIMARY KEY, name text, region int);
CREATE TABLE orders (id int PRIMARY KEY, customer_id int, amount numeric(10,2), status text);
INSERT INTO customers SELECT g, 'c' || g, g % 3 FROM generate_series(1, 20) g;
INSERT INTO orders SELECT g, 1 + g % 20, g, CASE WHEN g % 2 = 0 THEN 'open' ELSE 'done' END \
FROM generate_series(1, 200) g;
"""
VIEWS = [
    {"name": "open_orders", "refresh": "fast", "query": "SELECT id, amount FROM orders WHERE status = 'open'"},
    {"name": "order_names", "refresh": "fast",
     "query": "SELECT o.id, c.name, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id"},
    {"name": "by_region", "refresh": "fast",
     "query": "SELECT c.region, count(*) AS n, sum(o.amount) AS total, max(o.amount) AS hi "
              "FROM orders o JOIN customers c ON c.id = o.customer_id GROUP BY c.region"},
    {"name": "region_sums", "refresh": "fast",  # kept by deltas: its group table is written with the key map
     "query": "SELECT c.region, count(*) AS n, sum(o.amount) AS total, avg(o.amount) AS mean "
              "FROM orders o JOIN customers c ON c.id = o.customer_id GROUP BY c.region"},
    {"name": "top_open", "refresh": "fast",  # top-N: its margin is written with the key map
     "query": "SELECT o.id, c.name, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id "
              "WHERE o.status = 'open' ORDER BY amount DESC, id LIMIT 3"},
]


def change(db, round_: int) -> None:
    db.execute("UPDATE orders SET status = CASE status WHEN 'open' THEN 'done' ELSE 'open' END, amount = amount + 1 "
               "WHERE id %% 7 = %s", (round_ % 7,))
    db.execute("UPDATE customers SET region = (region + 1) %% 3 WHERE id = %s", (1 + round_ % 20,))
    db.execute("UPDATE orders SET id = id + 1000 WHERE id = (SELECT min(id) FROM orders WHERE id < 1000)")
    db.execute("DELETE FROM orders WHERE id = (SELECT max(id) FROM orders WHERE id < 1000)")
    db.execute("INSERT INTO orders VALUES (%s, %s, 5.55, 'open')", (5000 + round_, 1 + round_ % 20))


# The points where a killed refresh leaves something different behind: its stamp committed, a
# Delta write half done, the Delta commit without the catalog's record, the record without the purge.
# The others (before the stamp, between snapshot and stamp, after the read) leave what one of
# these leaves; they run in the deep tier.
LEAVING_STATE = ("after_stamp", "during_merge", "after_delta_commit", "after_record")


@pytest.mark.slow
def test_sigkill_where_a_refresh_leaves_state_then_refresh_converges(db, tmp_path, connect_engine):
    kill_and_recover(db, tmp_path, connect_engine, LEAVING_STATE)


@pytest.mark.slow
@pytest.mark.deep
def test_sigkill_at_every_other_point_then_refresh_converges(db, tmp_path, connect_engine):
    kill_and_recover(db, tmp_path, connect_engine, [p for p in POINTS if p not in (*LEAVING_STATE, "capture_batch")])


def kill_and_recover(db, tmp_path, connect_engine, points) -> None:
    """Per point: change, a refresh killed there, more changes, a refresh that converges."""
    db.execute(SCHEMA)
    config = tmp_path / "mvlog.yaml"
    config.write_text(yaml.safe_dump({
        "source": {"dsn": db.dsn}, "warehouse": str(tmp_path / "wh"),
        "spark": SUBPROCESS_SPARK,
        "logs": [{"table": "customers"}, {"table": "orders"}], "views": VIEWS,
    }))
    project = Project(load_config(config))
    project.apply()
    try:
        for round_, point in enumerate(points):
            change(db, round_)
            env = {**os.environ, "MVLOG_FAULT": point, "TZ": "UTC"}
            if point != "during_merge":
                # Killed between Spark operations: the process runs them on the test session's
                # Connect server (no JVM start of its own). Killed in the MERGE: on a Spark of
                # its own, so that the MERGE dies with it (a Connect server would finish it).
                env["SPARK_REMOTE"] = connect_engine.remote
            killed = subprocess.run([sys.executable, "-m", "mvlog", "-q", "-c", str(config), "refresh"],
                                    env=env, capture_output=True, text=True, timeout=600)
            assert killed.returncode == -signal.SIGKILL, (point, killed.stderr[-2000:])
            change(db, round_ + 10)  # writers go on while the refresh is down
            # ... and delete the order the killed refresh wrote (if it committed to Delta): the next
            # refresh must take it out of every view, though the catalog never recorded it there.
            db.execute("DELETE FROM orders WHERE id = %s", (5000 + round_,))
            interrupted = db.execute(
                "SELECT count(*) FROM mvlog.refresh_history WHERE status = 'running'")[0][0]
            # A view's history row exists from just after the stamp: later kills leave it "running".
            assert (interrupted >= 1) == (point not in ("before_stamp", "before_snapshot", "after_snapshot",
                                                                 "after_stamp")), point
            results = project.refresh()
            assert [r.error for r in results] == [None] * len(VIEWS), (point, results)
            assert {r.method for r in results} <= {"fast", "fresh"}, point
            assert_views_match(project, VIEWS)
            assert db.execute("SELECT count(*) FROM mvlog.refresh_history WHERE status = 'running'")[0][0] == 0
            # Every log row was consumed by every view, and purged.
            for log in project.logs.registered().values():
                assert db.execute(f'SELECT count(*) FROM mvlog."{log.log_name}"')[0][0] == 0
    finally:
        project.close()


def test_a_view_another_session_is_refreshing_is_waited_for_then_skipped(db, make_project):
    db.execute(SCHEMA)
    project = make_project(["customers", "orders"], VIEWS[:1])
    project.apply()
    change(db, 1)  # something to apply: a view with nothing would be recorded fresh, without its lock
    holder = db.connect(autocommit=True)
    with holder.cursor() as cur:  # what a running refresh holds
        cur.execute("SELECT pg_backend_pid()")
        backend = cur.fetchone()[0]
        cur.execute("SELECT pg_advisory_lock(%s, hashtext('open_orders'))", (0x6D767677,))
    started = time.monotonic()
    (result,) = project.refresh(wait=1.5)
    assert time.monotonic() - started >= 1.5
    assert (result.status, result.error, result.method) == ("skipped", None, None)
    assert result.reason.startswith(f"being refreshed by PostgreSQL backend {backend} from 127.0.0.1 since "), \
        result.reason
    assert result.to_json()["status"] == "skipped"
    # The holder finishes while this refresh waits: it takes the view then.
    threading.Timer(1.0, holder.close).start()
    (result,) = project.refresh(wait=30)
    assert (result.status, result.method) == ("succeeded", "fast"), result


def test_a_retried_delta_commit_is_not_applied_twice(db, make_project):
    db.execute(SCHEMA)
    project = make_project(["customers", "orders"], VIEWS[:1])
    project.apply()
    warehouse = project.warehouse
    location = project.config.view_location("open_orders")
    spark = warehouse.spark
    before = spark.read.format("delta").load(location).count()
    df = spark.createDataFrame([(999999, 1.5, True, 999999)],
                               "id int, amount double, _mvlog_present boolean, _mvlog_key_0 int")
    df = df.selectExpr("_mvlog_key_0", "id", "cast(amount as decimal(10,2)) as amount", "_mvlog_present")
    txn = ("mvlog:test-retry", 42)  # a fresh app id: the build recorded a far higher version for mvlog:open_orders
    first = warehouse.merge(location, warehouse.stage(df), ("id",), {"test": 1}, txn)
    changed = df.selectExpr("_mvlog_key_0", "id", "amount + 1 as amount", "_mvlog_present")
    again = warehouse.merge(location, warehouse.stage(changed), ("id",), {"test": 2}, txn)
    rows = spark.read.format("delta").load(location).where("id = 999999").collect()
    assert first.rows_inserted == 1 and again.rows_updated == 0
    assert [float(r["amount"]) for r in rows] == [1.5]
    assert spark.read.format("delta").load(location).count() == before + 1
