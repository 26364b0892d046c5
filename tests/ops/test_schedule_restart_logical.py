"""`mvlog schedule` with ``capture: logical`` outlives its source restarting (``pg_ctl restart -m
fast``) twice and crashing once (``-m immediate``: the postmaster killed, crash recovery): the
stream reconnects and resumes from the capture's recorded position, the refreshes carry on, nothing
is lost (the views equal their queries afterwards), and no refresh is left running."""

from __future__ import annotations

import pytest
from conftest import new_database
from schedulers import schedule_through_restarts

from mvlog.postgres.pgtemp import TempPostgres

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster():
    with TempPostgres(password="pg-secret-4711") as restarted:
        yield restarted


def test_the_scheduler_and_its_capture_ride_out_restarts_and_a_crash(cluster, tmp_path, connect_engine):
    with new_database(cluster) as db:
        lines = schedule_through_restarts(cluster, db, tmp_path, {"remote": connect_engine.remote}, "logical",
                                          ["fast", "immediate", "fast"])
    # The stream was cut by each restart and resumed (it writes as soon as the writer does).
    assert sum("capture: resumed after" in line for line in lines) >= 2, lines
