"""The analysis of queries made of several SELECTs: set operations, an aggregate over a UNION ALL,
window functions over a query (pure, no database)."""

from __future__ import annotations

import pytest
import sqlglot
from facts import CATALOG
from sqlglot import exp

from mvlog.sql.analyze import analysis, compound
from mvlog.sql.analyze.analysis import ViewClass, analyze

OVER_UNION = ("SELECT s.status, sum(s.amount) AS t FROM (SELECT status, amount FROM orders UNION ALL "
              "SELECT name, id FROM customers) s {where}GROUP BY s.status")


def tree(query: str) -> exp.Expr:
    return sqlglot.parse_one(query, read="postgres")


class Recorder:
    """The one-SELECT analysis, noting each query it is handed."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def __call__(self, query, select, not_null):
        self.queries.append(query)
        return analysis._analyze_select(query, select, not_null)


def test_a_union_s_branches_are_analysed_again_as_select_distinct():
    seen = Recorder()
    union = tree("SELECT id, amount FROM orders UNION SELECT id, nation_id FROM customers")
    result = compound.analyze_set_operation("q", union, None, seen)
    assert result.view_class is ViewClass.UNION and result.distinct and not result.reasons
    assert [b.query for b in result.branches] == ["SELECT DISTINCT id, amount FROM orders",
                                                  "SELECT DISTINCT id, nation_id FROM customers"]
    assert seen.queries == ["SELECT id, amount FROM orders", "SELECT DISTINCT id, amount FROM orders",
                            "SELECT id, nation_id FROM customers", "SELECT DISTINCT id, nation_id FROM customers"]


def test_a_union_all_keeps_its_branches_as_written():
    result = compound.analyze_set_operation("q", tree("SELECT id FROM orders UNION ALL SELECT id FROM customers"),
                                            None, Recorder())
    assert result.view_class is ViewClass.UNION and not result.distinct
    assert [b.query for b in result.branches] == ["SELECT id FROM orders", "SELECT id FROM customers"]


@pytest.mark.parametrize(("query", "reason"), [
    ("SELECT id FROM orders INTERSECT SELECT id FROM customers", "set operations (INTERSECT)"),
    ("SELECT id FROM orders UNION ALL SELECT id FROM customers LIMIT 3", "LIMIT/OFFSET"),
    ("SELECT status, count(*) FROM orders GROUP BY status UNION SELECT name, 1 FROM customers",
     "UNION branch 1: a UNION of aggregates"),
    ("(SELECT id FROM orders UNION SELECT id FROM customers) UNION ALL SELECT id FROM orders",
     "a UNION (distinct) inside a UNION ALL"),
])
def test_a_set_operation_that_cannot_be_fast_says_why_and_has_no_branches(query, reason):
    result = compound.analyze_set_operation("q", tree(query), None, Recorder())
    assert result.view_class is ViewClass.OTHER and not result.branches
    assert any(reason in r for r in result.reasons), result.reasons


@pytest.mark.parametrize(("query", "plain"), [
    ("SELECT DISTINCT status FROM orders", True),
    ("SELECT status FROM orders", False),
    ("SELECT DISTINCT ON (status) status FROM orders", False),
    ("SELECT DISTINCT status FROM orders GROUP BY status", False),
    ("SELECT DISTINCT count(*) AS n FROM orders", False),
    ("SELECT DISTINCT rank() OVER (PARTITION BY a ORDER BY b) AS r FROM orders", False),
])
def test_plain_distinct_is_a_select_distinct_that_aggregates_nothing(query, plain):
    assert compound.plain_distinct(tree(query)) is plain


def test_an_aggregate_over_a_union_all_is_one_select_distinct_of_its_groups_per_branch_with_the_where_moved_in():
    result = analyze(OVER_UNION.format(where="WHERE s.amount > 1 "), CATALOG)
    assert result.view_class is ViewClass.AGGREGATE and result.over_union and not result.reasons
    assert [b.query for b in result.branches] == [
        'SELECT DISTINCT "orders"."status" FROM "public"."orders" AS "orders" WHERE "orders"."amount" > 1',
        'SELECT DISTINCT "customers"."name" FROM "public"."customers" AS "customers" WHERE "customers"."id" > 1']


@pytest.mark.parametrize(("query", "reason"), [
    ("SELECT sum(s.amount) AS t FROM (SELECT status, amount FROM orders UNION ALL SELECT name, id FROM customers) s",
     "a global aggregate over a UNION ALL"),
    (OVER_UNION.format(where="") + " LIMIT 2", "only GROUP BY, HAVING and WHERE"),
    (OVER_UNION.format(where="").replace("SELECT name, id FROM customers",
                                         "SELECT name, count(*) FROM customers GROUP BY name"),
     "UNION ALL branch 2: only filters, projections and joins"),
])
def test_an_aggregate_over_a_union_all_that_cannot_be_fast_says_why(query, reason):
    result = analyze(query, CATALOG)
    assert result.view_class is ViewClass.OTHER and not result.over_union
    assert any(reason in r for r in result.reasons), result.reasons


def test_window_functions_over_a_query_are_a_window_view_of_its_tables():
    seen = Recorder()
    select = tree("SELECT w.id FROM (SELECT id, rank() OVER (PARTITION BY customer_id ORDER BY amount) AS r "
                  "FROM orders) w WHERE w.r = 1")
    result = compound.analyze_window("q", select, None, seen)
    assert result.view_class is ViewClass.WINDOW and [t.name for t in result.tables] == ["orders"]
    assert seen.queries == ["SELECT id, NULL AS r FROM orders"]  # the window itself analysed without its functions


@pytest.mark.parametrize(("query", "reason"), [
    ("SELECT id, rank() OVER (ORDER BY amount) AS r FROM orders", "without a PARTITION BY"),
    ("SELECT w.id, count(*) AS n FROM (SELECT id, rank() OVER (PARTITION BY customer_id ORDER BY amount) AS r "
     "FROM orders) w GROUP BY w.id", "only filters and projections"),
    ("SELECT customer_id, rank() OVER (PARTITION BY customer_id ORDER BY sum(amount)) AS r FROM orders "
     "GROUP BY customer_id", "over an aggregate"),
    ("SELECT o.id, rank() OVER (PARTITION BY o.customer_id ORDER BY o.amount) AS r FROM orders o "
     "FULL JOIN customers c ON c.id = o.customer_id", "over a FULL JOIN"),
])
def test_window_functions_that_cannot_be_fast_say_why(query, reason):
    result = compound.analyze_window("q", tree(query), None, Recorder())
    assert result.view_class is ViewClass.OTHER
    assert any(reason in r for r in result.reasons), result.reasons
