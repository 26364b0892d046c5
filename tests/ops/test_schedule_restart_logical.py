"""`mvlog schedule` with ``capture: logical`` outlives its source restarting (``pg_ctl restart -m
fast``), crashing (``-m immediate``: the postmaster killed, crash recovery) and failing over to a
standby without the replication slot (PostgreSQL below 17): the stream reconnects and resumes from
the capture's recorded position, the refreshes carry on, nothing is lost (the views equal their
queries afterwards), and no refresh is left running. The missing slot is made again and said, and
the views (refresh: force) refresh completely once."""

from __future__ import annotations

import pytest
from conftest import new_database
from schedulers import fresh_query, schedule_through_restarts

pytestmark = pytest.mark.integration


def test_the_scheduler_and_its_capture_ride_out_a_restart_a_crash_and_a_failover(restartable_pg, tmp_path,
                                                                                  connect_engine):
    cluster = restartable_pg
    with new_database(cluster) as db:
        lines = schedule_through_restarts(cluster, db, tmp_path, {"remote": connect_engine.remote}, "logical",
                                          ["fast", "immediate", "failover"])
        completes = fresh_query(db.dsn, "SELECT view_name, reason FROM mvlog.refresh_history WHERE method = 'complete' "
                               "AND status = 'succeeded' AND reason LIKE '%lost WAL%'")
    # The stream was cut by each restart and resumed (it writes as soon as the writer does).
    assert sum("capture: resumed after" in line for line in lines) >= 2, lines
    assert sum("capture: the replication slot was missing" in line for line in lines) == 1, lines
    assert {view for view, _ in completes} == {"copy", "sums", "moved"}, completes

