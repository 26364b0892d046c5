"""A fast refresh that reads its view's whole query (:mod:`mvlog.pipeline.readscope`): one shop
with a view of every strategy, each read whole and merged into its table — the rows the query no
longer has deleted, unchanged rows left alone, the state brought to the stamp from the logs as
after a keyed read — checked against PostgreSQL after fixed and random DML; and the choice itself,
made from the view's measured refreshes."""

from __future__ import annotations

import contextlib

import pytest
from conftest import examples, refresh_ok
from hypothesis import given, settings
from shop import check_views, random_dml_then_refresh, sequences, shared_shop, strategy_views

import mvlog.pipeline.readscope
from mvlog.sql.strategies.registry import strategy_of

pytestmark = pytest.mark.integration

# A composed view too (a window over an aggregated piece, TPC-DS q12's shape): its record takes rows
# from its keyed read, so it is never read whole.
VIEWS = strategy_views("w_") + [
    {"name": "w_share", "refresh": "fast",
     "query": "SELECT customer_id, status, sum(amount) AS total, "
              "sum(sum(amount)) OVER (PARTITION BY customer_id) AS customer_total FROM orders "
              "GROUP BY customer_id, status"}]
NAMES = [v["name"] for v in VIEWS]
MEASURED = "measured"  # the reason the forced rule gives


@pytest.fixture(scope="module")
def built_shop(request, pg, tmp_path_factory):
    with shared_shop(request, pg, tmp_path_factory.mktemp("shop"), VIEWS, "local", rewrite_max_rows=1000) as built:
        yield built


@contextlib.contextmanager
def every_read_whole():
    """Every fast refresh reads its view's whole query, whatever its refreshes measured."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mvlog.pipeline.readscope, "whole_read", lambda measured, row_count: MEASURED)
        yield


def keyed_only(project) -> set[str]:
    """The views whose record takes rows from their keyed read (composed views): never read whole."""
    return {n for n in NAMES if strategy_of(project.compiler.check(project.config.view(n)).shape).record_takes_read()}


def refreshed_whole(project) -> dict:
    """A refresh of every view, each changed one fast and read whole (but the keyed-only ones)."""
    results, keyed = refresh_ok(project), keyed_only(project)
    assert {v: (r.method, "read_whole" in r.phases) for v, r in results.items() if r.method != "fresh"} == {
        v: ("fast", v not in keyed) for v, r in results.items() if r.method != "fresh"}, results
    return results


def test_every_strategy_read_whole_deletes_what_the_query_lost_and_leaves_unchanged_rows_alone(built_shop):
    project, db = built_shop.seeded(), built_shop.db
    with every_read_whole():
        db.execute("INSERT INTO orders VALUES (6, 2, 'open', 99.00, 1), (7, NULL, NULL, 1.00, 2)")
        db.execute("UPDATE orders SET id = 8 WHERE id = 1")  # a primary-key update
        plans = {name: project.plan(name).to_json() for name in NAMES}
        keyed = keyed_only(project)
        assert keyed == {"w_share"}  # composed over its aggregated piece
        assert {n: (p["read"], p["read_reason"]) for n, p in plans.items()} == {
            n: ("keys", None) if n in keyed else ("whole", MEASURED) for n in NAMES}
        assert {plans[n]["write"] for n in NAMES if n not in keyed} == {"merge"}
        assert "read: the whole query" in project.plan("w_recomputed").describe()
        refreshed_whole(project)
        check_views(project, VIEWS)
        # A group, a nation and a customer's rows gone from the query: deleted from the tables.
        db.execute("DELETE FROM orders WHERE status = 'shipped'; DELETE FROM nation WHERE id = 3; "
                   "UPDATE customers SET name = 'Zed' WHERE id = 2")
        spark = project.warehouse.spark
        location = project.config.view_location("w_by_status")
        before = project.history("w_by_status", limit=1)[0].delta_version
        results = refreshed_whole(project)
        check_views(project, VIEWS)
        # The change feed holds the changed groups only: 'shipped' deleted; the others untouched.
        changes = (spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", before + 1)
                   .load(location).select("status", "_change_type").collect())
        assert sorted((r["status"], r["_change_type"]) for r in changes) == [("shipped", "delete")]
        assert (results["w_by_status"].rows_inserted, results["w_by_status"].rows_updated,
                results["w_by_status"].rows_deleted) == (0, 0, 1)
        # Nothing changed for a view: its whole read writes nothing.
        db.execute("UPDATE customers SET segment = segment WHERE id = 1")
        quiet = refreshed_whole(project)["w_join"]
        assert (quiet.rows_inserted, quiet.rows_updated, quiet.rows_deleted) == (0, 0, 0)
        # Every row gone: the whole read is empty, and the table empties too.
        db.execute("DELETE FROM orders")
        refreshed_whole(project)
        check_views(project, VIEWS)


@pytest.mark.slow
@settings(max_examples=examples(1), deadline=None)
@given(sequence=sequences)
def test_random_dml_read_whole_refreshes_exactly(built_shop, sequence):
    with every_read_whole():
        random_dml_then_refresh(built_shop, sequence, VIEWS)


def test_a_view_whose_keyed_reads_cost_more_than_its_whole_query_reads_it_whole(built_shop):
    project, db = built_shop.seeded(), built_shop.db
    # The view's fast refreshes as if measured before phases were recorded (the tests above read whole)
    db.execute("UPDATE mvlog.refresh_history SET phases = NULL WHERE view_name = 'w_above_average' "
               "AND method = 'fast'")
    db.execute("UPDATE orders SET amount = amount + 1 WHERE id = 2")
    first = refresh_ok(project, ["w_above_average"])["w_above_average"]
    assert "read" in first.phases and "read_whole" not in first.phases  # keyed: nothing measured it dearer
    # Its keyed read as if it had taken a minute; its build's write phase measured the whole query.
    db.execute("UPDATE mvlog.refresh_history SET phases = phases || '{\"read\": 60}' WHERE id = (SELECT max(id) "
               "FROM mvlog.refresh_history WHERE view_name = 'w_above_average' AND method = 'fast')")
    db.execute("UPDATE orders SET amount = amount + 1 WHERE id = 2")
    plan = project.plan("w_above_average").to_json()
    assert plan["read"] == "whole" and "its build, read and written" in plan["read_reason"], plan
    assert plan["read_reason"].endswith("costs less than its changed keys' rows (60.0 s)")
    second = refresh_ok(project, ["w_above_average"])["w_above_average"]
    assert second.method == "fast" and "read_whole" in second.phases, second
    check_views(project, [v for v in VIEWS if v["name"] == "w_above_average"])
    assert project.explain("w_above_average").next_refresh["read"] == "whole"  # its whole read measures itself
