"""Whose a view's location is: mvlog writes a view only into a missing or empty directory or
into the Delta table it wrote for that view — never beside someone else's files, never over
another table — and VACUUM runs only on its own tables."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import yaml
from conftest import assert_view_matches, refresh_ok

from mvlog.errors import ConfigError, WarehouseError
from mvlog.model import Occupant

PART = "part-00000-0b1d5f4e-8a3c-4a58-9a9e-6c1f2d3e4f50-c000.snappy.parquet"


def test_a_location_may_hold_nothing_or_the_views_own_table():
    assert Occupant().refusal("v", "/wh/v") is None
    assert Occupant(delta=True, view="v").refusal("v", "/wh/v") is None
    assert Occupant(delta=True, view="w").refusal("v", "/wh/v") == "/wh/v holds view w's Delta table, not view v's"
    assert Occupant(delta=True).refusal("v", "/wh/v") == ("/wh/v holds a Delta table that mvlog did not write, "
                                                          "not view v's")
    # A table an older mvlog wrote (its recent commits name no view) is the view's where the catalog has it.
    older = Occupant(delta=True, mvlog=True)
    assert older.refusal("v", "/wh/v", registered_here=True) is None
    assert older.refusal("v", "/wh/v") is not None
    assert Occupant(delta=True).refusal("v", "/wh/v", registered_here=True) is not None  # not mvlog's at all
    assert Occupant(delta=True, view="w", mvlog=True).refusal("v", "/wh/v", registered_here=True) is not None
    files = Occupant(files=("file:/wh/v/data.csv",))
    assert files.refusal("v", "/wh/v") == "/wh/v is not empty and holds no Delta table (data.csv)"
    assert files.refusal("v", "/wh/v", True, build_started=True) is not None  # a CSV is nobody's build
    many = Occupant(files=tuple(f"file:/wh/v/x/{i}.csv" for i in range(3)))
    assert many.refusal("v", "/wh/v").endswith("(0.csv, 1.csv, 2.csv, ...)")
    # The data files of a first build that died before its commit: that build's own, if one began there.
    orphan = Occupant(files=(f"file:/wh/v/{PART}",))
    assert orphan.refusal("v", "/wh/v", registered_here=True, build_started=True) is None
    assert orphan.refusal("v", "/wh/v") is not None


@pytest.mark.integration
def test_an_unwritable_root_fails_before_spark_starts_and_through_hadoop_once_it_has(spark, tmp_path):
    from mvlog.config import Config
    from mvlog.spark.opening import check_local_root
    from mvlog.spark.warehouse import Warehouse

    def config(warehouse: str) -> Config:
        return Config.model_validate({"source": {"dsn": "postgresql://localhost/x"}, "warehouse": warehouse,
                                      "spark": {"master": "local[1]"}, "logs": [{"table": "t"}],
                                      "views": [{"name": "v", "query": "SELECT * FROM t"}]})

    check_local_root(config(str(tmp_path / "new" / "root")))  # made, as Spark would make it
    assert (tmp_path / "new" / "root").is_dir() and not list((tmp_path / "new" / "root").iterdir())
    for root in ("/proc/mvlog-warehouse", "file:///proc/mvlog-warehouse"):
        with pytest.raises(WarehouseError, match="^the warehouse .*/proc/mvlog-warehouse is not writable: "):
            check_local_root(config(root))
    check_local_root(config("s3a://bucket/warehouse"))  # not this machine's disk: left to Spark
    with pytest.raises(WarehouseError, match="^the warehouse /proc/mvlog-warehouse is not writable: "):
        Warehouse(spark, "/proc/mvlog-warehouse").check_writable()


@pytest.mark.integration
def test_apply_refuses_a_warehouse_holding_other_data_and_applies_nothing(db, tmp_path, connect_engine):
    db.execute("CREATE TABLE acct (id int PRIMARY KEY, v int); INSERT INTO acct VALUES (1, 1)")
    warehouse = tmp_path / "shared"
    (warehouse / "big_acct").mkdir(parents=True)
    (warehouse / "wh_probe").mkdir()
    (warehouse / "readme.txt").write_text("team data, do not delete\n")
    (warehouse / "big_acct" / "data.csv").write_text("id,v\n1,1\n")
    (warehouse / "wh_probe" / "part-0.csv").write_text("x\n")
    config = tmp_path / "mvlog.yaml"
    config.write_text(yaml.safe_dump({
        "source": {"dsn": db.dsn}, "warehouse": str(warehouse), "spark": {"remote": connect_engine.remote},
        "logs": [{"table": "acct"}],
        "views": [{"name": "ok_view", "query": "SELECT id FROM acct"},
                  {"name": "big_acct", "query": "SELECT id, v FROM acct"},
                  {"name": "wh_probe", "query": "SELECT v FROM acct"}]}))
    result = subprocess.run([sys.executable, "-m", "mvlog", "-q", "-c", str(config), "apply"],
                            capture_output=True, text=True, timeout=300, env={**os.environ, "TZ": "UTC"})
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"Error: views[1] (big_acct): {warehouse}/big_acct is not empty and holds no "
                                    f"Delta table (data.csv); mvlog writes a view only into"), result.stderr
    # Nothing applied: no catalog, no log, no Delta table; the foreign files as they were.
    assert db.execute("SELECT to_regnamespace('mvlog')")[0][0] is None
    assert db.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'acct'::regclass")[0][0] == 0
    assert sorted(p.name for p in warehouse.iterdir()) == ["_mvlog_write_probe", "big_acct", "readme.txt", "wh_probe"]
    assert [p.name for p in (warehouse / "big_acct").iterdir()] == ["data.csv"]
    assert [p.name for p in (warehouse / "wh_probe").iterdir()] == ["part-0.csv"]


@pytest.mark.integration
def test_a_view_moves_only_with_its_own_table_and_vacuum_spares_other_tables(db, make_project, tmp_path):
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t SELECT g, g FROM generate_series(1, 20) g")
    views = [{"name": "a", "query": "SELECT id, v FROM t"}, {"name": "b", "query": "SELECT id FROM t WHERE v > 5"}]
    project = make_project(["t"], views)
    project.apply()
    old_root = tmp_path / "warehouse"

    # Another view's table where b would go: refused, nothing registered anew.
    other_root = tmp_path / "other"
    other_root.mkdir()
    shutil.copytree(old_root / "a", other_root / "b")
    moved = make_project(["t"], views, warehouse=str(other_root))
    with pytest.raises(ConfigError,
                       match=rf"^views\[1\] \(b\): {other_root}/b holds view a's Delta table, not view b's"):
        moved.apply()
    assert db.execute("SELECT count(*) FROM mvlog.views WHERE location LIKE %s", (f"{other_root}%",))[0][0] == 0

    # The explicit move: copy each view's table (its _delta_log and files) to the new warehouse.
    shutil.rmtree(other_root / "b")
    for name in ("a", "b"):
        shutil.copytree(old_root / name, other_root / name)
    report = moved.apply()
    assert report.builds == []  # nothing rebuilt: the tables moved with their state
    db.execute("UPDATE t SET v = 0 WHERE id = 10")
    assert {r.view: r.method for r in refresh_ok(moved).values()} == {"a": "fast", "b": "fast"}
    assert_view_matches(moved, "a")
    assert_view_matches(moved, "b")

    # A table that is not a's any more (replaced behind mvlog's back): optimize --vacuum leaves it alone.
    spark = moved.warehouse.spark
    shutil.rmtree(other_root / "a")
    spark.range(3).write.format("delta").save(str(other_root / "a"))
    (other_root / "a" / "keep.csv").write_text("someone's\n")
    with pytest.raises(WarehouseError, match=rf"view a not optimized: {other_root}/a holds a Delta table that mvlog "
                                             rf"did not write, not view a's"):
        moved.optimize(["a"], vacuum=True)
    assert (other_root / "a" / "keep.csv").exists()
