"""Refresh groups: views refreshed together reflect exactly one committed state of the database."""

from __future__ import annotations

import pytest
from conftest import assert_views_match

import mvlog.pipeline.refresh

pytestmark = pytest.mark.integration

SCHEMA = """
CREATE TABLE accounts (id int PRIMARY KEY, branch int NOT NULL, balance numeric(14,2) NOT NULL);
INSERT INTO accounts SELECT g, 1 + g % 3, 100 FROM generate_series(1, 30) g;
"""
VIEWS = [
    {"name": "account_list", "refresh": "fast", "group": "bank",
     "query": "SELECT id, branch, balance FROM accounts"},
    {"name": "branch_totals", "refresh": "fast", "group": "bank",
     "query": "SELECT branch, count(*) AS accounts, sum(balance) AS total FROM accounts GROUP BY branch"},
]


def detail_by_branch(project) -> dict:
    detail = project.warehouse.spark.read.format("delta").load(project.config.view_location("account_list"))
    return {r["branch"]: (r["n"], r["s"]) for r in detail.groupBy("branch").agg({"*": "count", "balance": "sum"})
            .withColumnsRenamed({"count(1)": "n", "sum(balance)": "s"}).collect()}


def totals(project) -> dict:
    table = project.warehouse.spark.read.format("delta").load(project.config.view_location("branch_totals"))
    return {r["branch"]: (r["accounts"], r["total"]) for r in table.collect()}


@pytest.mark.parametrize(("point", "spark_mode"), [
    ("after_stamp", "local"), ("after_read", "local"),
    # the commit lands between the read and the Delta writes; over Connect deep (the local runs cover it)
    pytest.param("after_read", "connect", marks=pytest.mark.deep),
])
def test_a_commit_during_a_group_refresh_is_all_or_nothing_in_the_group(db, make_project, monkeypatch, point,
                                                                        spark_mode):
    """A writer commits while the group refresh runs: the group shows none of it (the next refresh all)."""
    db.execute(SCHEMA)
    project = make_project(["accounts"], VIEWS, spark_mode=spark_mode)
    project.apply()
    db.execute("UPDATE accounts SET balance = balance + 5 WHERE id = 3")  # branch 1 changes before the refresh

    checkpoint = mvlog.pipeline.refresh.checkpoint

    def writer_commits_at(name: str) -> None:
        if name == point:  # account 6 (not in the window) moves from branch 1 to branch 2
            db.execute("UPDATE accounts SET branch = 2, balance = balance + 1 WHERE id = 6")
        checkpoint(name)

    monkeypatch.setattr(mvlog.pipeline.refresh, "checkpoint", writer_commits_at)
    results = project.refresh(group="bank")
    assert [r.error for r in results] == [None, None]
    assert detail_by_branch(project) == totals(project)
    assert totals(project)[1] == (10, 1005)  # the move of account 6 is not half-applied: not applied at all

    monkeypatch.setattr(mvlog.pipeline.refresh, "checkpoint", checkpoint)
    results = project.refresh(group="bank")
    assert [r.error for r in results] == [None, None]
    assert detail_by_branch(project) == totals(project)
    assert_views_match(project, VIEWS)
