"""The log triggers: what they write, and that their plans stay linear in the statement's size."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.integration


def trigger_plans(conn) -> list[str]:
    """Plans auto_explain reported for the log triggers' INSERTs since the last call."""
    text = "\n".join(conn.notices)
    conn.notices.clear()
    return [plan for plan in re.split(r"(?=Query Text:)", text) if "mlog$" in plan.split("\n", 1)[0]]


def test_a_large_update_after_a_small_one_in_one_session_is_planned_for_its_size(db, make_project):
    """PL/pgSQL caches the trigger statement's plan per session. Planned for a one-row
    transition table, the key-changing check becomes a nested loop over both transition
    tables: quadratic in the rows of every later UPDATE of the session (a 20k-row UPDATE took
    56 s instead of 0.35 s, measured by benchmarks/log_overhead.py)."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t SELECT g, 0 FROM generate_series(1, 3000) g")
    make_project(["t"], []).apply()
    conn = db.connect(autocommit=True)
    with conn.cursor() as cur:
        cur.execute("LOAD 'auto_explain'")
        cur.execute("SET auto_explain.log_min_duration = 0")
        cur.execute("SET auto_explain.log_nested_statements = on")
        cur.execute("SET client_min_messages = log")
        cur.execute("UPDATE t SET v = 1 WHERE id = 1")
        assert len(trigger_plans(conn)) == 1
        cur.execute("UPDATE t SET v = v + 1")
        (plan,) = trigger_plans(conn)
        assert "Nested Loop" not in plan, plan
        cur.execute("UPDATE t SET id = id + 10000 WHERE id <= 1500")  # a key update: old keys D, new keys I
        (plan,) = trigger_plans(conn)
        assert "Nested Loop" not in plan, plan
    conn.close()
    log = db.execute("SELECT log_name FROM mvlog.logs")[0][0]
    counts = dict(db.execute(f'SELECT "dmltype$$", count(*) FROM mvlog."{log}" GROUP BY 1'))
    assert counts == {"U": 1 + 3000, "D": 1500, "I": 1500}
