"""`mvlog schedule` reaching PostgreSQL through a proxy that stops forwarding for a minute without
closing a socket (a partition, a NAT or load balancer that forgot its connections, a hung proxy),
then forwards new connections while the old ones stay silent: with logical capture and a writer,
a stall in the middle of a refresh — which stalls the capture's stream and the scheduler's idle
connections with it. It never exits, every view is refreshed again within two minutes of the
healing and equals its query, the stream resumes from its recorded position, and SIGTERM during
a stall ends it within 30 s. The main tier's stall lasts 25 s against bounds of 10 s set in
``source.timeouts`` (the same code paths, a third of the waiting); the deep tier's last a minute
against the default bounds, and add a stall while the scheduler waits between refreshes, with each
capture kind."""

from __future__ import annotations

import pytest
from conftest import new_database
from schedulers import schedule_through_stalls

pytestmark = pytest.mark.integration

TIGHT = {"keepalive": "10s", "stream": "10s", "statement": "20s"}  # the defaults: 30 s, 30 s, 60 s


def test_the_scheduler_and_its_capture_carry_on_through_stalls(restartable_pg, tmp_path, connect_engine):
    with new_database(restartable_pg) as db:
        lines = schedule_through_stalls(restartable_pg, db, tmp_path, {"remote": connect_engine.remote}, "logical",
                                        ["refresh"], timeouts=TIGHT, stall_seconds=25.0)
    # The stall is named as what it is, with the bound that noticed it (which call noticed first, and
    # so which line says it, depends on where the refresh was when the proxy went silent).
    said = [line for line in lines if "status=failed" in line or "unavailable" in line or "capture:" in line]
    assert any("PostgreSQL stopped answering" in line and "source.timeouts." in line for line in said), said
    assert any("capture: PostgreSQL stopped answering" in line for line in lines), lines  # the stream noticed
    assert any("capture: resumed after" in line for line in lines), lines


@pytest.mark.deep  # main tier: test_the_scheduler_and_its_capture_carry_on_through_stalls (a shorter stall mid-refresh)
@pytest.mark.parametrize("capture", ["trigger", "logical"])
def test_the_scheduler_carries_on_through_a_stall_while_idle_and_one_mid_refresh(restartable_pg, tmp_path,
                                                                                  connect_engine, capture):
    with new_database(restartable_pg) as db:
        schedule_through_stalls(restartable_pg, db, tmp_path, {"remote": connect_engine.remote}, capture,
                                ["idle", "refresh"])
