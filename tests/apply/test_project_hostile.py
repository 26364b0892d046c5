"""Hostile input: injection-shaped names and values, a damaged warehouse, secrets from the environment."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import yaml
from conftest import assert_view_matches

pytestmark = pytest.mark.integration

EVIL_TABLE = '''"x""; DROP TABLE victim; --"'''
EVIL_COLUMN = '''"a'); DELETE FROM victim; --"'''


def test_injection_shaped_names_and_values_are_just_names_and_values(db, make_project):
    db.execute("CREATE TABLE victim (id int PRIMARY KEY); INSERT INTO victim VALUES (1)")
    db.execute(f'CREATE TABLE {EVIL_TABLE} (id text PRIMARY KEY, {EVIL_COLUMN} text, "$mvlog$" int)')
    db.execute(f"INSERT INTO {EVIL_TABLE} VALUES (%s, %s, 1), (%s, %s, 2)",
               ("'; DROP TABLE victim; --", "$$; DROP TABLE victim; $$", "normal", "\\x00 ' \" ` ${HOME}"))
    project = make_project(
        [EVIL_TABLE],
        # Column names with spaces and parentheses: allowed column mapping (test_readers checks the readers).
        [{"name": "evil_simple", "refresh": "fast", "column_mapping": True,
          "query": f"SELECT * FROM {EVIL_TABLE} WHERE \"$mvlog$\" > 0"},
         {"name": "evil_agg", "refresh": "fast", "column_mapping": True,
          "query": f"SELECT {EVIL_COLUMN}, count(*) AS n FROM {EVIL_TABLE} GROUP BY {EVIL_COLUMN}"}],
    )
    assert [r.error for r in project.apply().builds] == [None, None]
    db.execute(f"UPDATE {EVIL_TABLE} SET id = %s WHERE id = %s", ("'); TRUNCATE victim; --", "normal"))
    db.execute(f"INSERT INTO {EVIL_TABLE} VALUES (%s, %s, 3)", ("`; DROP TABLE victim`", "'); DROP TABLE victim; --"))
    results = project.refresh()
    assert [(r.method, r.error) for r in results] == [("fast", None), ("fast", None)]
    assert_view_matches(project, "evil_simple")
    assert_view_matches(project, "evil_agg")
    assert db.execute("SELECT count(*) FROM victim") == [(1,)]


def test_a_delta_table_deleted_by_hand(db, make_project):
    db.execute("CREATE TABLE t (id int PRIMARY KEY, a int); INSERT INTO t SELECT g, g FROM generate_series(1, 20) g")
    project = make_project(["t"], [{"name": "v_force", "query": "SELECT * FROM t"},
                                   {"name": "v_fast", "refresh": "fast", "query": "SELECT * FROM t"}])
    project.apply()
    for name in ("v_force", "v_fast"):
        shutil.rmtree(project.config.view_location(name))
    db.execute("UPDATE t SET a = 0 WHERE id = 3")
    results = {r.view: r for r in project.refresh()}
    assert results["v_force"].method == "complete" and "Delta table is missing" in results["v_force"].reason
    assert results["v_fast"].error == "view v_fast cannot be fast-refreshed: the Delta table is missing"
    assert_view_matches(project, "v_force")
    assert project.refresh(["v_fast"], complete=True)[0].error is None
    assert_view_matches(project, "v_fast")


def test_a_delta_table_rewritten_with_other_columns_is_caught_before_reading(db, make_project):
    db.execute("CREATE TABLE t (id int PRIMARY KEY, a int); INSERT INTO t SELECT g, g FROM generate_series(1, 20) g")
    project = make_project(["t"], [{"name": "v_force", "query": "SELECT id, a FROM t"},
                                   {"name": "v_fast", "refresh": "fast", "query": "SELECT id, a FROM t"}])
    project.apply()
    spark = project.warehouse.spark
    for name in ("v_force", "v_fast"):  # someone else's job overwrote the views with its own columns
        location = project.config.view_location(name)
        spark.read.format("delta").load(location).withColumnRenamed("a", "b").write.format("delta") \
            .mode("overwrite").option("overwriteSchema", "true").save(location)
    db.execute("UPDATE t SET a = 0 WHERE id = 3")
    before = db.execute("SELECT count(*) FROM mvlog.refresh_history")[0][0]
    results = {r.view: r for r in project.refresh()}
    drift = "the columns of {} differ from the query's columns"
    assert results["v_force"].method == "complete"
    assert results["v_force"].reason == drift.format(project.config.view_location("v_force"))
    assert results["v_fast"].error == "view v_fast cannot be fast-refreshed: " + drift.format(
        project.config.view_location("v_fast"))
    # Decided before the stamp: the refused view started no refresh, so nothing was read for it.
    assert db.execute("SELECT view_name FROM mvlog.refresh_history WHERE id > %s", (before,)) == [("v_force",)]
    assert_view_matches(project, "v_force")
    assert project.refresh(["v_fast"], complete=True)[0].error is None
    assert_view_matches(project, "v_fast")


def test_force_looks_at_a_view_s_delta_table_only_when_it_refreshes_it_fast(db, make_project, monkeypatch):
    """A force view's Delta table is checked after the stamp, once force chose fast: a view it
    refreshes completely is not looked at, and one whose table is gone is still refreshed completely."""
    from mvlog.spark.warehouse import Warehouse

    db.execute("CREATE TABLE t (id int PRIMARY KEY, a int); "
               "INSERT INTO t SELECT g, g FROM generate_series(1, 20000) g; ANALYZE t")  # the share rule needs its rows
    project = make_project(["t"], [{"name": "v_force", "query": "SELECT id, a FROM t"},
                                   {"name": "v_fast", "refresh": "fast", "query": "SELECT id, a FROM t WHERE a > 0"}])
    project.apply()
    looked: list[str] = []
    columns = Warehouse.columns
    monkeypatch.setattr(Warehouse, "columns", lambda self, location: looked.append(location) or columns(self, location))
    db.execute("UPDATE t SET a = a + 1")  # every row: force's share rule takes a complete refresh
    results = {r.view: r for r in project.refresh()}
    assert results["v_force"].method == "complete" and "a complete refresh is cheaper" in results["v_force"].reason
    assert results["v_fast"].method == "fast"
    assert looked == [project.config.view_location("v_fast")]
    shutil.rmtree(project.config.view_location("v_force"))  # someone removed the view's table
    db.execute("UPDATE t SET a = 0 WHERE id = 3")  # one key: force would refresh it fast
    results = {r.view: r for r in project.refresh()}
    assert (results["v_force"].method, results["v_force"].reason) == ("complete", "the Delta table is missing")
    assert sorted(looked[1:]) == sorted(project.config.view_location(v) for v in ("v_force", "v_fast"))
    assert_view_matches(project, "v_force")
    assert_view_matches(project, "v_fast")


def test_a_corrupted_warehouse_path_is_one_clear_error(db, make_project):
    db.execute("CREATE TABLE t (id int PRIMARY KEY, a int); INSERT INTO t VALUES (1, 1)")
    project = make_project(["t"], [{"name": "v", "refresh": "fast", "query": "SELECT * FROM t"}])
    project.apply()
    log_dir = os.path.join(project.config.view_location("v"), "_delta_log")
    for name in os.listdir(log_dir):
        if name.endswith(".json"):
            with open(os.path.join(log_dir, name), "w") as f:
                f.write("{not json")
    db.execute("UPDATE t SET a = 2")
    before = db.execute("SELECT max(id) FROM mvlog.refresh_history")[0][0]
    result = project.refresh()[0]
    # Caught while planning (the fast plan reads the table's columns first), before the stamp:
    # like any refusal at planning, it starts no refresh and leaves no history row.
    assert result.error.startswith(f"cannot inspect {project.config.view_location('v')}: ")
    assert "_delta_log/00000000000000000000.json" in result.error and "\n" not in result.error
    assert db.execute("SELECT max(id) FROM mvlog.refresh_history")[0][0] == before
    assert db.execute("SELECT last_method FROM mvlog.views WHERE name = 'v'")[0][0] == "complete"  # not advanced
    assert {v["name"]: v["staleness"] for v in project.status()["views"]} == {"v": "stale"}  # still pending


def test_a_secret_from_the_environment_never_shows(pg, tmp_path):
    config = tmp_path / "mvlog.yaml"
    config.write_text(yaml.safe_dump({
        "source": {"dsn": f"postgresql://postgres:${{SHOP_PW}}@127.0.0.1:{pg.port}/postgres"},
        "warehouse": str(tmp_path / "wh"), "logs": [], "views": [],
    }))
    env = {**os.environ, "SHOP_PW": "Wr0ng-S3cret!", "TZ": "UTC"}
    for args in (["status"], ["--debug", "status"], ["apply"]):
        result = subprocess.run([sys.executable, "-m", "mvlog", "-c", str(config), *args],
                                capture_output=True, text=True, env=env, timeout=120)
        assert result.returncode == 1
        assert "Wr0ng-S3cret!" not in result.stdout + result.stderr
        assert "password authentication failed" in result.stderr
