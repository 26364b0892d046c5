"""A Source's inspection (the compiler's describes, ``apply``'s checks, ``explain``): a transaction
that changes nothing, with JIT off in it — a describe evaluates no row, yet PostgreSQL compiles a
costly query's expressions for it (seconds a TPC-DS view at SF 1, on every refresh's check)."""

from __future__ import annotations

import pytest

from mvlog.postgres.source import Source

pytestmark = pytest.mark.integration


def test_an_inspection_runs_without_jit_and_leaves_the_session_s_setting_alone(db):
    source = Source(db.dsn)
    source.query("SET jit = on")  # the session's own setting, as a server's default would be
    with source.inspection() as cur:
        cur.execute("SHOW jit")
        assert cur.fetchone() == ("off",)
        cur.execute("CREATE TEMP TABLE inspected (x int)")  # rolled back with the setting
    assert source.query("SHOW jit") == [("on",)]
    assert source.query("SELECT to_regclass('pg_temp.inspected')") == [(None,)]
