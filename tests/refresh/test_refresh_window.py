"""Window functions with PARTITION BY: fast refresh recomputes affected partitions, checked against PostgreSQL."""

from __future__ import annotations

import pytest
from conftest import assert_view_matches, examples, refresh_ok, stats_after, stats_before
from hypothesis import given, settings
from shop import (
    LARGE_CUSTOMERS,
    build_large_shop,
    check_fast_views,
    fast_refresh_and_check,
    random_dml_then_refresh,
    sequences,
    shared_shop,
)

pytestmark = pytest.mark.integration

VIEWS = [
    {"name": "latest_order", "refresh": "fast",  # the latest row per key; customer_id NULL is a partition too
     "query": "SELECT * FROM (SELECT o.id, o.customer_id, o.amount, row_number() OVER "
              "(PARTITION BY o.customer_id ORDER BY o.id DESC) AS rn FROM orders o) s WHERE rn = 1"},
    {"name": "running_total", "refresh": "fast",
     "query": "SELECT id, status, sum(amount) OVER (PARTITION BY status ORDER BY id) AS running FROM orders"},
    {"name": "rank_in_nation", "refresh": "fast",  # a window over a join
     "query": "SELECT o.id, c.name, rank() OVER (PARTITION BY c.nation_id ORDER BY o.amount DESC NULLS LAST, o.id) "
              "AS r, count(*) OVER (PARTITION BY c.nation_id, c.segment) AS peers "
              "FROM orders o JOIN customers c ON c.id = o.customer_id"},
    {"name": "latest_per_customer", "refresh": "fast",  # over a LEFT JOIN: customers without orders too
     "query": "SELECT * FROM (SELECT c.id AS customer_id, c.name, o.id AS order_id, o.amount, row_number() OVER "
              "(PARTITION BY c.id ORDER BY o.id DESC NULLS LAST) AS rn FROM customers c "
              "LEFT JOIN orders o ON o.customer_id = c.id AND o.status IS DISTINCT FROM 'cancelled') s WHERE rn = 1"},
    {"name": "rank_by_nation_outer", "refresh": "fast",  # NULL-extended partitions (orders without a customer)
     "query": "SELECT o.id, n.name AS nation, count(*) OVER (PARTITION BY n.region) AS in_region, "
              "rank() OVER (PARTITION BY n.region ORDER BY o.amount DESC NULLS LAST, o.id) AS r FROM nation n "
              "JOIN customers c ON c.nation_id = n.id RIGHT JOIN orders o ON o.customer_id = c.id"},
    {"name": "cte_peers", "refresh": "fast",  # a CTE with a window, filtered
     "query": "WITH ranked AS (SELECT c.id, c.segment, count(*) OVER (PARTITION BY c.segment, c.nation_id) AS peers "
              "FROM customers c) SELECT id, peers FROM ranked WHERE peers > 1"},
]


@pytest.fixture(scope="module")
def built_shop(request, pg, tmp_path_factory):  # local Spark only: the Spark side is a keyed view's
    with shared_shop(request, pg, tmp_path_factory.mktemp("shop"), VIEWS, "local") as built:  # (see subquery)
        yield built


@pytest.mark.deep  # the main tier: this class's random-DML oracle below
def test_fixed_scenario(built_shop):
    shop, db = built_shop.seeded(), built_shop.db
    check_fast_views(shop, VIEWS)
    db.execute("INSERT INTO orders VALUES (6, 1, 'open', 1.00, 1), (7, NULL, 'open', 2.00, 1)")  # new latest, NULL
    db.execute("UPDATE orders SET customer_id = 2 WHERE id = 2")     # moves between partitions
    db.execute("UPDATE orders SET id = 9 WHERE id = 4")             # a key update: becomes Cy's latest
    db.execute("UPDATE customers SET nation_id = 1, segment = 'retail' WHERE id = 4")
    fast_refresh_and_check(shop, VIEWS)
    db.execute("DELETE FROM orders WHERE id IN (6, 7); UPDATE orders SET status = NULL WHERE id = 1")
    fast_refresh_and_check(shop, VIEWS)


@pytest.mark.slow
@settings(max_examples=examples(1))
@given(sequence=sequences)
def test_random_dml_then_fast_refresh_equals_postgres(built_shop, sequence):
    random_dml_then_refresh(built_shop, sequence, VIEWS)


def test_window_refresh_reads_only_affected_partitions(db, make_project):
    """40k orders of 20k customers, a handful changed: only their customers' partitions are read,
    through the orders.customer_id index."""
    build_large_shop(db)
    project = make_project(["customers", "orders"], [
        {"name": "latest", "refresh": "fast",
         "query": "SELECT * FROM (SELECT o.id, o.customer_id, row_number() OVER "
                  "(PARTITION BY o.customer_id ORDER BY o.id DESC) AS rn FROM orders o) s WHERE rn = 1"},
        {"name": "latest_outer", "refresh": "fast",  # over a LEFT JOIN: partitions of the affected roots
         "query": "SELECT * FROM (SELECT c.id AS customer_id, o.id, row_number() OVER "
                  "(PARTITION BY c.id ORDER BY o.id DESC) AS rn FROM customers c "
                  "LEFT JOIN orders o ON o.customer_id = c.id) s WHERE rn = 1"},
    ])
    project.apply()
    db.execute("INSERT INTO orders VALUES (%s, 11, 'open', 1, 1)", (2 * LARGE_CUSTOMERS + 1,))  # 11's new latest
    db.execute("UPDATE orders SET customer_id = 22 WHERE id = 40")      # leaves customer 41, joins 22
    before = {t: stats_before(db, t) for t in ("orders", "customers")}
    results = refresh_ok(project)
    after = {t: stats_after(db, t, before[t]) for t in ("orders", "customers")}
    assert results["latest"].method == "fast"
    assert results["latest"].keys_read == 3 + 1 + 1 + 2  # 11's three orders, order 40, 41's other one, 22's two
    # (customer, order): 11's three, 41's two (order 40 before), 22's three (order 40 after)
    assert results["latest_outer"].method == "fast" and results["latest_outer"].keys_read == 3 + 2 + 3
    for table in ("orders", "customers"):
        assert after[table][0] == before[table][0], f"a sequential scan read {table}"
    assert after["orders"][2] - before["orders"][2] <= 1000, \
        f"{after['orders'][2] - before['orders'][2]} orders fetched"
    assert_view_matches(project, "latest")
    assert_view_matches(project, "latest_outer")
