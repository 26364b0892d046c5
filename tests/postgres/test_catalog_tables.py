"""Views as catalog tables: with `catalog: {database: mv}`, apply registers every view as an
external Delta table in the Spark session catalog (Spark's embedded one here), queries by name see
each refresh, drop unregisters (the data stays), and a name taken by another table is refused."""

from __future__ import annotations

import pytest
from conftest import refresh_ok

import mvlog.commands.notebook as mvn
from mvlog.errors import WarehouseError

pytestmark = pytest.mark.integration

SETUP = """
CREATE TABLE item (id int PRIMARY KEY, kind text, price numeric(8,2));
INSERT INTO item SELECT g, 'k' || (g % 3), g FROM generate_series(1, 30) g;
"""
VIEWS = [
    {"name": "items", "refresh": "fast", "query": "SELECT id, kind, price FROM item"},
    {"name": "kinds", "refresh": "fast", "query": "SELECT kind, count(*) AS n FROM item GROUP BY kind"},
]


def test_views_are_catalog_tables(db, make_project, tmp_path):
    db.execute(SETUP)
    database = f"mv_{db.name}"  # one Spark session for the whole test run: a database of its own
    project = make_project(["item"], VIEWS, extra=f"catalog: {{database: {database}}}\n")
    report = project.apply()
    assert not [r for r in report.builds if r.error]
    assert sorted(report.tables_registered) == [f"{database}.items", f"{database}.kinds"]
    spark = project.warehouse.spark
    assert spark.table(f"{database}.items").count() == 30
    assert spark.sql(f"SELECT sum(n) FROM {database}.kinds").collect()[0][0] == 30
    assert project.apply().tables_registered == []  # registered already

    db.execute("DELETE FROM item WHERE id <= 6; UPDATE item SET kind = 'new' WHERE id = 7")
    refresh_ok(project)
    assert spark.table(f"{database}.items").count() == 24
    assert {tuple(r) for r in spark.sql(f"SELECT kind, n FROM {database}.kinds WHERE kind = 'new'").collect()} == \
        {("new", 1)}
    # The notebook helper reads the view by its name.
    read = mvn.read_view("kinds", str(tmp_path / "mvlog.yaml"))
    assert {r["kind"]: r["n"] for r in read.collect()} == {r["kind"]: r["n"] for r in
                                                          spark.table(f"{database}.kinds").collect()}
    assert f"{database}.kinds" in read._jdf.queryExecution().analyzed().toString()  # read by its name

    # A session whose catalog lost the names (a new kernel, a new engine) gets them from mvn.session().
    spark.sql(f"DROP TABLE {database}.items")
    mvn.session(str(tmp_path / "mvlog.yaml"))
    assert spark.table(f"{database}.items").count() == 24

    # Drop unregisters; the Delta table stays where it was.
    assert project.drop_views(["kinds"]) == [
        f"view kinds dropped (its Delta table {project.config.view_location('kinds')} is kept)"]
    assert not spark.catalog.tableExists(f"{database}.kinds")
    assert spark.read.format("delta").load(project.config.view_location("kinds")).count() == 4

    # A catalog name that another table holds is refused, not replaced.
    spark.sql(f"DROP TABLE {database}.items")
    spark.sql(f"CREATE TABLE {database}.items (x INT) USING DELTA LOCATION '{tmp_path / 'elsewhere'}'")
    fresh = make_project(["item"], VIEWS[:1], extra=f"catalog: {{database: {database}}}\n")
    with pytest.raises(WarehouseError, match=f"catalog table {database}.items is .*elsewhere, not this view's table"):
        fresh.apply()


@pytest.mark.deep  # a Hive metastore's Spark process of its own; the main tier: test_views_are_catalog_tables
def test_names_persist_in_a_metastore_and_a_new_process_finds_them(db, tmp_path):
    """With ``catalog.metastore`` (a directory: Spark's embedded Hive metastore), apply's names
    outlive its process: a new Spark process reads ``mv.<view>`` by name without registering."""
    import json
    import subprocess
    import sys

    import yaml
    from conftest import SUBPROCESS_SPARK

    db.execute(SETUP)
    config = tmp_path / "mvlog.yaml"
    config.write_text(yaml.safe_dump({
        "source": {"dsn": db.dsn}, "warehouse": str(tmp_path / "wh"), "spark": SUBPROCESS_SPARK,
        "catalog": {"database": "mv", "metastore": "metastore"}, "logs": [{"table": "item"}], "views": VIEWS}))
    applied = subprocess.run([sys.executable, "-m", "mvlog", "-c", str(config), "apply"], capture_output=True,
                             text=True, cwd=tmp_path, timeout=600)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "catalog table mv.items registered" in applied.stdout
    assert (tmp_path / "metastore" / "metastore_db").is_dir()
    reader = ("import json, sys\n"
              "from mvlog.config import load_config\n"
              "from mvlog.spark.session import build_session\n"
              "from mvlog.spark.settings import for_project\n"
              "spark = build_session(for_project(load_config(sys.argv[1]))[0])\n"
              "print(json.dumps({'tables': sorted(t.name for t in spark.catalog.listTables('mv')),\n"
              "                  'items': spark.table('mv.items').count(),\n"
              "                  'n': spark.sql('SELECT sum(n) FROM mv.kinds').collect()[0][0]}))\n")
    read = subprocess.run([sys.executable, "-c", reader, str(config)], capture_output=True, text=True, cwd=tmp_path,
                          timeout=600)
    assert read.returncode == 0, read.stderr[-3000:]
    assert json.loads(read.stdout.strip().splitlines()[-1]) == {"tables": ["items", "kinds"], "items": 30, "n": 30}
