"""Simple views (SELECT ... FROM one logged table [WHERE ...]) against real PostgreSQL, Spark and Delta."""

from __future__ import annotations

import re
import time

import psycopg2
import pytest
from conftest import (
    assert_view_matches,
    assert_views_match,
    examples,
    refresh_ok,
    stats_after,
    stats_before,
    varied,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from mvlog.errors import ConfigError
from mvlog.model import SENTINEL_TIME

pytestmark = pytest.mark.integration

ITEMS = """
CREATE TABLE items (
    id    integer PRIMARY KEY,
    grp   integer NOT NULL,
    qty   integer,
    price numeric(10,2),
    label text,
    flag  boolean NOT NULL DEFAULT true
);
"""

SIMPLE_VIEWS = [
    {"name": "v_all", "refresh": "fast", "query": "SELECT * FROM items"},
    {"name": "v_filtered", "refresh": "fast",
     "query": "SELECT id, qty * price AS total, upper(label) AS ulabel, grp FROM items WHERE flag AND qty > 2"},
    {"name": "v_nokey", "refresh": "fast",
     "query": "SELECT i.label, i.price, coalesce(i.qty, -1) AS q FROM public.items AS i WHERE i.grp IN (1, 2)"},
]


def check_all(project, views=SIMPLE_VIEWS) -> None:
    assert_views_match(project, views)


# -- random DML ---------------------------------------------------------------------------

ids = st.integers(min_value=1, max_value=25)
rows = st.fixed_dictionaries({
    "grp": st.integers(0, 3),
    "qty": st.none() | st.integers(-2, 9),
    "price": st.none() | st.decimals(min_value=-1000, max_value=1000, places=2, allow_nan=False, allow_infinity=False),
    "label": st.none() | st.text(alphabet="abcxyzé€ 'ü", max_size=6),
    "flag": st.booleans(),
})
single_ops = st.one_of(
    st.tuples(st.just("insert"), ids, rows),
    st.tuples(st.just("update"), ids, rows),
    st.tuples(st.just("update_pk"), ids, ids),
    st.tuples(st.just("delete"), ids),
    st.tuples(st.just("move_group"), st.integers(0, 3), st.integers(0, 3)),
    st.tuples(st.just("toggle_flag"), st.integers(0, 3)),
    st.tuples(st.just("shift_keys"), st.integers(0, 3)),
)
operations = st.lists(
    st.one_of(single_ops, st.tuples(st.just("txn"), st.lists(single_ops, min_size=2, max_size=5)),
              st.just(("refresh",))),
    min_size=3, max_size=14,
).filter(varied)


def run_op(cur, op) -> None:
    """Apply one operation; one that violates a constraint is skipped (rolled back to a savepoint)."""
    kind = op[0]
    cur.execute("SAVEPOINT op")
    try:
        if kind == "insert":
            r = op[2]
            cur.execute("INSERT INTO items VALUES (%s, %s, %s, %s, %s, %s)",
                        (op[1], r["grp"], r["qty"], r["price"], r["label"], r["flag"]))
        elif kind == "update":
            r = op[2]
            cur.execute("UPDATE items SET grp = %s, qty = %s, price = %s, label = %s, flag = %s WHERE id = %s",
                        (r["grp"], r["qty"], r["price"], r["label"], r["flag"], op[1]))
        elif kind == "update_pk":
            cur.execute("UPDATE items SET id = %s WHERE id = %s", (op[2], op[1]))
        elif kind == "delete":
            cur.execute("DELETE FROM items WHERE id = %s", (op[1],))
        elif kind == "move_group":
            cur.execute("UPDATE items SET grp = %s WHERE grp = %s", (op[2], op[1]))
        elif kind == "toggle_flag":
            cur.execute("UPDATE items SET flag = NOT flag WHERE grp = %s", (op[1],))
        elif kind == "shift_keys":  # a multi-row primary-key update
            cur.execute("UPDATE items SET id = id + 100 WHERE grp = %s AND id < 100", (op[1],))
        cur.execute("RELEASE SAVEPOINT op")
    except psycopg2.errors.UniqueViolation:
        cur.execute("ROLLBACK TO SAVEPOINT op")


@pytest.fixture(params=["local"])  # over Spark Connect: test_connect_paths
def items_project(db, make_project, request):
    db.execute(ITEMS)
    project = make_project(["public.items"], SIMPLE_VIEWS, spark_mode=request.param)
    project.apply()
    return project


@pytest.mark.slow
@pytest.mark.parametrize("items_project", ["local"], indirect=True)
@settings(max_examples=examples(1))
@given(ops=operations)
def test_random_dml_then_fast_refresh_equals_postgres(items_project, db, ops):
    random_dml_then_refresh(items_project, db, ops)


def random_dml_then_refresh(project, db, ops) -> None:
    db.execute("DELETE FROM items")  # every example starts from an empty table (a logged delete)
    refresh_ok(project)
    conn = db.connect()
    try:
        with conn.cursor() as cur:
            for op in ops:
                if op[0] == "refresh":
                    conn.commit()
                    results = refresh_ok(project)
                    assert {r.method for r in results.values()} <= {"fast", "fresh"}
                    check_all(project)
                elif op[0] == "txn":
                    for inner in op[1]:
                        run_op(cur, inner)
                    conn.commit()
                else:
                    run_op(cur, op)
                    conn.commit()
        conn.commit()
    finally:
        conn.close()
    results = refresh_ok(project)
    assert {r.method for r in results.values()} <= {"fast", "fresh"}
    check_all(project)


@pytest.mark.deep  # the main tier: this class's random-DML oracle
def test_fixed_dml_scenario_fast_refresh(items_project, db):
    """A deterministic tour of the same ground for the quick tier."""
    project = items_project
    conn = db.connect()
    with conn.cursor() as cur:
        for op in [
            ("insert", 1, {"grp": 1, "qty": 5, "price": 10.5, "label": "a", "flag": True}),
            ("insert", 2, {"grp": 2, "qty": 1, "price": None, "label": None, "flag": True}),
            ("insert", 3, {"grp": 1, "qty": 3, "price": 2, "label": "é", "flag": False}),
        ]:
            run_op(cur, op)
    conn.commit()
    refresh_ok(project)
    check_all(project)
    with conn.cursor() as cur:
        run_op(cur, ("update", 2, {"grp": 2, "qty": 7, "price": 1.25, "label": "b", "flag": True}))  # enters the filter
        run_op(cur, ("toggle_flag", 1))  # 1 leaves, 3 enters v_filtered
        run_op(cur, ("update_pk", 1, 10))
        run_op(cur, ("delete", 3))
        run_op(cur, ("insert", 3, {"grp": 3, "qty": 4, "price": 4, "label": "c", "flag": True}))  # same key again
    conn.commit()
    results = refresh_ok(project)
    assert results["v_all"].method == "fast"
    assert results["v_all"].keys_read == 4  # ids 1, 2, 3, 10: many changes of a key collapse into one
    check_all(project)
    # A refresh that only inserts adds a file beside the rewritten one (a MERGE without deletion
    # vectors rewrites the files it touches).
    with conn.cursor() as cur:
        run_op(cur, ("insert", 20, {"grp": 2, "qty": 1, "price": 3, "label": "d", "flag": True}))
    conn.commit()
    assert refresh_ok(project)["v_all"].rows_inserted == 1
    conn.close()
    # Maintenance and history work the same on both session kinds.
    done = dict(project.optimize(["v_all"], vacuum=True))
    compacted = re.match(r"(\d+) files compacted into 1, vacuumed", done["v_all"])
    assert compacted and int(compacted.group(1)) >= 2, done  # the rewritten file and the inserted one
    check_all(project)
    assert [(h.status, h.method) for h in project.history("v_all")][:3] == [("succeeded", "fast")] * 3
    operations = [r["operation"] for r in project.warehouse.history(project.config.view_location("v_all"), 3).collect()]
    assert operations[0] == "VACUUM END" and "OPTIMIZE" in operations, operations


@pytest.mark.parametrize("items_project", ["local"], indirect=True)  # the stamp's business: no Spark kind of its own
def test_open_transaction_during_refresh_is_taken_by_the_next_refresh(items_project, db):
    project = items_project
    db.execute("INSERT INTO items SELECT g, 1, 5, 1.00, 'x', true FROM generate_series(1, 10) g")
    refresh_ok(project)
    writer = db.connect()
    with writer.cursor() as cur:
        cur.execute("INSERT INTO items VALUES (50, 1, 9, 9.99, 'late', true)")
        cur.execute("UPDATE items SET qty = 8, label = 'changed' WHERE id IN (1, 2)")
        cur.execute("UPDATE items SET id = 60 WHERE id = 3")
    db.execute("INSERT INTO items VALUES (51, 2, 3, 1.50, 'other', true)")  # committed meanwhile
    refresh_ok(project)  # runs while the writer's transaction is open
    check_all(project)
    writer.commit()
    writer.close()
    # the open transaction's keys, committed after the refresh: still in the log, not stamped yet
    log = project.logs.registered()["public.items"].log_name
    pending = db.execute(f'SELECT DISTINCT id FROM mvlog."{log}" WHERE "snaptime$$" = %s', (SENTINEL_TIME,))
    assert sorted(k for (k,) in pending) == [1, 2, 3, 50, 60]
    results = refresh_ok(project)
    assert results["v_all"].keys_read == 5  # 50, 1, 2, 3, 60: the late transaction is not lost
    check_all(project)
    assert db.execute("SELECT label FROM items WHERE id = 1") == [("changed",)]


def test_fast_refresh_reads_only_changed_rows(db, make_project):
    db.execute(ITEMS)
    db.execute("INSERT INTO items SELECT g, g % 4, g % 10, g / 100.0, 'row ' || g, g % 3 > 0 "
               "FROM generate_series(1, 20000) g")
    db.execute("ANALYZE items")
    project = make_project(["public.items"], SIMPLE_VIEWS[:2])
    project.apply()
    db.execute("UPDATE items SET qty = 9 WHERE id IN (7, 7000)")
    db.execute("DELETE FROM items WHERE id = 19999")
    before = stats_before(db, "items")
    results = refresh_ok(project)
    after = stats_after(db, "items", before)
    assert results["v_all"].keys_read == 3 and results["v_filtered"].keys_read == 3
    assert after[0] - before[0] == 0, "a sequential scan read the base table"
    assert after[1] > before[1], "the changed rows were not fetched through the primary key"
    assert after[2] - before[2] <= 2 * 3, "more base rows were fetched than keys changed"
    plan = project.plan("v_all")
    sql = plan.read_sql()
    assert "mlog$_items" in sql and "LEFT JOIN" in sql and "DISTINCT" in sql
    check_all(project, SIMPLE_VIEWS[:2])


def test_a_fast_refresh_runs_its_statements_without_jit_and_with_wide_joins_a_complete_one_with_the_server_s(
        db, make_project, monkeypatch):
    """A fast refresh's read and its key map's upkeep are small work in large statements, which
    PostgreSQL's JIT may spend seconds compiling (TPC-DS q58 at SF 1: 10.5 s of it before a 1.8 s
    read), and which join more tables than PostgreSQL reorders by default (q72's key map update:
    33.6 s with the changed keys joined last, 6.1 s reordered): they run with jit off and the
    planner's join limits raised (FAST_SETTINGS). A complete refresh's reads keep the server's."""
    from mvlog.postgres.source import Source

    db.execute(ITEMS)
    db.execute("INSERT INTO items SELECT g, g % 4, g, g, 'l' || g, true FROM generate_series(1, 20) g")
    db.execute(f'ALTER DATABASE "{db.name}" SET jit = on')
    # The settings a statement ran with, in the view's rows (current_setting is not allowed in a fast
    # view: it is not deterministic; this function says it is, for the test).
    db.execute("CREATE FUNCTION planner_settings(int) RETURNS text IMMUTABLE LANGUAGE plpgsql AS $$ BEGIN "
               "RETURN concat_ws('/', current_setting('jit'), current_setting('join_collapse_limit'), "
               "current_setting('from_collapse_limit'), current_setting('geqo_threshold')); END $$")
    views = [{"name": "v_jit", "refresh": "fast", "query": "SELECT id, qty, planner_settings(id) AS s FROM items"},
             {"name": "v_groups", "refresh": "fast", "query": "SELECT grp, count(*) AS n FROM items GROUP BY grp"}]
    project = make_project(["items"], views)
    project.apply()
    recorded: list[bool] = []
    upkeep = Source.snapshot_transaction

    def spied(self, snapshot, fast=False):
        recorded.append(fast)
        return upkeep(self, snapshot, fast)

    monkeypatch.setattr(Source, "snapshot_transaction", spied)
    db.execute("UPDATE items SET qty = qty + 1 WHERE id IN (3, 4)")
    results = refresh_ok(project)
    assert {r.method for r in results.values()} == {"fast"} and recorded == [True, True]
    spark = project.warehouse.spark
    server, fast = "on/8/8/12", "off/16/16/17"  # PostgreSQL's defaults; FAST_SETTINGS
    rows = {r["id"]: r["s"] for r in spark.read.format("delta").load(project.config.view_location("v_jit")).collect()}
    assert {i for i, s in rows.items() if s == fast} == {3, 4} and set(rows.values()) == {server, fast}
    recorded.clear()
    refresh_ok(project, complete=True)
    assert recorded == [False, False]
    rows = {r["id"]: r["s"] for r in spark.read.format("delta").load(project.config.view_location("v_jit")).collect()}
    assert set(rows.values()) == {server}


def test_complete_and_force_methods(db, make_project):
    db.execute(ITEMS)
    db.execute("INSERT INTO items SELECT g, g % 4, g, g, 'l' || g, true FROM generate_series(1, 50) g")
    views = [
        {"name": "v_force", "query": "SELECT id, qty FROM items WHERE grp = 1"},
        {"name": "v_complete", "refresh": "complete", "query": "SELECT id, label FROM items"},
        {"name": "v_other", "query": "SELECT id, label FROM items LIMIT 5"},  # arbitrary rows
    ]
    project = make_project(["items"], views)
    builds = {r.view: r for r in project.apply().builds}
    assert {r.method for r in builds.values()} == {"complete"}
    db.execute("UPDATE items SET grp = 1 WHERE id = 2; DELETE FROM items WHERE id = 1")
    results = refresh_ok(project)
    assert results["v_force"].method == "fast"
    assert results["v_complete"].method == "complete"
    assert results["v_other"].method == "complete" and "LIMIT" in results["v_other"].reason
    assert_views_match(project, views)


def test_a_refresh_s_prepare_phase_counts_its_plan_at_the_stamp(db, make_project, monkeypatch):
    """A ``force`` view's choice and its Delta table's check come after the stamp: its phases must
    count them (the choice in ``prepare``, with the lock and the stamp; the look at the Delta table
    in ``table``, not in ``prepare`` too), so that they add up to its seconds."""
    from mvlog.pipeline.planning import ViewPlanner
    from mvlog.spark.warehouse import Warehouse

    db.execute(ITEMS)
    db.execute("INSERT INTO items SELECT g, g % 4, g, g, 'l' || g, true FROM generate_series(1, 20) g")
    project = make_project(["items"], [{"name": "v_force", "query": "SELECT id, qty FROM items WHERE grp = 1"}])
    project.apply()
    db.execute("UPDATE items SET qty = qty + 1 WHERE id = 1")
    at_stamp, columns = ViewPlanner.at_stamp, Warehouse.columns

    def slow_at_stamp(self, *args):
        time.sleep(0.6)
        return at_stamp(self, *args)

    def slow_columns(self, location):
        time.sleep(0.8)
        return columns(self, location)

    monkeypatch.setattr(ViewPlanner, "at_stamp", slow_at_stamp)
    monkeypatch.setattr(Warehouse, "columns", slow_columns)
    result = refresh_ok(project)["v_force"]
    assert result.method == "fast" and result.phases["table"] >= 0.8, result.phases
    assert 0.6 <= result.phases["prepare"] < 1.4, result.phases
    assert sum(result.phases.values()) <= result.seconds


def test_force_chooses_by_the_share_rule_then_by_what_the_view_s_refreshes_cost(db, make_project, monkeypatch):
    from mvlog.pipeline import cost

    monkeypatch.setattr(cost, "COMPLETE_MIN_KEYS", 5)  # let a 100-row table count as large
    db.execute(ITEMS)
    db.execute("INSERT INTO items SELECT g, g % 4, g, g, 'l' || g, true FROM generate_series(1, 100) g; ANALYZE items")
    views = [{"name": "v_force", "query": "SELECT id, qty FROM items WHERE grp = 1"},
             {"name": "v_fast", "refresh": "fast", "query": "SELECT id, label FROM items"}]
    project = make_project(["items"], views)
    project.apply()  # measures a complete refresh of each
    db.execute("UPDATE items SET qty = qty + 1 WHERE id <= 9")  # 9 % of the rows: fast by the share rule
    results = refresh_ok(project)
    assert results["v_force"].method == "fast" and "by the share rule" in results["v_force"].reason
    assert db.execute("SELECT window_keys FROM mvlog.refresh_history WHERE view_name = 'v_force' "
                      "AND method = 'fast'") == [(9,)]
    db.execute("UPDATE items SET grp = 1, label = 'moved' WHERE id > 80")  # 20 %; measured both ways now

    def costs(fast: str, complete: str) -> None:  # what the history says each method took
        db.execute("UPDATE mvlog.refresh_history SET finished_at = started_at + CASE method "
                   "WHEN 'fast' THEN %s::interval ELSE %s::interval END WHERE method IN ('fast', 'complete')",
                   (fast, complete))

    costs("60 s", "0.5 s")
    planned = project.plan("v_force")  # what the next refresh will choose, from the changes pending now
    assert planned.method == "complete" and planned.reason.startswith("a complete refresh is predicted cheaper")
    assert project.explain("v_force").next_refresh == {"method": "complete", "reason": planned.reason, "write": None,
                                                       "read": None}
    results = refresh_ok(project)
    assert results["v_force"].method == "complete", results["v_force"].reason
    assert results["v_force"].reason.startswith("a complete refresh is predicted cheaper: fast predicted 133.3 s "
                                                "(from 1 refresh) for 20 changed keys, complete 0.5 s"), \
        results["v_force"].reason
    assert results["v_fast"].method == "fast"  # refresh: fast asked for it
    costs("0.5 s", "60 s")
    db.execute("UPDATE items SET qty = qty + 1 WHERE id > 90")
    results = refresh_ok(project)
    assert results["v_force"].method == "fast", results["v_force"].reason
    assert results["v_force"].reason == ("fast predicted 0.6 s (from 1 refresh) for 10 changed keys, "
                                         "complete 60.0 s (from 1 refresh)")  # 0.5 s for 9 keys, in proportion
    # (the build's 60 s no longer counts: a complete refresh was measured since)
    assert_views_match(project, views)


def test_force_predicts_what_a_view_never_ran_from_the_other_views(db, make_project):
    """After apply, a view measured only by its build: its complete refresh predicted from the build
    as the other views' builds compared with their complete refreshes, its fast one on the line
    through their costs; `plan` says so, and the refresh follows it (#75)."""
    db.execute(ITEMS)
    db.execute("INSERT INTO items SELECT g, g % 4, g, g, 'l' || g, true FROM generate_series(1, 100) g")
    views = [{"name": f"v{i}", "query": f"SELECT id, qty FROM items WHERE grp = {i % 4}"} for i in range(4)]
    project = make_project(["items"], views)
    project.apply()
    # What the other views cost, as if measured: fast = 1 s + 0.5 x complete; builds twice their complete.
    for name, complete in (("v0", 2.0), ("v1", 4.0), ("v2", 8.0)):
        db.execute("UPDATE mvlog.refresh_history SET finished_at = started_at + %s * interval '1 s' "
                   "WHERE view_name = %s", (2 * complete, name))
        for method, seconds in (("complete", complete), ("fast", 1 + 0.5 * complete)):
            db.execute("INSERT INTO mvlog.refresh_history (view_name, started_at, finished_at, method, reason, "
                       "status, window_keys) VALUES (%s, now(), now() + %s * interval '1 s', %s, 'r', 'succeeded', "
                       "CASE WHEN %s = 'fast' THEN 1 END)", (name, seconds, method, method))
    assert sorted((f.fast, f.complete, f.build) for f in project.catalog.fleet_costs("v3"))[:3] == [
        (2.0, 2.0, 4.0), (3.0, 4.0, 8.0), (5.0, 8.0, 16.0)]
    costs = project.catalog.view_costs(["v2", "v3", "not_a_view"])  # by name: what orders a refresh's units
    assert sorted(costs) == ["v2", "v3"]
    assert (costs["v2"].fast, costs["v2"].complete, costs["v2"].build) == (5.0, 8.0, 16.0)
    db.execute("UPDATE mvlog.refresh_history SET finished_at = started_at + interval '1 s' WHERE view_name = 'v3'")
    db.execute("UPDATE items SET qty = qty + 1 WHERE id = 3")
    planned = project.plan("v3")  # complete: 1 s / 2 = 0.5 s; fast: 1 + 0.5 x 0.5 = 1.25 s
    assert planned.method == "complete", planned.reason
    assert planned.reason == ("a complete refresh is predicted cheaper: fast predicted 1.2 s (1.0 s + 0.50 x its "
                              "complete, the line through 3 other simple views' fast and complete refreshes) for 1 "
                              "changed keys, complete 0.5 s (its build's 1.0 s x 0.50, what 3 other views' complete "
                              "refreshes cost against their builds)"), planned.reason
    results = refresh_ok(project)
    assert results["v3"].method == "complete" and results["v3"].reason == planned.reason
    assert_views_match(project, views)


def test_views_mvlog_cannot_refresh_fast_refresh_completely(db, make_project):
    db.execute(ITEMS)
    db.execute("CREATE TABLE other (id int PRIMARY KEY, grp int)")
    db.execute("INSERT INTO items SELECT g, g % 3, g, g, 'l' || g, g % 2 = 0 FROM generate_series(1, 30) g")
    db.execute("INSERT INTO other VALUES (1, 1)")
    views = [  # a recursive CTE stays complete; an uncorrelated scalar subquery in an expression is a piece of a
        # composed view (test_refresh_subquery, test_refresh_ranges, test_composed: more of them)
        {"name": "cte_v", "query": "WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n < 2) "
                                   "SELECT i.grp, sum(i.qty) AS sq FROM items i JOIN s ON s.n = i.grp GROUP BY i.grp"},
        {"name": "sub_v", "query": "SELECT id, qty FROM items i WHERE i.grp > (SELECT min(o.grp) FROM other o) - i.id"},
    ]
    project = make_project(["items", "other"], views)
    project.apply()
    db.execute("UPDATE items SET qty = qty + 1 WHERE id < 5; UPDATE other SET grp = 2")
    results = refresh_ok(project)
    assert {r.view: r.method for r in results.values()} == {"cte_v": "complete", "sub_v": "fast"}
    assert_views_match(project, views)
    status = {v["name"]: v for v in project.status()["views"]}
    assert status["sub_v"]["base_tables"] == ["public.items", "public.other"]  # the subquery's table too
    # A table read only inside a subquery or CTE needs its log as well.
    unlogged = make_project(["items"], views[1:])
    with pytest.raises(ConfigError, match=r"views\[0\] \(sub_v\): table public.other has no materialized view log"):
        unlogged.validate()


def test_truncate_forces_complete_refresh(db, make_project):
    db.execute(ITEMS)
    db.execute("INSERT INTO items SELECT g, 1, g, g, 'l', true FROM generate_series(1, 20) g")
    project = make_project(["items"], [{"name": "v", "query": "SELECT * FROM items"},
                                       {"name": "v_fast", "refresh": "fast", "query": "SELECT id FROM items"}])
    project.apply()
    db.execute("TRUNCATE items")
    db.execute("INSERT INTO items VALUES (1, 1, 1, 1, 'after', true)")
    results = {r.view: r for r in project.refresh()}
    assert results["v"].method == "complete" and "truncated" in results["v"].reason
    # A fast view refuses: the result says so, and names no method it did not run.
    refused = results["v_fast"].to_json()
    assert (refused["status"], refused["method"], refused["reason"]) == ("failed", "-",
                                                                         "table public.items was truncated")
    assert refused["error"] == ("view v_fast cannot be fast-refreshed: table public.items was truncated; "
                                "run 'mvlog refresh --complete v_fast'")
    assert_view_matches(project, "v")
    assert not refresh_ok(project, ["v_fast"], complete=True)["v_fast"].error
    assert_view_matches(project, "v_fast")


def test_purge_waits_for_every_dependent_view(db, make_project):
    db.execute(ITEMS)
    project = make_project(["items"], [{"name": "a", "query": "SELECT id FROM items"},
                                       {"name": "b", "query": "SELECT id, qty FROM items"}])
    project.apply()
    log = project.logs.registered()["public.items"]
    count = lambda: db.execute(f'SELECT count(*) FROM mvlog."{log.log_name}"')[0][0]  # noqa: E731
    db.execute("INSERT INTO items VALUES (1, 1, 1, 1, 'x', true), (2, 1, 1, 1, 'y', true)")
    refresh_ok(project, ["a"])
    assert count() == 2  # b has not consumed them yet
    refresh_ok(project, ["b"])
    assert count() == 0
    assert_view_matches(project, "a")
    assert_view_matches(project, "b")


def test_apply_is_idempotent(db, make_project):
    db.execute(ITEMS)
    project = make_project(["items"], SIMPLE_VIEWS[:1])
    first = project.apply()
    assert first.logs_created == ["public.items"] and [r.view for r in first.builds] == ["v_all"]
    catalog = lambda: db.execute(  # noqa: E731
        "SELECT (SELECT array_agg(oid ORDER BY oid) FROM pg_trigger WHERE tgrelid = 'items'::regclass),"
        " (SELECT array_agg(name || updated_at::text ORDER BY name) FROM mvlog.views),"
        " (SELECT count(*) FROM mvlog.refresh_history)")
    before = catalog()
    second = project.apply()
    assert second.logs_created == [] and second.logs_unchanged == ["public.items"]
    assert second.builds == [] and second.views_registered == []
    assert catalog() == before


def test_grouping_sets_are_refreshed_completely_and_say_why(db, make_project):
    """GROUP BY ROLLUP / GROUPING SETS / CUBE by positions (or with LIMIT, DISTINCT, windows):
    complete refresh (force), with the reason; refused as refresh: fast at apply. (The others are
    fast: test_grouping_sets.)"""
    db.execute("CREATE TABLE g (id int PRIMARY KEY, a text, b int, c numeric(8,2));"
               "INSERT INTO g SELECT i, 'a' || (i % 3), i % 2, i FROM generate_series(1, 40) i")
    rollup = "SELECT a, b, sum(c) AS total, count(*) AS n FROM g GROUP BY ROLLUP (1, 2)"
    with pytest.raises(ConfigError, match="GROUPING SETS, CUBE and ROLLUP with LIMIT, DISTINCT, window functions "
                                          "or GROUP BY positions are not incrementally maintainable"):
        make_project(["g"], [{"name": "r", "refresh": "fast", "query": rollup}]).apply()
    project = make_project(["g"], [{"name": "r", "query": rollup}])
    assert not [r for r in project.apply().builds if r.error]
    assert "GROUPING SETS, CUBE and ROLLUP" in " ".join(c.reason for c in project.explain("r").capabilities)
    db.execute("UPDATE g SET c = c + 1 WHERE id <= 5; DELETE FROM g WHERE id = 6")
    result = refresh_ok(project)["r"]
    assert result.method == "complete" and "GROUPING SETS" in result.reason
    assert_view_matches(project, "r")


def test_a_fast_refresh_reads_null_safely_without_checking_for_null_keys_first(db, make_project, monkeypatch):
    """An aggregate recomputed per affected group once asked first whether an affected group's key
    held a NULL, a query that computed the affected keys as the read does (TPC-DS q80 at scale 0.2:
    49 s, longer than the read). The read's null-safe branch is now gated on that condition inside
    the read, so no check runs: here each would fail, and the NULL group and the others stay exact."""
    from mvlog.pipeline import refresh

    db.execute(ITEMS)
    db.execute("INSERT INTO items SELECT g, g % 3, NULLIF(g % 4, 0), g, 'l' || g, true FROM generate_series(1, 20) g")
    views = [{"name": "v_groups", "refresh": "fast",
              "query": "SELECT qty, stddev(price) AS s, count(*) AS n FROM items GROUP BY qty"},
             # grp is NOT NULL: matched by = beside qty's IS NOT DISTINCT FROM
             {"name": "v_pairs", "refresh": "fast",
              "query": "SELECT grp, qty, stddev(price) AS s, count(*) AS n FROM items GROUP BY grp, qty"}]
    project = make_project(["items"], views)
    project.apply()
    real, checked = refresh.strategy_of, []

    class Unchecked:
        """The view's strategy, its null-key checks failing if run."""

        def __init__(self, strategy):
            self.strategy = strategy

        def __getattr__(self, name):
            return getattr(self.strategy, name)

        def null_key_checks(self, since):
            return [c and "SELECT 1 / 0" for c in self.strategy.null_key_checks(since)]

        def null_safe(self, since):
            checked.append(self.strategy.null_safe(since))
            return checked[-1]

    monkeypatch.setattr(refresh, "strategy_of", lambda shape: Unchecked(real(shape)))
    for change in ("UPDATE items SET qty = 7 WHERE id = 3",  # no NULL key affected
                   "UPDATE items SET qty = NULL WHERE id = 5",  # a row into the NULL group
                   "DELETE FROM items WHERE id IN (4, 8)"):  # rows out of it
        db.execute(change)
        for result in project.refresh(["v_groups", "v_pairs"]):
            assert (result.error, result.method) == (None, "fast"), result
        assert_view_matches(project, "v_groups")
        assert_view_matches(project, "v_pairs")
    assert checked == [(True,)] * 6, checked  # every read null-safe, unasked
