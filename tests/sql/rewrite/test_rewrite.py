"""CTEs, derived tables and subquery expressions: what they merge into, and why not (pure, no database)."""

from __future__ import annotations

import pytest

from mvlog.model import Column, TableInfo
from mvlog.sql.analyze.analysis import ViewClass, analyze


def _table(name: str, oid: int, columns: str, key: str = "id") -> TableInfo:
    cols = tuple(Column(c.strip("!"), "integer", c.endswith("!") or c == key) for c in columns.split())
    return TableInfo("public", name, oid, cols, tuple(c for c in cols if c.name == key))


CATALOG = {
    (None, "orders"): _table("orders", 1, "id customer_id status amount"),
    (None, "customers"): _table("customers", 2, "id name nation_id! segment"),
}


def _analyze(query: str):
    return analyze(query, CATALOG)


@pytest.mark.parametrize(
    ("query", "view_class", "sql"),
    [
        # a CTE over an aggregate with an outer filter: the filter becomes HAVING
        ("WITH s AS (SELECT customer_id, sum(amount) AS total FROM orders GROUP BY customer_id) "
         "SELECT customer_id, total FROM s WHERE total > 5",
         ViewClass.AGGREGATE, 'HAVING (SUM("orders"."amount")) > 5'),
        # a derived join under an aggregate: one query over the base tables
        ("SELECT s.segment, count(*) FROM (SELECT c.segment FROM orders o JOIN customers c ON c.id = o.customer_id) s "
         "GROUP BY s.segment",
         ViewClass.AGGREGATE, 'FROM "public"."orders" AS "o" JOIN "public"."customers" AS "c"'),
        # a filtered CTE on the NULL-extended side: its filter joins the ON condition
        ("WITH oo AS (SELECT id, customer_id FROM orders WHERE status = 'open') "
         "SELECT c.id, oo.id AS order_id FROM customers c LEFT JOIN oo ON oo.customer_id = c.id",
         ViewClass.JOIN, 'ON "orders"."customer_id" = "c"."id" AND "orders"."status" = \'open\''),
        # the same CTE twice: the second copy's alias is renamed
        ("WITH o AS (SELECT * FROM orders) SELECT a.id, b.id AS other FROM o a JOIN o b ON b.customer_id = a.id",
         ViewClass.JOIN, '"public"."orders" AS "orders_2"'),
        # a CTE nested in a CTE (#49): the inner one is inlined from the outer one's copy
        ("WITH v AS (WITH a AS (SELECT id, customer_id, amount FROM orders WHERE amount > 1) "
         "SELECT a.id, a.amount FROM a) SELECT v.id, v.amount FROM v",
         ViewClass.SIMPLE, 'FROM "public"."orders" AS "orders" WHERE "orders"."amount" > 1'),
        # a derived table whose own FROM item has its alias (#49): renamed apart, not read as it
        ("SELECT s.id, o.name FROM (SELECT s.id, s.customer_id FROM orders s) s JOIN customers o "
         "ON o.id = s.customer_id", ViewClass.JOIN, '"public"."orders" AS "s_2"'),
        # a semi-join: the FROM table keys the view
        ("SELECT id FROM customers WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = customers.id)",
         ViewClass.JOIN, "EXISTS("),
        ("SELECT c.id, (SELECT count(*) FROM orders o WHERE o.customer_id = c.id) AS n FROM customers c",
         ViewClass.JOIN, "(SELECT COUNT(*)"),
        # the latest row per key: a filter over a window query
        ("SELECT * FROM (SELECT o.*, row_number() OVER (PARTITION BY customer_id ORDER BY id DESC) AS rn "
         "FROM orders o) s WHERE rn = 1", ViewClass.WINDOW, 'WHERE "s"."rn" = 1'),
        ("WITH r AS (SELECT c.id, count(*) OVER (PARTITION BY c.segment) AS n FROM customers c) SELECT id FROM r",
         ViewClass.WINDOW, 'PARTITION BY "c"."segment"'),
        # the latest order per customer, customers without orders included
        ("SELECT * FROM (SELECT c.id, o.amount, row_number() OVER (PARTITION BY c.id ORDER BY o.id DESC) AS rn "
         "FROM customers c LEFT JOIN orders o ON o.customer_id = c.id) s WHERE rn = 1",
         ViewClass.WINDOW, 'LEFT JOIN "public"."orders" AS "o"'),
    ],
)
def test_merged_shapes(query, view_class, sql):
    analysis = _analyze(query)
    assert analysis.reasons == []
    assert analysis.view_class is view_class
    assert sql in analysis.tree.sql(dialect="postgres")


def test_output_names_are_postgres_names():
    analysis = analyze("SELECT s.segment, count(*) FROM (SELECT segment FROM customers) s GROUP BY 1", CATALOG,
                       ["segment", "count"])
    assert [p.alias for p in analysis.tree.selects] == ["segment", "count"]


def test_semi_join_lineage_conditions():
    positive = _analyze("SELECT id FROM orders WHERE customer_id IN (SELECT id FROM customers WHERE segment = 'x')")
    (semi,) = positive.semi_joins
    assert [t.name for t in semi.tables] == ["customers"]
    assert semi.condition.sql(dialect="postgres") == (
        '"customers"."id" = "orders"."customer_id" AND "customers"."segment" = \'x\'')
    # NOT IN over NOT NULL columns is NOT EXISTS with the equality
    not_in = _analyze("SELECT c.id FROM customers c WHERE c.nation_id NOT IN (SELECT o.id FROM orders o)")
    assert not_in.reasons == [] and '"o"."id" = "c"."nation_id"' in not_in.semi_joins[0].condition.sql()
    # inside a subquery its own alias shadows the outer one: this one is uncorrelated
    shadowed = _analyze("SELECT o.id FROM orders o WHERE EXISTS (SELECT 1 FROM orders o WHERE o.id = 1)")
    assert any("uncorrelated" in r for r in shadowed.reasons)
    # two subqueries under one alias: the second is renamed, in the lineage and in the query
    twice = _analyze("SELECT c.id FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id)"
                     " AND NOT EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id AND o.status = 'x')")
    assert twice.reasons == [] and [s.tables[0].alias for s in twice.semi_joins] == ["o", "o_2"]
    assert '"o_2"."status"' in twice.tree.sql(dialect="postgres")


def test_subquery_over_several_tables_joins_the_lineage_as_one_item():
    analysis = _analyze("SELECT o.id FROM orders o JOIN customers c ON c.id = o.customer_id WHERE EXISTS "
                        "(SELECT 1 FROM orders p JOIN customers c ON c.id = p.customer_id, customers n "
                        "WHERE p.customer_id = o.customer_id AND n.id = c.nation_id AND c.segment = 'x')")
    assert analysis.reasons == [] and analysis.view_class is ViewClass.JOIN
    (semi,) = analysis.semi_joins
    assert [t.alias for t in semi.tables] == ["p", "c_2", "n"]  # the inner c is renamed, in its ON too
    assert [t.alias for t in analysis.tables] == ["o", "c", "p", "c_2", "n"]
    assert semi.condition.sql(dialect="postgres") == (
        '"c_2"."id" = "p"."customer_id" AND ("p"."customer_id" = "o"."customer_id" AND "n"."id" = "c_2"."nation_id" '
        'AND "c_2"."segment" = \'x\')')
    # USING is qualified into ON
    using = _analyze("SELECT id FROM orders o WHERE EXISTS (SELECT 1 FROM customers c JOIN orders p USING (id) "
                     "WHERE c.id = o.customer_id)")
    assert using.reasons == [] and len(using.semi_joins[0].tables) == 2


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("WITH RECURSIVE r AS (SELECT id FROM orders UNION ALL SELECT id + 1 FROM r WHERE id < 3) SELECT * FROM r",
         "recursive CTEs"),
        ("SELECT id FROM orders WHERE amount > (SELECT avg(amount) FROM orders) + id", "uncorrelated"),
        ("SELECT id FROM orders WHERE customer_id NOT IN (SELECT nation_id FROM customers WHERE segment = 'x')",
         "depends on NULLs"),
        ("SELECT id FROM orders o WHERE EXISTS (SELECT 1 FROM customers c LEFT JOIN orders p ON p.id = c.id "
         "WHERE c.id = o.customer_id)", "outer join"),
        ("SELECT id FROM orders o WHERE EXISTS (SELECT 1 FROM orders p JOIN (SELECT customer_id, count(*) AS n "
         "FROM orders GROUP BY 1) s ON s.customer_id = p.customer_id WHERE p.id = o.id)", "over a subquery"),
        ("SELECT * FROM (SELECT customer_id, count(*) AS n FROM orders GROUP BY 1) s "
         "LEFT JOIN customers c ON c.id = s.customer_id",
         "an aggregated derived table or CTE that does not merge"),
        ("SELECT * FROM (SELECT o.*, row_number() OVER (PARTITION BY customer_id ORDER BY id) AS rn FROM orders o) s "
         "JOIN customers c ON c.id = s.customer_id", "a derived table or CTE that does not merge"),
        ("SELECT * FROM (SELECT o.*, sum(amount) OVER (PARTITION BY customer_id) AS s FROM orders o) s "
         "WHERE s.s > (SELECT 1 FROM customers c WHERE c.id = s.customer_id)", "only filters and projections"),
        ("SELECT o.id, rank() OVER (PARTITION BY c.segment ORDER BY o.id) FROM orders o "
         "FULL JOIN customers c ON c.id = o.customer_id", "window functions over a FULL JOIN"),
        ("SELECT id, rank() OVER (PARTITION BY status ORDER BY id), rank() OVER (PARTITION BY customer_id ORDER BY id) "
         "FROM orders", "without a PARTITION BY that they all share"),
    ],
)
def test_unmergeable_say_why(query, reason):
    analysis = _analyze(query)
    assert analysis.view_class is ViewClass.OTHER
    assert any(reason in r for r in analysis.reasons), analysis.reasons
    assert {t.name for t in analysis.tables} <= {"orders", "customers"}


def test_aggregate_over_union_all_moves_the_groups_and_filter_into_each_branch():
    analysis = _analyze("SELECT s.k, count(*) AS n FROM (SELECT customer_id AS k, amount FROM orders UNION ALL "
                        "SELECT c.id, 0 FROM customers c WHERE c.segment = 'x') s WHERE s.amount > 1 GROUP BY s.k")
    assert analysis.view_class is ViewClass.AGGREGATE and analysis.over_union, analysis.reasons
    first, second = (b.tree.sql(dialect="postgres") for b in analysis.branches)
    assert first == ('SELECT DISTINCT "orders"."customer_id" FROM "public"."orders" AS "orders" '
                     'WHERE "orders"."amount" > 1')
    assert second == ('SELECT DISTINCT "c"."id" FROM "public"."customers" AS "c" '
                      'WHERE "c"."segment" = \'x\' AND 0 > 1')


def test_aggregate_over_distinct_or_union_is_one_over_its_branches():
    over_distinct = _analyze("SELECT s.customer_id, count(*) AS n FROM (SELECT DISTINCT customer_id, status "
                             "FROM orders) s GROUP BY s.customer_id")
    assert over_distinct.view_class is ViewClass.AGGREGATE and over_distinct.over_union, over_distinct.reasons
    (unit,) = over_distinct.branches
    assert unit.tree.sql(dialect="postgres") == ('SELECT DISTINCT "orders"."customer_id" '
                                                 'FROM "public"."orders" AS "orders"')
    over_union = _analyze("SELECT s.id, count(*) AS n FROM (SELECT customer_id AS id FROM orders UNION "
                          "SELECT DISTINCT id FROM customers) s GROUP BY s.id")
    assert over_union.view_class is ViewClass.AGGREGATE and len(over_union.branches) == 2, over_union.reasons


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("SELECT count(*) FROM (SELECT id FROM orders UNION ALL SELECT id FROM customers) s", "global aggregate"),
        ("SELECT s.k, count(*) FROM (SELECT customer_id AS k FROM orders GROUP BY customer_id UNION ALL "
         "SELECT id FROM customers) s GROUP BY s.k", "UNION ALL branch 1: only filters, projections and joins"),
        ("SELECT s.id FROM (SELECT id FROM orders UNION ALL SELECT id FROM customers) s GROUP BY s.id LIMIT 5",
         "only GROUP BY, HAVING and WHERE over a UNION ALL"),
        ("SELECT s.id FROM (SELECT id FROM orders INTERSECT SELECT id FROM customers) s GROUP BY s.id",
         "FROM items other than tables"),
        ("SELECT s.k, count(*) FROM (SELECT DISTINCT ON (customer_id) customer_id AS k FROM orders) s GROUP BY s.k",
         "a derived table or CTE that does not merge into the query (a window, LIMIT, DISTINCT ON"),
    ],
)
def test_aggregate_over_union_all_stays_complete_with_a_reason(query, reason):
    analysis = _analyze(query)
    assert analysis.view_class is ViewClass.OTHER and any(reason in why for why in analysis.reasons), analysis.reasons


def test_aggregate_over_a_full_join_is_an_aggregate_over_its_two_parts():
    analysis = _analyze("SELECT c.segment, count(o.id) AS orders, sum(o.amount) AS total FROM customers c "
                        "FULL JOIN orders o ON o.customer_id = c.id WHERE o.status IS DISTINCT FROM 'x' "
                        "GROUP BY c.segment HAVING count(*) > 1")
    assert analysis.view_class is ViewClass.AGGREGATE and analysis.over_union, analysis.reasons
    sql = analysis.tree.sql(dialect="postgres")
    assert sql.startswith('SELECT "_mvlog_full"."c_segment" AS "segment", COUNT("_mvlog_full"."o_id") AS "orders", '
                          'SUM("_mvlog_full"."o_amount") AS "total" FROM (SELECT "c"."segment" AS "c_segment"')
    assert 'GROUP BY "_mvlog_full"."c_segment" HAVING COUNT(*) > 1' in sql
    left, right = (b.tree.sql(dialect="postgres") for b in analysis.branches)
    assert 'LEFT JOIN "public"."orders" AS "o"' in left and "IS NULL" not in left
    assert right.endswith('RIGHT JOIN "public"."orders" AS "o" ON "o"."customer_id" = "c"."id" '
                          'WHERE "o"."status" IS DISTINCT FROM \'x\' AND "c"."id" IS NULL'), right


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("SELECT count(*) FROM customers c FULL JOIN orders o ON o.customer_id = c.id", "global aggregate over a FULL"),
        ("SELECT c.segment, count(*) FROM customers c FULL JOIN orders o ON o.customer_id = c.id "
         "WHERE EXISTS (SELECT 1 FROM orders p WHERE p.id = o.id) GROUP BY c.segment", "subquery over a FULL JOIN"),
    ],
)
def test_aggregates_over_a_full_join_that_stay_complete(query, reason):
    analysis = _analyze(query)
    assert analysis.view_class is ViewClass.OTHER and any(reason in why for why in analysis.reasons), analysis.reasons


@pytest.mark.parametrize(("query", "sql"), [
    # inner joins in parentheses, nested: one chain, every condition on its last join (pg_ivm's shape)
    ("SELECT o.id, n.id AS nation FROM orders o JOIN (customers c JOIN (customers n JOIN orders p ON p.id = n.id) "
     "ON n.id = c.nation_id) ON c.id = o.customer_id",
     'JOIN "public"."customers" AS "c" ON TRUE JOIN "public"."customers" AS "n" ON TRUE JOIN "public"."orders" AS "p" '
     'ON ("p"."id" = "n"."id" AND "n"."id" = "c"."nation_id") AND "c"."id" = "o"."customer_id"'),
    # a parenthesized join first in FROM, an outer join in it: joins associate to the left anyway
    ("SELECT o.id, c.name FROM (orders o LEFT JOIN customers c ON c.id = o.customer_id) "
     "JOIN customers d ON d.id = o.id",
     'FROM "public"."orders" AS "o" LEFT JOIN "public"."customers" AS "c" ON "c"."id" = "o"."customer_id" '
     'JOIN "public"."customers" AS "d" ON "d"."id" = "o"."id"'),
])
def test_parenthesized_joins_are_one_chain(query, sql):
    analysis = _analyze(query)
    assert analysis.view_class is ViewClass.JOIN and not analysis.reasons
    assert sql in analysis.tree.sql(dialect="postgres")


def test_a_parenthesized_join_on_the_null_extended_side_keeps_its_order():
    analysis = _analyze("SELECT o.id, c.name FROM orders o LEFT JOIN (customers c JOIN customers d "
                        "ON d.id = c.nation_id) ON c.id = o.customer_id")
    assert analysis.view_class is ViewClass.OTHER
    assert 'LEFT JOIN ("public"."customers" AS "c" JOIN' in analysis.tree.sql(dialect="postgres")


def test_a_distinct_derived_table_is_grouped_by_its_outputs():
    joined = _analyze("SELECT c.name, t.customer_id FROM customers c JOIN (SELECT DISTINCT customer_id, status "
                      "FROM orders) t ON t.customer_id = c.id")
    assert joined.view_class is ViewClass.AGGREGATE and not joined.reasons
    grouped = 'GROUP BY "c"."id", "c"."name", "orders"."customer_id", "orders"."status"'
    assert grouped in joined.tree.sql(dialect="postgres")
    alone = _analyze("SELECT t.status FROM (SELECT DISTINCT status, customer_id FROM orders) t WHERE t.customer_id > 1")
    assert alone.view_class is ViewClass.AGGREGATE and not alone.reasons
    # an aggregate over it alone stays one over its branches; a constant output is not a GROUP BY position
    over = _analyze("SELECT s.customer_id, count(*) AS n FROM (SELECT DISTINCT customer_id, status FROM orders) s "
                    "GROUP BY s.customer_id")
    assert over.view_class is ViewClass.AGGREGATE and "DISTINCT" in over.tree.sql(dialect="postgres")
    constant = _analyze("SELECT t.x FROM (SELECT DISTINCT 1 AS x, status FROM orders) t")
    assert constant.view_class is ViewClass.OTHER


def test_an_uncorrelated_scalar_subquery_in_having_is_a_parameter():
    """TPC-H Q11's shape: the subquery is one value for every group; its tables are watched, not keyed."""
    analysis = _analyze("SELECT customer_id, sum(amount) AS total FROM orders GROUP BY customer_id "
                        "HAVING sum(amount) > (SELECT avg(amount) FROM orders)")
    assert analysis.view_class is ViewClass.AGGREGATE and analysis.fast_possible, analysis.reasons
    assert [(p.name, p.alias) for p in analysis.parameters] == [("orders", "orders_2")]
    assert [t.alias for t in analysis.tables] == ["orders"] and not analysis.semi_joins
    # in WHERE it is a range parameter (tests/sql/strategies/test_ranges.py); correlated, no parameter
    where = _analyze("SELECT customer_id, count(*) AS n FROM orders WHERE amount > (SELECT avg(amount) FROM orders) "
                     "GROUP BY customer_id")
    assert not where.parameters and where.fast_possible
    assert [(r.alias, r.value) for r in where.ranges] == [("orders", '"orders"."amount"')]
    correlated = _analyze("SELECT c.id, count(*) AS n FROM customers c JOIN orders o ON o.customer_id = c.id "
                          "GROUP BY c.id HAVING count(*) > (SELECT count(*) FROM orders p WHERE p.customer_id = c.id)")
    assert not correlated.parameters
    inside = _analyze("SELECT customer_id, sum(amount) AS s FROM orders GROUP BY customer_id "
                      "HAVING sum(amount - (SELECT avg(amount) FROM orders)) > 0")  # an aggregate's input
    assert not inside.parameters and not inside.fast_possible
