"""Outer joins, DISTINCT and UNION ALL: fast refresh from primary-key-only logs, checked against PostgreSQL."""

from __future__ import annotations

import pytest
from conftest import assert_views_match, examples, refresh_ok, stats_after, stats_before
from hypothesis import given, settings
from shop import (
    build_large_shop,
    check_fast_views,
    fast_refresh_and_check,
    random_dml_then_refresh,
    sequences,
    shared_shop,
)

pytestmark = pytest.mark.integration

VIEWS = [
    {"name": "left2", "refresh": "fast",
     "query": "SELECT o.id AS order_id, o.amount, c.name, c.segment FROM orders o "
              "LEFT JOIN customers c ON c.id = o.customer_id"},
    {"name": "left3_filtered", "refresh": "fast",  # WHERE on the NULL-extended side
     "query": "SELECT o.id, c.name AS customer, n.name AS nation FROM orders o "
              "LEFT JOIN customers c ON c.id = o.customer_id LEFT JOIN nation n ON n.id = c.nation_id "
              "WHERE n.region IS DISTINCT FROM 2 AND o.status IS DISTINCT FROM 'cancelled'"},
    {"name": "right_on", "refresh": "fast",  # the root is the RIGHT JOIN's table; a condition in ON
     "query": "SELECT c.id AS customer_id, c.name, o.id AS order_id, o.amount FROM orders o "
              "RIGHT JOIN customers c ON c.id = o.customer_id AND o.status = 'open'"},
    {"name": "inner_then_left", "refresh": "fast",
     "query": "SELECT c.name, n.name AS nation, o.id AS order_id FROM customers c "
              "JOIN nation n ON n.id = c.nation_id LEFT JOIN orders o ON o.customer_id = c.id WHERE n.region = 1"},
    {"name": "anti", "refresh": "fast",  # customers without orders: a row appears when the last order goes
     "query": "SELECT c.id, c.name FROM customers c LEFT JOIN orders o ON o.customer_id = c.id WHERE o.id IS NULL"},
    {"name": "left_then_inner", "refresh": "fast",  # NULL-extended rows join nation 1
     "query": "SELECT o.id AS order_id, n.name AS nation FROM orders o LEFT JOIN customers c ON c.id = o.customer_id "
              "JOIN nation n ON n.id = coalesce(c.nation_id, 1)"},
    {"name": "agg_left", "refresh": "fast",
     "query": "SELECT c.id AS customer_id, c.segment, count(o.id) AS orders, sum(o.amount) AS total, "
              "max(o.priority) AS top FROM customers c LEFT JOIN orders o ON o.customer_id = c.id "
              "GROUP BY c.id, c.segment"},
    {"name": "agg_left_null_group", "refresh": "fast",
     "query": "SELECT n.name AS nation, count(*) AS n, sum(o.amount) AS revenue FROM orders o "
              "LEFT JOIN customers c ON c.id = o.customer_id LEFT JOIN nation n ON n.id = c.nation_id GROUP BY n.name"},
    {"name": "full_customers_orders", "refresh": "fast",  # customers without orders, orders without customer
     "query": "SELECT c.id AS customer_id, c.name, o.id AS order_id, o.amount FROM customers c "
              "FULL JOIN orders o ON o.customer_id = c.id"},
    {"name": "full_then_left", "refresh": "fast",  # a condition in ON, a chain after it, WHERE on both sides
     "query": "SELECT o.id AS order_id, o.status, c.name, n.name AS nation FROM orders o "
              "FULL OUTER JOIN customers c ON c.id = o.customer_id AND o.status <> 'cancelled' "
              "LEFT JOIN nation n ON n.id = c.nation_id WHERE coalesce(n.region, 0) <> 2 AND o.priority IS "
              "DISTINCT FROM 9"},
    {"name": "right_after_inner", "refresh": "fast",  # orders LEFT JOIN (customers JOIN nation): the root is orders
     "query": "SELECT n.name AS nation, c.name, o.id AS order_id, o.amount FROM customers c "
              "JOIN nation n ON n.id = c.nation_id RIGHT JOIN orders o ON o.customer_id = c.id "
              "AND o.status IS DISTINCT FROM 'cancelled' WHERE n.region IS DISTINCT FROM 2"},
    {"name": "full_after_inner", "refresh": "fast",  # customers with a nation, and the orders none of them has
     "query": "SELECT c.id AS customer_id, n.name AS nation, o.id AS order_id, o.amount FROM customers c "
              "JOIN nation n ON n.id = c.nation_id FULL JOIN orders o ON o.customer_id = c.id"},
    {"name": "right_after_left", "refresh": "fast",  # ON reads only c, which precedes the NULL-extended n
     "query": "SELECT n.name AS nation, c.name, o.id AS order_id FROM customers c "
              "LEFT JOIN nation n ON n.id = c.nation_id RIGHT JOIN orders o ON o.customer_id = c.id"},
    {"name": "nation_orders", "refresh": "fast",  # ON compares c's column: c NULL-extended matches nothing
     "query": "SELECT n.id AS nation_id, n.name, c.name AS customer, o.id AS order_id FROM orders o "
              "LEFT JOIN customers c ON c.id = o.customer_id RIGHT JOIN nation n ON n.id = c.nation_id"},
    {"name": "full_after_left", "refresh": "fast",
     "query": "SELECT c.id AS customer_id, n.name AS nation, o.id AS order_id, o.amount FROM customers c "
              "LEFT JOIN nation n ON n.id = c.nation_id FULL JOIN orders o ON o.customer_id = c.id "
              "AND n.region IS NOT NULL"},
    {"name": "agg_full_after_left", "refresh": "fast",
     "query": "SELECT n.region, count(*) AS n, count(o.id) AS orders, sum(o.amount) AS total FROM customers c "
              "LEFT JOIN nation n ON n.id = c.nation_id FULL JOIN orders o ON o.customer_id = c.id GROUP BY n.region"},
    {"name": "agg_full", "refresh": "fast",  # the NULL segment holds customers without one and orphan orders
     "query": "SELECT c.segment, count(*) AS n, count(o.id) AS orders, sum(o.amount) AS total FROM customers c "
              "FULL JOIN orders o ON o.customer_id = c.id GROUP BY c.segment"},
    {"name": "distinct_full_chain", "refresh": "fast",
     "query": "SELECT DISTINCT o.status, n.region FROM customers c JOIN nation n ON n.id = c.nation_id "
              "FULL JOIN orders o ON o.customer_id = c.id"},
    {"name": "distinct_simple", "refresh": "fast", "query": "SELECT DISTINCT status, priority FROM orders"},
    {"name": "distinct_left", "refresh": "fast",
     "query": "SELECT DISTINCT c.segment, n.region FROM customers c LEFT JOIN nation n ON n.id = c.nation_id"},
    {"name": "union_rows_and_groups", "refresh": "fast",  # a simple branch, an aggregate over a join, and
     # a bare NULL, which a branch read on its own would type text
     "query": "SELECT id, amount AS value, 'order' AS kind FROM orders WHERE status = 'open' UNION ALL "
              "SELECT c.id, sum(o.amount), 'customer' FROM customers c JOIN orders o ON o.customer_id = c.id "
              "GROUP BY c.id UNION ALL SELECT n.id, NULL, 'nation' FROM nation n"},
    {"name": "union_outer_and_total", "refresh": "fast",  # an outer join, a table, a global aggregate
     "query": "SELECT o.id, c.name FROM orders o LEFT JOIN customers c ON c.id = o.customer_id UNION ALL "
              "SELECT n.id, n.name FROM nation n UNION ALL SELECT count(*), 'orders' FROM orders"},
    {"name": "union_distinct", "refresh": "fast",  # a row stays while some branch yields it; NULLs are rows too
     "query": "SELECT o.status AS label, c.segment FROM orders o LEFT JOIN customers c ON c.id = o.customer_id "
              "UNION SELECT segment, 'c:' || segment FROM customers UNION SELECT n.name, NULL FROM nation n"},
    {"name": "agg_over_union", "refresh": "fast",  # groups fed by two branches, the NULL group included
     "query": "SELECT s.segment, count(*) AS n, sum(s.amount) AS total FROM (SELECT c.segment, o.amount FROM orders o "
              "LEFT JOIN customers c ON c.id = o.customer_id UNION ALL SELECT segment, NULL FROM customers "
              "WHERE nation_id = 1) s WHERE s.segment IS DISTINCT FROM 'vip' GROUP BY s.segment"},
    {"name": "union_null_groups", "refresh": "fast",  # the NULL group of each branch is a row of its own
     "query": "SELECT status AS label, count(*) AS n FROM orders GROUP BY status UNION ALL "
              "SELECT segment, count(*) FROM customers GROUP BY segment"},
]


@pytest.fixture(scope="module", params=["local"])  # over Spark Connect: test_connect_paths
def built_shop(request, pg, tmp_path_factory):
    with shared_shop(request, pg, tmp_path_factory.mktemp("shop"), VIEWS, request.param) as built:
        yield built


@pytest.mark.deep  # the main tier: this class's random-DML oracle below
def test_fixed_scenario(built_shop):
    shop, db, views = built_shop.seeded(), built_shop.db, built_shop.views
    check_fast_views(shop, views)
    db.execute("INSERT INTO customers VALUES (9, 'New', NULL, 'corp')")          # a root without partners
    db.execute("UPDATE orders SET customer_id = NULL WHERE id = 3")              # an order loses its customer
    db.execute("INSERT INTO orders VALUES (6, 9, 'open', 1.00, 1)")              # ... and Nine gets one
    db.execute("DELETE FROM orders WHERE id = 5")                                # Di has no orders any more
    db.execute("UPDATE customers SET id = 40 WHERE id = 4")                      # a key update: orders dangle
    db.execute("UPDATE nation SET region = 2 WHERE id = 3")                      # filtered on the NULL side
    fast_refresh_and_check(shop, views)
    db.execute("DELETE FROM nation WHERE id = 1; UPDATE customers SET nation_id = 1 WHERE id = 2")
    db.execute("UPDATE orders SET customer_id = 40 WHERE id = 3")
    fast_refresh_and_check(shop, views)


@pytest.mark.slow
@pytest.mark.parametrize("built_shop", ["local"], indirect=True)  # over Connect: test_connect_paths
@settings(max_examples=examples(1))
@given(sequence=sequences)
def test_random_dml_then_fast_refresh_equals_postgres(built_shop, sequence):
    random_dml_then_refresh(built_shop, sequence, VIEWS)


def test_outer_join_refresh_reads_only_affected_rows(db, make_project):
    """40k orders of 20k customers, a handful changed: the fast read finds them through primary keys and the
    orders.customer_id index, never by scanning orders or customers."""
    build_large_shop(db)
    db.execute("INSERT INTO nation VALUES (1, 'France', 1), (2, 'Japan', 2), (3, 'Peru', 1); ANALYZE nation")
    project = make_project(["nation", "customers", "orders"], [
        {"name": "order_lines", "refresh": "fast",
         "query": "SELECT o.id, c.name, o.amount FROM orders o LEFT JOIN customers c ON c.id = o.customer_id"},
        {"name": "per_customer", "refresh": "fast",
         "query": "SELECT c.id, count(o.id) AS n, sum(o.amount) AS total FROM customers c "
                  "LEFT JOIN orders o ON o.customer_id = c.id GROUP BY c.id"},
        {"name": "full_lines", "refresh": "fast",
         "query": "SELECT o.id, c.id AS customer_id, c.name FROM orders o "
                  "FULL JOIN customers c ON c.id = o.customer_id"},
        {"name": "right_lines", "refresh": "fast",  # orders LEFT JOIN (customers JOIN nation)
         "query": "SELECT o.id, c.name, n.name AS nation FROM customers c JOIN nation n ON n.id = c.nation_id "
                  "RIGHT JOIN orders o ON o.customer_id = c.id"},
        {"name": "right_after_left_lines", "refresh": "fast",  # orders LEFT JOIN (customers LEFT JOIN nation)
         "query": "SELECT o.id, c.name, n.name AS nation FROM customers c LEFT JOIN nation n ON n.id = c.nation_id "
                  "RIGHT JOIN orders o ON o.customer_id = c.id"},
    ])
    project.apply()
    db.execute("UPDATE orders SET amount = 1000 WHERE id IN (10, 20)")   # customers 11 and 21
    db.execute("UPDATE orders SET customer_id = NULL WHERE id = 40")     # leaves customer 41
    db.execute("DELETE FROM customers WHERE id = 5")                     # its 2 orders lose their name
    before = {t: stats_before(db, t) for t in ("orders", "customers")}
    results = refresh_ok(project)
    after = {t: stats_after(db, t, before[t]) for t in ("orders", "customers")}
    # Keys (order, customer): 10 and 20 once; 40 as (40, 41) and (40, NULL); customer 5's two orders
    # as (o, 5) and (o, NULL).
    assert results["order_lines"].method == "fast" and results["order_lines"].keys_read == 2 + 2 + 4
    assert results["per_customer"].method == "fast" and results["per_customer"].keys_read == 4  # 11, 21, 41, 5
    # The orders' part as order_lines (8 keys); the customers' part, the lineage rows of customers
    # 11, 21, 41 and 5 before and after (two orders each): 8 keys.
    assert results["full_lines"].method == "fast" and results["full_lines"].keys_read == 8 + 8
    assert results["right_lines"].method == "fast" and results["right_lines"].keys_read == 8  # as order_lines
    assert results["right_after_left_lines"].method == "fast" and results["right_after_left_lines"].keys_read == 8
    for table in ("orders", "customers"):
        # A few tuples at most: right_lines' roots of changed nation rows (none here) are found by a
        # hash join whose scan of orders stops at its first tuple when the hash side is empty.
        assert after[table][0] - before[table][0] < 100, f"a sequential scan read {table}"
    # 5 changed order lines and 4 customers of 2 orders each, read by index a few times each (for
    # the roots, the keys, the rows, the null check and the key map): hundreds, not 40k.
    fetched = after["orders"][2] - before["orders"][2]
    assert fetched <= 1000, f"{fetched} orders rows fetched"
    assert_views_match(project, ("order_lines", "per_customer", "full_lines", "right_lines", "right_after_left_lines"))
