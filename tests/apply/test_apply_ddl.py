"""DDL on base tables: captured, harmless changes ignored, breaking ones force a complete refresh or fail."""

from __future__ import annotations

import pytest
from conftest import assert_views_match

pytestmark = pytest.mark.integration

SCHEMA = """
CREATE TABLE t (id int PRIMARY KEY, a int, b numeric(8,2), c text);
INSERT INTO t SELECT g, g, g / 4.0, 'x' || g FROM generate_series(1, 30) g;
"""
VIEWS = [
    {"name": "uses_ab", "query": "SELECT id, a, b FROM t WHERE a > 3"},
    {"name": "uses_ab_fast", "refresh": "fast", "query": "SELECT id, a, b FROM t WHERE a > 3"},
    {"name": "star", "query": "SELECT * FROM t"},
    {"name": "agg_on_c", "query": "SELECT c, count(*) AS n FROM t GROUP BY c"},
]


@pytest.fixture
def ddl_project(db, make_project):
    db.execute(SCHEMA)
    project = make_project(["t"], VIEWS)
    assert [r.error for r in project.apply().builds] == [None] * len(VIEWS)
    return project


def methods(results):
    return {r.view: (r.method, r.error) for r in results}


def staleness(project):
    return {v["name"]: v["staleness"] for v in project.status()["views"]}


def test_ddl_is_captured(ddl_project, db):
    db.execute("ALTER TABLE t ADD COLUMN d int")
    db.execute("CREATE INDEX t_a_idx ON t (a)")
    rows = db.execute("SELECT command_tag, object_identity, statement FROM mvlog.ddl_log ORDER BY id")
    assert [r[0] for r in rows] == ["ALTER TABLE", "CREATE INDEX"]
    assert rows[0][1] == "public.t" and "ADD COLUMN d" in rows[0][2]


def test_a_new_unused_column_is_harmless_but_reaches_select_star(ddl_project, db):
    db.execute("ALTER TABLE t ADD COLUMN d int DEFAULT 7")
    db.execute("UPDATE t SET a = a + 1 WHERE id = 5")
    assert staleness(ddl_project) == {"uses_ab": "stale", "uses_ab_fast": "stale", "star": "needs_complete",
                                      "agg_on_c": "stale"}
    results = methods(ddl_project.refresh())
    assert results["uses_ab"] == ("fast", None) and results["uses_ab_fast"] == ("fast", None)
    assert results["agg_on_c"] == ("fast", None)
    assert results["star"] == ("complete", None)
    star = ddl_project.warehouse.spark.read.format("delta").load(ddl_project.config.view_location("star"))
    assert "d" in star.columns
    assert_views_match(ddl_project, VIEWS)


def test_a_retyped_column_forces_complete_or_fails_fast(ddl_project, db):
    db.execute("ALTER TABLE t ALTER COLUMN b TYPE numeric(12,4)")
    results = {r.view: r for r in ddl_project.refresh()}
    assert results["uses_ab"].method == "complete" and "columns of its query changed" in results["uses_ab"].reason
    assert "ALTER TABLE on public.t" in results["uses_ab"].reason
    assert "cannot be fast-refreshed: the columns of its query changed" in results["uses_ab_fast"].error
    assert results["agg_on_c"].method == "fast"  # it does not use b
    assert staleness(ddl_project)["uses_ab_fast"] == "needs_complete"
    ddl_project.refresh(["uses_ab_fast"], complete=True)
    assert_views_match(ddl_project, VIEWS)


def test_a_dropped_or_renamed_column_makes_views_invalid(ddl_project, db):
    db.execute("ALTER TABLE t RENAME COLUMN c TO c2")
    results = {r.view: r for r in ddl_project.refresh()}
    assert results["agg_on_c"].error.startswith('view agg_on_c is invalid: column "c" does not exist')
    assert results["uses_ab"].error is None and results["star"].method == "complete"
    assert staleness(ddl_project)["agg_on_c"] == "invalid"
    db.execute("ALTER TABLE t DROP COLUMN b")
    assert {r.view: bool(r.error) for r in ddl_project.refresh()} == {
        "uses_ab": True, "uses_ab_fast": True, "star": False, "agg_on_c": True}
    logged = db.execute("SELECT command_tag, object_type, object_identity, statement FROM mvlog.ddl_log ORDER BY id")
    assert logged[0][:3] == ("ALTER TABLE", "table column", "public.t.c2") and "RENAME COLUMN c TO c2" in logged[0][3]
    # the drop: its sql_drop event names the dropped column
    assert ("ALTER TABLE", "table column", "public.t.b") in [row[:3] for row in logged[1:]]


def test_a_changed_primary_key(ddl_project, db):
    db.execute("ALTER TABLE t DROP CONSTRAINT t_pkey, ADD PRIMARY KEY (id, a)")
    results = {r.view: r for r in ddl_project.refresh()}
    assert results["uses_ab"].method == "complete" and "primary key of public.t changed" in results["uses_ab"].reason
    assert "primary key of public.t changed" in results["uses_ab_fast"].error
    assert staleness(ddl_project)["uses_ab_fast"] == "needs_complete"
    ddl_project.apply()  # recreates the log for the new key and rebuilds the views
    db.execute("UPDATE t SET b = 0 WHERE id = 9")
    results = {r.view: r for r in ddl_project.refresh()}
    assert {r.method for r in results.values()} <= {"fast", "fresh"} and not any(r.error for r in results.values()), \
        [(r.view, r.method, r.reason, r.error) for r in results.values()]
    assert_views_match(ddl_project, VIEWS)


def test_a_dropped_table(ddl_project, db):
    db.execute("DROP TABLE t")
    assert all("is invalid: table t does not exist" in r.error for r in ddl_project.refresh())
    assert set(staleness(ddl_project).values()) == {"invalid"}
    assert db.execute("SELECT command_tag, object_type FROM mvlog.ddl_log")[0] == ("DROP TABLE", "table")
