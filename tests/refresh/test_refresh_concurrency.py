"""Refreshing views and refresh groups concurrently on one Spark (``concurrency``): each unit
on its own PostgreSQL connection and Spark session; results, history and commits per view."""

from __future__ import annotations

import threading

import pytest
from conftest import SPARK_MODES, assert_view_matches

import mvlog.pipeline.refresh
from mvlog.config import ViewConfig
from mvlog.pipeline.lanes import longest_first, refresh_units

SCHEMA = """
CREATE TABLE accounts (id int PRIMARY KEY, branch int NOT NULL, balance numeric(14,2) NOT NULL);
INSERT INTO accounts SELECT g, 1 + g % 3, 100 FROM generate_series(1, 40) g;
CREATE TABLE orders (id int PRIMARY KEY, account_id int NOT NULL, amount numeric(10,2), status text);
INSERT INTO orders SELECT g, 1 + g % 40, g, CASE WHEN g % 4 = 0 THEN 'open' ELSE 'done' END
FROM generate_series(1, 200) g;
"""
VIEWS = [
    {"name": "account_list", "refresh": "fast", "query": "SELECT id, branch, balance FROM accounts"},
    {"name": "open_orders", "refresh": "fast",
     "query": "SELECT id, account_id, amount FROM orders WHERE status = 'open'"},
    {"name": "branch_orders", "refresh": "fast", "group": "branches",
     "query": "SELECT a.branch, count(*) AS orders, sum(o.amount) AS amount "
              "FROM orders o JOIN accounts a ON a.id = o.account_id GROUP BY a.branch"},
    {"name": "branch_totals", "refresh": "fast", "group": "branches",
     "query": "SELECT branch, count(*) AS accounts, sum(balance) AS total FROM accounts GROUP BY branch"},
]


def test_units_are_single_views_and_whole_groups_in_the_order_given():
    views = [ViewConfig(name=n, query="SELECT 1 AS x", group=g)
             for n, g in [("a", None), ("b", "g1"), ("c", None), ("d", "g1"), ("e", "g2")]]
    assert [[v.name for v in unit] for unit in refresh_units(views)] == [["a"], ["b", "d"], ["c"], ["e"]]


def test_workers_take_the_longest_units_first_and_units_never_measured_before_them():
    views = [ViewConfig(name=n, query="SELECT 1 AS x", group=g)
             for n, g in [("a", None), ("b", "g1"), ("c", None), ("d", "g1"), ("e", None), ("f", None)]]
    seconds = {"a": 1.0, "b": 2.0, "c": 5.0, "d": 4.0, "e": None, "f": 1.0}  # e never refreshed
    ordered = longest_first(refresh_units(views), seconds)
    assert [[v.name for v in unit] for unit in ordered] == [["e"], ["b", "d"], ["c"], ["a"], ["f"]]
    assert longest_first(refresh_units(views), {}) == refresh_units(views)  # nothing known: as given


@pytest.mark.integration
@pytest.mark.parametrize("spark_mode", SPARK_MODES)
def test_independent_units_refresh_at_once_and_stay_separate(db, make_project, monkeypatch, spark_mode):
    db.execute(SCHEMA)
    project = make_project(["accounts", "orders"], VIEWS, extra="concurrency: 3\n", spark_mode=spark_mode)
    assert [r.error for r in project.apply().builds] == [None] * 4
    db.execute("UPDATE accounts SET branch = 3 - branch, balance = balance + id WHERE id % 5 = 0")
    db.execute("UPDATE orders SET status = 'open', amount = amount * 2 WHERE id % 7 = 0")
    db.execute("DELETE FROM orders WHERE id % 11 = 0")
    db.execute("UPDATE accounts SET id = id + 1000 WHERE id = 3")  # a primary-key update

    # All three units (two views, one group) must be past their stamp at the same time: with
    # one unit at a time the barrier would break instead.
    barrier = threading.Barrier(3, timeout=120)
    met: list[bool] = []
    checkpoint = mvlog.pipeline.refresh.checkpoint

    def meet_after_stamp(name: str) -> None:
        if name == "after_stamp":
            try:
                barrier.wait()
                met.append(True)
            except threading.BrokenBarrierError:
                met.append(False)
        checkpoint(name)

    monkeypatch.setattr(mvlog.pipeline.refresh, "checkpoint", meet_after_stamp)
    # The group's build as if it took a minute: its unit is taken first (the views' builds say how long).
    db.execute("UPDATE mvlog.refresh_history SET finished_at = started_at + interval '60 s' "
               "WHERE view_name = 'branch_totals'")
    orders: list[list[list[str]]] = []

    def spied(units, seconds):
        ordered = longest_first(units, seconds)
        orders.append([[v.name for v in unit] for unit in ordered])
        return ordered

    monkeypatch.setattr(mvlog.pipeline.refresh, "longest_first", spied)
    results = project.refresh()
    assert [unit[0] for unit in orders[0]][:1] == ["branch_orders"], orders
    assert [r.view for r in results] == [v["name"] for v in VIEWS]
    assert [(r.error, str(r.method)) for r in results] == [(None, "fast")] * 4
    assert met == [True, True, True]
    group = [r for r in results if r.view.startswith("branch_")]
    assert group[0].snaptime == group[1].snaptime  # the group still shares one stamp

    for view in VIEWS:
        assert_view_matches(project, view["name"])
        history = project.history(view["name"], limit=1)[0]
        assert (history.status, history.method) == ("succeeded", "fast")
        # Commit settings are per session: each view's commit names that view.
        last = project.warehouse.last_commit_metadata(project.config.view_location(view["name"]))
        assert last["view"] == view["name"] and last["method"] == "fast"
