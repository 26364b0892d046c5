"""`mvlog schedule` outlives its source restarting: ``pg_ctl restart -m fast`` twice, then a stop of 8
s, under a running scheduler with a writer, the logs filled by triggers. The scheduler stays up
(waiting the stop out, saying so once and when it is back), every view is
refreshed past each restart within its target plus its retry time, no refresh is left running, and
every view equals its query afterwards. (Logical capture, and a crash: test_schedule_restart_logical.)

Deep tier: the main tier has the same scheduler and writer ride out a restart, a crash and a
failover with logical capture (test_schedule_restart_logical), and sessions cut under trigger logs
(tests/postgres/test_source_reconnect.py, tests/cli/test_connection_lost.py)."""

from __future__ import annotations

import pytest
from conftest import new_database
from schedulers import schedule_through_restarts

pytestmark = [pytest.mark.integration, pytest.mark.deep]


def test_the_scheduler_rides_out_two_restarts_and_a_stop_with_trigger_capture(restartable_pg, tmp_path, connect_engine):
    cluster = restartable_pg
    with new_database(cluster) as db:
        lines = schedule_through_restarts(cluster, db, tmp_path, {"remote": connect_engine.remote}, "trigger",
                                          ["fast", "fast", "outage"])
    away = [line for line in lines if "PostgreSQL is unavailable" in line]
    back = [line for line in lines if "PostgreSQL is back after" in line]
    assert len(away) == len(back) >= 1, lines  # the stop, at least: said once, and its end
    assert all("tries again every 1-30 s" in line for line in away), away
