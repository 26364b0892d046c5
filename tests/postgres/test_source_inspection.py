"""JIT off where mvlog only describes and plans: a Source's inspection (the compiler's describes on
every refresh's check, ``explain``), ``apply``'s registration. A describe evaluates no row, yet
PostgreSQL compiles a costly query's expressions for it (seconds a TPC-DS view at SF 1)."""

from __future__ import annotations

import pytest

from mvlog.pipeline.apply import Registration
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


def test_apply_s_registration_describes_and_plans_its_views_without_jit(db, make_project):
    db.execute("CREATE TABLE t (id int PRIMARY KEY, a int)")
    project = make_project(["t"], [{"name": "v", "query": "SELECT a, count(*) AS n FROM t GROUP BY a"}])
    with project.source.transaction() as cur:
        cur.execute("SET jit = on")
        project.registrar.register(cur, Registration())
        cur.execute("SHOW jit")
        assert cur.fetchone() == ("off",)  # SET LOCAL: gone with the transaction
    assert project.source.query("SHOW jit") == [("on",)]
