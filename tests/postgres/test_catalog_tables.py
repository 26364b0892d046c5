"""Views as catalog tables: with `catalog: {database: mv}`, apply registers every view as an
external Delta table in the Spark session catalog (Spark's embedded one here), queries by name see
each refresh, drop unregisters (the data stays), and a name taken by another table is refused."""

from __future__ import annotations

import pytest
from conftest import refresh_ok

import mvlog.notebook as mvn
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
