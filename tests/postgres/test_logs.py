"""The log triggers: what they write, and that their plans stay linear in the statement's size."""

from __future__ import annotations

import re

import pytest

from mvlog.postgres.logs import LOCK_NAMESPACE

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


def test_apply_recreates_trigger_functions_of_an_older_mvlog(db, make_project):
    """A log whose trigger functions differ from what this mvlog renders (an upgrade changed a
    body) is recreated by ``apply``; a current one is left alone."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t VALUES (1, 0)")
    project = make_project(["t"], [])
    assert project.apply().logs_created == ["public.t"]
    assert make_project(["t"], []).apply().logs_unchanged == ["public.t"]
    log = db.execute("SELECT log_name FROM mvlog.logs")[0][0]
    fn = f'mvlog."{log}$update"'
    # The body an older version installed: logs nothing.
    db.execute(f"CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER "
               "SET search_path = pg_catalog, pg_temp AS 'BEGIN RETURN NULL; END'")
    assert make_project(["t"], []).apply().logs_created == ["public.t"]
    # An older version's index on snaptime$$ is dropped (the log has no index).
    db.execute(f'CREATE INDEX "{log}$snaptime" ON mvlog."{log}" ("snaptime$$")')
    assert make_project(["t"], []).apply().logs_created == ["public.t"]
    assert db.execute(f"SELECT count(*) FROM pg_index WHERE indrelid = 'mvlog.\"{log}\"'::regclass") == [(0,)]
    db.execute("UPDATE t SET v = 1")
    assert db.execute(f'SELECT id, "dmltype$$" FROM mvlog."{log}"') == [(1, "U")]


def test_the_update_trigger_logs_key_changes_for_composite_keys(db, make_project):
    db.execute("CREATE TABLE t (a int, b text, v int, PRIMARY KEY (a, b));"
               "INSERT INTO t VALUES (1, 'x', 0), (1, 'y', 0), (2, 'x', 0)")
    make_project(["t"], []).apply()
    log = db.execute("SELECT log_name FROM mvlog.logs")[0][0]
    db.execute("UPDATE t SET b = 'z', v = 1 WHERE a = 1 AND b = 'x'; UPDATE t SET v = 2 WHERE a = 2;"
               "UPDATE t SET a = a + 1 WHERE b = 'x' OR b = 'y'")
    rows = db.execute(f'SELECT a, b, "dmltype$$", "old_new$$" FROM mvlog."{log}" ORDER BY 1, 2, 3')
    assert rows == [
        (1, "x", "D", "O"),  # first statement: (1,x) -> (1,z)
        (1, "y", "D", "O"),  # third: (1,y) -> (2,y)
        (1, "z", "I", "N"),
        (2, "x", "D", "O"),  # third: (2,x) -> (3,x)
        (2, "x", "U", "N"),  # second
        (2, "y", "I", "N"),
        (3, "x", "I", "N"),
    ]


def test_a_stamp_frees_its_stamping_locks_before_its_session_closes(db, make_project, closes_late):
    """A stamp's session advisory locks (one per log) are free once the stamp is over, though the
    server hears of its session's close late (under load): the next stamp, of a refresh or the
    scheduler, does not wait on them."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v int)")
    project = make_project(["t"], [])
    project.apply()
    closes_late(project.source)
    with project.logs.stamp(list(project.logs.registered().values())):
        pass
    held = db.execute("SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
                      "WHERE l.locktype = 'advisory' AND l.classid = %s::oid AND d.datname = current_database()",
                      (LOCK_NAMESPACE,))
    assert held == [(0,)]
