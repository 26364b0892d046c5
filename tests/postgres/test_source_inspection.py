"""JIT off where mvlog only describes and plans: a Source's inspection (the compiler's describes on
every refresh's check, ``explain``), and every describe wherever it runs (``apply``'s registration, a
complete refresh's signature). A describe evaluates no row, yet PostgreSQL compiles a costly query's
expressions for it (seconds a TPC-DS view at SF 1)."""

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


def _explained(conn) -> list[str]:
    """The plans auto_explain sent as notices since the last call (and forget them)."""
    plans = [notice for notice in conn.notices if "Query Text:" in notice]
    conn.notices.clear()
    return plans


def test_a_describe_compiles_nothing_with_jit_in_any_transaction_and_leaves_its_setting(db):
    db.execute("CREATE TABLE t (id int PRIMARY KEY, a int, b numeric)")
    source = Source(db.dsn)
    query = "SELECT a, sum(b * 2 + a) AS s, count(*) FILTER (WHERE b > 1) AS n FROM t GROUP BY a"
    with source.transaction() as cur:  # a transaction of the caller's, JIT on at any cost
        cur.execute("SELECT pg_jit_available()")
        assert cur.fetchone() == (True,), "this server cannot JIT: the test would show nothing"
        for setting in ("LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
                        "SET auto_explain.log_level = notice", "SET jit = on", "SET jit_above_cost = 0",
                        "SET jit_optimize_above_cost = 0", "SET jit_inline_above_cost = 0"):
            cur.execute(setting)
        conn = cur.connection
        _explained(conn)
        cur.execute(f"SELECT * FROM ({query}) AS q LIMIT 0")  # the describe's statement, by hand
        assert any("JIT:" in plan for plan in _explained(conn))  # so JIT would compile it

        described = source.describe_query(cur, query)
        plans = _explained(conn)
        assert [column[0] for column in described] == ["a", "s", "n"]
        assert plans and not any("JIT:" in plan for plan in plans)
        cur.execute("SHOW jit")
        assert cur.fetchone() == ("on",)  # the transaction's setting, as it was
