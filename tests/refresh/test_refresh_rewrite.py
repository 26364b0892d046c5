"""Writes sized to the change: views of at most ``delta.rewrite_max_rows`` rows are written by
rewriting their table, with the MERGE's counts; views with a change feed always MERGE."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
from conftest import examples, refresh_ok, visible_columns
from hypothesis import given, settings
from shop import check_views, random_dml_then_refresh, sequences, shared_shop

pytestmark = pytest.mark.integration

VIEWS = [
    {"name": "open_orders", "refresh": "fast",
     "query": "SELECT id, customer_id, amount FROM orders WHERE status IS DISTINCT FROM 'cancelled'"},
    {"name": "order_customers", "refresh": "fast",
     "query": "SELECT o.id AS order_id, c.name, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id"},
    {"name": "by_status", "refresh": "fast",  # NULL group keys: rows matched null-safely
     "query": "SELECT status, count(*) AS n, sum(amount) AS total, max(amount) AS hi FROM orders GROUP BY status"},
    {"name": "customer_orders", "refresh": "fast",  # an outer join: rows with NULL partner keys
     "query": "SELECT c.id AS customer_id, c.name, o.id AS order_id FROM customers c "
              "LEFT JOIN orders o ON o.customer_id = c.id"},
    {"name": "order_feed", "refresh": "fast", "change_feed": True,
     "query": "SELECT id, status, amount FROM orders"},
]
REWRITTEN = [v["name"] for v in VIEWS if not v.get("change_feed")]


@pytest.fixture(scope="module", params=["local"])  # over Spark Connect: test_connect_paths
def built_shop(request, pg, tmp_path_factory):
    with shared_shop(request, pg, tmp_path_factory.mktemp("shop"), VIEWS, request.param,
                     rewrite_max_rows=1000) as built:
        yield built


def rows_by_key(project, view: str, version: int | None = None) -> dict:
    """The view's rows (visible columns) by view key, at ``version`` (None: the newest)."""
    reader = project.warehouse.spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    df = reader.load(project.config.view_location(view))
    keys = list(project.plan(view).key_columns)
    return {tuple(r[k] for k in keys): tuple(r[c] for c in visible_columns(df.columns)) for r in df.collect()}


def version(project, view: str) -> int:
    return project.warehouse.history(project.config.view_location(view), 1).collect()[0]["version"]


def test_small_views_are_rewritten_with_the_merges_counts_and_a_change_feed_view_merges(built_shop):
    shop, db = built_shop.seeded(), built_shop.db
    assert {v["name"]: shop.plan(v["name"]).to_json()["write"] for v in VIEWS} == {
        **{name: "rewrite" for name in REWRITTEN}, "order_feed": "merge"}
    assert "write: the table rewritten whole" in shop.plan("open_orders").describe()
    before = {name: (version(shop, name), rows_by_key(shop, name)) for name in REWRITTEN}
    db.execute("INSERT INTO orders VALUES (20, 1, 'open', 1.00, 1)")             # a new row in every view
    db.execute("UPDATE orders SET amount = 99.99 WHERE id = 1")                   # updated rows
    db.execute("DELETE FROM orders WHERE id = 5; UPDATE orders SET id = 21 WHERE id = 4")  # deleted, key moved
    db.execute("UPDATE orders SET status = NULL WHERE id = 2")                    # into the NULL group
    results = refresh_ok(shop)
    check_views(shop, VIEWS)
    for name in REWRITTEN:
        old_version, old = before[name]
        new = rows_by_key(shop, name)
        expected = (len(new.keys() - old.keys()), sum(1 for k in new.keys() & old.keys() if new[k] != old[k]),
                    len(old.keys() - new.keys()))
        r = results[name]
        assert (r.rows_inserted, r.rows_updated, r.rows_deleted) == expected, name
        assert expected != (0, 0, 0) and r.row_count == len(new), name
        history = shop.warehouse.history(shop.config.view_location(name), 1).collect()[0]
        assert history["version"] == old_version + 1 and history["operation"] == "WRITE", name
        assert old == rows_by_key(shop, name, old_version)  # time travel still reads the old rows
    feed = shop.warehouse.history(shop.config.view_location("order_feed"), 1).collect()[0]
    assert feed["operation"] == "MERGE"
    # a change that changes no view row: counted as read, nothing committed
    versions = {name: version(shop, name) for name in ("open_orders", "by_status")}
    db.execute("UPDATE orders SET priority = priority + 1 WHERE id = 1")
    results = refresh_ok(shop, ["open_orders", "by_status"])
    assert {n: (r.keys_read, r.rows_inserted + r.rows_updated + r.rows_deleted) for n, r in results.items()} == {
        "open_orders": (1, 0), "by_status": (1, 0)}
    assert {name: version(shop, name) for name in versions} == versions
    check_views(shop, VIEWS)


@pytest.mark.parametrize("built_shop", ["local"], indirect=True)  # plans only
def test_a_view_above_the_threshold_merges(built_shop):
    shop = built_shop.seeded()
    plan = shop.plan("open_orders")
    from mvlog.pipeline import plan as planner
    assert plan.write is planner.Write.REWRITE
    # above the threshold the changed keys are replaced; a change feed merges
    assert planner.with_sized_write(plan, 1001, False, 1000).write is planner.Write.REPLACE  # one row too many
    assert planner.with_sized_write(plan, 10, True, 1000).write is planner.Write.MERGE  # a change feed
    assert planner.with_sized_write(plan, 10, False, 0).write is planner.Write.REPLACE  # switched off
    unhashed = dataclasses.replace(plan, row_hash=False)  # a table written before row hashes
    assert planner.with_sized_write(unhashed, 1001, False, 1000).write is planner.Write.MERGE
    assert Counter(shop.plan(v["name"]).to_json()["write"] for v in VIEWS)["rewrite"] == len(REWRITTEN)


@pytest.mark.slow
@pytest.mark.parametrize("built_shop", ["local"], indirect=True)
@settings(max_examples=examples(1))
@given(sequence=sequences)
def test_random_dml_then_rewrites_equal_postgres(built_shop, sequence):
    random_dml_then_refresh(built_shop, sequence, VIEWS)
