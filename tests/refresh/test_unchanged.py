"""Views with nothing to apply (#47): a refresh records them fresh before any Spark work
(mvlog.unchanged_views, sql/007_unchanged.sql), a refresh unit only as a whole; and what is a
change without being an ordinary logged row (TRUNCATE, DDL, a detached partition, a volatile
query, logical capture) is never mistaken for nothing changed."""

from __future__ import annotations

from datetime import datetime

import pytest
from conftest import assert_view_matches, assert_views_match, refresh_ok

pytestmark = pytest.mark.integration

FRESH = "fresh"  # model.UNCHANGED

T_AND_U = """
CREATE TABLE t (id int PRIMARY KEY, grp int NOT NULL, v numeric(12,2));
CREATE TABLE u (id int PRIMARY KEY, t_id int NOT NULL, w text);
INSERT INTO t SELECT g, g % 4, g * 1.5 FROM generate_series(1, 40) g;
INSERT INTO u SELECT g, g % 30 + 1, 'w' || g FROM generate_series(1, 60) g;
"""

FLEET = [
    {"name": "t_copy", "refresh": "fast", "query": "SELECT id, grp, v FROM t WHERE v > 10"},
    {"name": "t_agg", "refresh": "fast",
     "query": "SELECT grp, count(*) AS n, sum(v) AS total FROM t GROUP BY grp"},
    {"name": "t_join", "refresh": "fast",
     "query": "SELECT t.id, t.v, u.id AS u_id, u.w FROM t JOIN u ON u.t_id = t.id"},
    {"name": "t_busy", "query": "SELECT grp, n FROM t_agg WHERE n > 1"},  # a view over a view
]


def history(db, view: str) -> list[tuple]:
    """The view's refresh history, newest first: (method, status, snaptime, keys_read, reason)."""
    return db.execute("SELECT method, status, snaptime, keys_read, reason FROM mvlog.refresh_history "
                      "WHERE view_name = %s ORDER BY id DESC", (view,))


def methods(results: dict) -> dict[str, str | None]:
    return {name: (str(r.method) if r.method else None) for name, r in results.items()}


def test_nothing_changed_records_every_view_fresh_without_spark(db, make_project):
    """With nothing changed since the build, a new project's refresh records every view (a simple
    one, an aggregate, a join, a view over a view) fresh with 0 keys, a succeeded history row at
    the same stamp and a later last refresh, and never starts Spark; a change to one table then
    refreshes only the views over it, and all of them match PostgreSQL."""
    db.execute(T_AND_U)
    built = make_project(["t", "u"], FLEET)
    built.apply()
    before = {v["name"]: v for v in built.status()["views"]}
    stamps = {view["name"]: history(db, view["name"])[0][2] for view in FLEET}

    quiet = make_project(["t", "u"], FLEET)
    assert not quiet.spark_started
    results = refresh_ok(quiet)
    assert set(results) == {v["name"] for v in FLEET}
    for name, result in results.items():
        assert result.method == FRESH, (name, result.method, result.reason)
        assert result.keys_read == 0 and result.error is None and result.snaptime == stamps[name], result
    assert quiet.spark_started is False
    for view in FLEET:
        method, status, snaptime, keys, reason = history(db, view["name"])[0]
        assert (method, status, snaptime, keys) == (FRESH, "succeeded", stamps[view["name"]], 0), view["name"]
        assert reason == "nothing changed since the last refresh"
        assert len(history(db, view["name"])) == 2  # the build, then this one
    after = {v["name"]: v for v in quiet.status()["views"]}
    for name, view in after.items():
        assert view["staleness"] == "fresh" and view["lag_seconds"] == 0, view
        assert datetime.fromisoformat(view["last_refresh"]) > datetime.fromisoformat(before[name]["last_refresh"])
    assert quiet.spark_started is False

    db.execute("UPDATE u SET w = 'changed' WHERE id = 7")
    changed = make_project(["t", "u"], FLEET)
    results = refresh_ok(changed)
    assert methods(results) == {"t_copy": FRESH, "t_agg": FRESH, "t_join": "fast", "t_busy": FRESH}
    assert results["t_join"].keys_read > 0
    assert changed.spark_started
    assert_views_match(changed, FLEET)


UNIT = [
    {"name": "a", "query": "SELECT id, grp, v FROM t"},
    {"name": "b", "query": "SELECT a.id, a.v, u.w FROM a JOIN u ON u.t_id = a.id"},  # reads a: one unit
]


def test_a_unit_is_fresh_only_as_a_whole(db, make_project):
    """A view is not recorded fresh while a view of its unit has work: a change to t refreshes both
    a (over t) and b (over a and u); a complete refresh a needs takes b along, though nothing
    changed under b itself."""
    db.execute(T_AND_U)
    project = make_project(["t", "u"], UNIT)
    project.apply()
    db.execute("UPDATE t SET v = v + 1 WHERE id = 3")
    results = refresh_ok(project)
    assert FRESH not in methods(results).values(), methods(results)
    assert_views_match(project, UNIT)
    db.execute("UPDATE mvlog.views SET needs_complete = 'test' WHERE name = 'a'")
    results = refresh_ok(project)
    assert results["a"].method == "complete", methods(results)
    assert results["b"].method != FRESH, methods(results)
    assert_views_match(project, UNIT)


def test_truncate_is_a_change(db, make_project):
    """TRUNCATE leaves only a 'T' marker in the log: the view over the table is refreshed
    completely (not recorded fresh) and is empty, as the table is."""
    db.execute(T_AND_U)
    views = [{"name": "t_v", "query": "SELECT id, v FROM t"}]
    make_project(["t"], views).apply()
    db.execute("TRUNCATE t")
    project = make_project(["t"], views)
    results = refresh_ok(project)
    assert results["t_v"].method == "complete", (results["t_v"].method, results["t_v"].reason)
    assert_view_matches(project, "t_v")
    assert project.warehouse.spark.read.format("delta").load(project.config.view_location("t_v")).count() == 0


def test_ddl_and_a_volatile_query_are_never_nothing_changed(db, make_project):
    """A view whose query reads the clock is refreshed every time, even with nothing changed. A
    column type changed by DDL, with no row changed, refreshes the view selecting it completely
    (its output type changed); once refreshed, nothing changed is fresh again."""
    db.execute(T_AND_U)
    views = [
        {"name": "t_v", "query": "SELECT id, v FROM t"},
        {"name": "t_clock", "query": "SELECT id, v FROM t WHERE now() > '2000-01-01'"},
    ]
    make_project(["t"], views).apply()
    project = make_project(["t"], views)
    results = refresh_ok(project)
    assert methods(results)["t_v"] == FRESH and results["t_clock"].method != FRESH, methods(results)
    db.execute("ALTER TABLE t ALTER COLUMN v TYPE numeric(14,3)")
    results = refresh_ok(make_project(["t"], views))
    assert results["t_v"].method == "complete", (results["t_v"].method, results["t_v"].reason)
    assert results["t_clock"].method != FRESH, methods(results)
    again = make_project(["t"], views)
    results = refresh_ok(again)
    assert methods(results)["t_v"] == FRESH and results["t_clock"].method != FRESH, methods(results)
    assert_views_match(again, views)
    delta = again.warehouse.spark.read.format("delta").load(again.config.view_location("t_v"))
    assert dict(delta.dtypes)["v"] == "decimal(14,3)"


PARTITIONED = """
CREATE TABLE p (id int, day date, v int, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
CREATE TABLE p_jan PARTITION OF p FOR VALUES FROM ('2024-01-01') TO ('2024-02-01');
CREATE TABLE p_feb PARTITION OF p FOR VALUES FROM ('2024-02-01') TO ('2024-03-01');
INSERT INTO p SELECT g, date '2024-01-01' + g, g FROM generate_series(1, 50) g;
"""


def test_a_detached_partition_is_a_change(db, make_project):
    """DETACH PARTITION changes no row of the table's own, yet its rows leave the view: the view
    over the partitioned table is not recorded fresh, and matches PostgreSQL after."""
    db.execute(PARTITIONED)
    views = [{"name": "p_v", "query": "SELECT id, day, v FROM p"}]
    make_project(["p"], views).apply()
    db.execute("ALTER TABLE p DETACH PARTITION p_feb")
    project = make_project(["p"], views)
    results = refresh_ok(project)
    assert results["p_v"].method != FRESH, results["p_v"].reason
    assert_view_matches(project, "p_v")
    delta = project.warehouse.spark.read.format("delta").load(project.config.view_location("p_v"))
    assert delta.count() == db.execute("SELECT count(*) FROM p")[0][0] == 30


def test_a_change_under_logical_capture_is_seen_at_once(db, make_project):
    """Under capture: logical, a change committed just before the refresh is in no log until the
    capture decodes it: the refresh lets the capture catch up first, so the view is refreshed, not
    recorded fresh; with nothing changed it is fresh again."""
    db.execute(T_AND_U)
    views = [{"name": "t_v", "refresh": "fast", "query": "SELECT id, grp, v FROM t"}]
    make_project(["t"], views, spark_mode="logical").apply()
    db.execute("UPDATE t SET v = 0 WHERE id = 5")
    project = make_project(["t"], views, spark_mode="logical")
    results = refresh_ok(project)
    assert results["t_v"].method == "fast", (results["t_v"].method, results["t_v"].reason)
    assert_view_matches(project, "t_v")
    quiet = make_project(["t"], views, spark_mode="logical")
    assert methods(refresh_ok(quiet)) == {"t_v": FRESH}
    assert not quiet.spark_started
