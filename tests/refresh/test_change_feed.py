"""Views as change feeds: with `change_feed: true`, Delta's Change Data Feed of a view holds exactly
what each refresh changed, `mvlog optimize` adds nothing to it, and `apply` turns it on and off."""

from __future__ import annotations

from decimal import Decimal

import pytest
from conftest import refresh_ok, visible_columns

pytestmark = pytest.mark.integration

SETUP = """
CREATE TABLE sale (id int PRIMARY KEY, region text, amount numeric(10,2));
INSERT INTO sale SELECT g, 'r' || (g % 4), g * 1.5 FROM generate_series(1, 200) g;
"""
VIEWS = [
    {"name": "sales", "refresh": "fast", "change_feed": True, "query": "SELECT id, region, amount FROM sale"},
    {"name": "totals", "refresh": "fast", "change_feed": True,
     "query": "SELECT region, count(*) AS n, sum(amount) AS total FROM sale GROUP BY region"},
    {"name": "plain", "refresh": "fast", "query": "SELECT id, amount FROM sale WHERE amount > 100"},
]


def feed(project, view: str, first: int, last: int):
    return (project.warehouse.spark.read.format("delta").option("readChangeFeed", "true")
            .option("startingVersion", first).option("endingVersion", last)
            .load(project.config.view_location(view)))


def rows_of(df, kind: str, columns: list[str]) -> set[tuple]:
    return {tuple(r) for r in df.where(df["_change_type"] == kind).select(*columns).collect()}


def test_the_change_feed_of_a_fast_refresh_is_what_it_changed(db, make_project):
    db.execute(SETUP)
    project = make_project(["sale"], VIEWS)
    assert not [r for r in project.apply().builds if r.error]
    spark = project.warehouse.spark
    before = {v: spark.read.format("delta").load(project.config.view_location(v)) for v in ("sales", "totals")}
    before = {v: {tuple(r) for r in df.select(*visible_columns(df.columns)).collect()} for v, df in before.items()}

    db.execute("UPDATE sale SET amount = amount + 1 WHERE id <= 5")        # updates
    db.execute("DELETE FROM sale WHERE id BETWEEN 6 AND 8")                # deletes
    db.execute("INSERT INTO sale VALUES (500, 'r9', 7), (501, 'r1', 8)")  # inserts, and a new group
    db.execute("UPDATE sale SET id = 600 WHERE id = 9")                    # a key update: delete + insert
    results = refresh_ok(project)
    for view in ("sales", "totals"):
        result = results[view]
        version = project.history(view, 1)[0].delta_version
        changes = feed(project, view, version, version)
        kinds = {r["_change_type"]: r["count"] for r in changes.groupBy("_change_type").count().collect()}
        assert kinds.get("insert", 0) == result.rows_inserted, (view, kinds)
        assert kinds.get("update_postimage", 0) == kinds.get("update_preimage", 0) == result.rows_updated, (view, kinds)
        assert kinds.get("delete", 0) == result.rows_deleted, (view, kinds)
        assert result.rows_inserted and result.rows_updated and (result.rows_deleted or view == "totals")
        # The rows: pre-images and deletes were in the view before, post-images and inserts are in it now.
        table = spark.read.format("delta").load(project.config.view_location(view))
        columns = visible_columns(table.columns)
        now = {tuple(r) for r in table.select(*columns).collect()}
        assert rows_of(changes, "update_preimage", columns) | rows_of(changes, "delete", columns) <= before[view]
        assert rows_of(changes, "update_postimage", columns) | rows_of(changes, "insert", columns) <= now
        assert not (rows_of(changes, "delete", columns) & now)
        assert {r[-1] for r in changes.select("_commit_version").collect()} == {version}

    # OPTIMIZE rewrites files without changing data: nothing in the feed.
    project.optimize(["sales"])
    optimized = project.warehouse.mvlog_version(project.config.view_location("sales"))[0]
    assert feed(project, "sales", optimized, optimized).count() == 0

    # A view without the setting has no feed; apply turns it on (and off again).
    location = project.config.view_location("plain")
    with pytest.raises(Exception, match="(?i)change data"):
        feed(project, "plain", 0, 0).count()
    on = make_project(["sale"], [*VIEWS[:2], {**VIEWS[2], "change_feed": True}])
    assert on.apply().change_feeds == {"plain": True}
    db.execute("UPDATE sale SET amount = 1000 WHERE id IN (10, 100)")  # 10 enters the view, 100 was in it
    refresh_ok(on, ["plain"])
    version = on.history("plain", 1)[0].delta_version
    changes = feed(on, "plain", version, version)
    assert rows_of(changes, "insert", ["id", "amount"]) == {(10, Decimal("1000.00"))}
    assert rows_of(changes, "update_postimage", ["id", "amount"]) == {(100, Decimal("1000.00"))}
    assert make_project(["sale"], VIEWS).apply().change_feeds == {"plain": False}
    assert "delta.enableChangeDataFeed" not in {
        k for k, v in on.warehouse._detail(location)["properties"].items() if v == "true"}
