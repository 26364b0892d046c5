"""View queries that read PostgreSQL views: expanded to their definitions as PostgreSQL does,
refreshed fast where the merged query is, and following a redefinition of the view."""

from __future__ import annotations

import psycopg2
import pytest
from conftest import assert_views_match, examples, refresh_ok, varied
from hypothesis import given, settings
from hypothesis import strategies as st

from mvlog.errors import ConfigError

pytestmark = pytest.mark.integration

SCHEMA = """
CREATE TABLE customers (id integer PRIMARY KEY, name text NOT NULL, tier text, active boolean NOT NULL DEFAULT true);
CREATE TABLE orders (id integer PRIMARY KEY, customer_id integer, amount numeric(10,2), status text);
CREATE VIEW active_customers AS SELECT id, name, tier FROM customers WHERE active;
CREATE VIEW gold_customers AS SELECT id, name AS gold_name FROM active_customers WHERE tier = 'gold';
CREATE VIEW big_orders (order_id, cust, amount) AS SELECT id, customer_id, amount FROM orders WHERE amount > 10;
"""

VIEWS = [
    {"name": "v_active", "refresh": "fast", "query": "SELECT * FROM active_customers"},
    {"name": "v_join", "refresh": "fast",
     "query": "SELECT a.name, a.tier, o.id AS order_id, o.amount "
              "FROM active_customers a JOIN orders o ON o.customer_id = a.id WHERE o.status <> 'void'"},
    {"name": "v_gold", "refresh": "fast",
     "query": "SELECT g.gold_name, count(*) AS n, sum(b.amount) AS total "
              "FROM gold_customers g JOIN big_orders b ON b.cust = g.id GROUP BY g.gold_name"},
]

ids = st.integers(1, 8)
ops = st.lists(st.one_of(
    st.tuples(st.just("customer"), ids, st.sampled_from(["ann", "bob", "cy"]), st.sampled_from(["gold", "std", None]),
              st.booleans()),
    st.tuples(st.just("customer_pk"), ids, ids),
    st.tuples(st.just("customer_delete"), ids),
    st.tuples(st.just("order"), ids, st.none() | ids,
              st.none() | st.decimals(min_value=0, max_value=30, places=2, allow_nan=False, allow_infinity=False),
              st.sampled_from(["open", "void"])),
    st.tuples(st.just("order_delete"), ids),
    st.just(("refresh",)),
), min_size=3, max_size=14).filter(varied)


def run_op(cur, op) -> None:
    cur.execute("SAVEPOINT op")
    try:
        if op[0] == "customer":
            cur.execute("INSERT INTO customers VALUES (%s, %s, %s, %s) ON CONFLICT (id) DO UPDATE "
                        "SET name = excluded.name, tier = excluded.tier, active = excluded.active", op[1:])
        elif op[0] == "customer_pk":
            cur.execute("UPDATE customers SET id = %s WHERE id = %s", (op[2], op[1]))
        elif op[0] == "customer_delete":
            cur.execute("DELETE FROM customers WHERE id = %s", (op[1],))
        elif op[0] == "order":
            cur.execute("INSERT INTO orders VALUES (%s, %s, %s, %s) ON CONFLICT (id) DO UPDATE "
                        "SET customer_id = excluded.customer_id, amount = excluded.amount, status = excluded.status",
                        op[1:])
        elif op[0] == "order_delete":
            cur.execute("DELETE FROM orders WHERE id = %s", (op[1],))
        cur.execute("RELEASE SAVEPOINT op")
    except psycopg2.errors.UniqueViolation:
        cur.execute("ROLLBACK TO SAVEPOINT op")


@pytest.fixture
def shop(db, make_project, request):
    db.execute(SCHEMA)
    project = make_project(["public.customers", "public.orders"], VIEWS, spark_mode=getattr(request, "param", "local"))
    project.apply()
    return project


def check_fast(project, views=VIEWS) -> None:
    results = refresh_ok(project)
    assert {r.method for r in results.values()} <= {"fast", "fresh"}, {r.view: r.reason for r in results.values()}
    assert_views_match(project, views)


def fast_capability(explained: dict) -> dict:
    return next(c for c in explained["capabilities"] if c["name"] == "REFRESH_FAST")


@pytest.mark.slow
@settings(max_examples=examples(1))
@given(ops=ops)
def test_random_dml_under_views_of_views_refreshes_fast_and_exactly(shop, db, ops):
    random_dml_then_refresh(shop, db, ops)


def random_dml_then_refresh(shop, db, ops) -> None:
    db.execute("DELETE FROM orders; DELETE FROM customers")
    refresh_ok(shop)
    conn = db.connect()
    try:
        with conn.cursor() as cur:
            for op in ops:
                if op[0] == "refresh":
                    check_fast(shop)
                    continue
                run_op(cur, op)
                conn.commit()
    finally:
        conn.close()
    check_fast(shop)


def test_views_over_views_are_fast_and_a_redefinition_is_picked_up(shop, db):
    for view in VIEWS:
        explained = shop.explain(view["name"]).to_json()
        assert fast_capability(explained)["possible"], (view["name"], fast_capability(explained))
    assert shop.explain("v_gold").to_json()["pg_views"] == ["public.gold_customers", "public.big_orders",
                                                            "public.active_customers"]
    db.execute("INSERT INTO customers VALUES (1, 'ann', 'gold', true), (2, 'bob', 'std', true), "
               "(3, 'cy', 'gold', false)")
    db.execute("INSERT INTO orders VALUES (1, 1, 20, 'open'), (2, 2, 5, 'open'), (3, 3, 50, 'open'), "
               "(4, 1, 15, 'void')")
    check_fast(shop)
    db.execute("UPDATE customers SET active = NOT active")
    db.execute("UPDATE orders SET amount = amount + 1")
    check_fast(shop)
    # The view every mvlog view reads (directly or through gold_customers) changes its filter.
    db.execute("CREATE OR REPLACE VIEW active_customers AS SELECT id, name, tier FROM customers "
               "WHERE active OR tier = 'gold'")
    results = {r.view: r for r in shop.refresh()}
    for name, result in results.items():
        assert result.error and "PostgreSQL view public.active_customers was redefined" in result.error, name
    status = {v["name"]: v for v in shop.status()["views"]}
    assert status["v_active"]["staleness"] == "needs_complete"
    results = refresh_ok(shop, complete=True)
    assert_views_match(shop, VIEWS)
    db.execute("UPDATE customers SET tier = 'gold' WHERE id = 2")
    check_fast(shop)
    # DROP of a view in use (CASCADE, with gold_customers) makes the views that read it invalid.
    db.execute("DROP VIEW active_customers CASCADE")
    results = {r.view: r for r in shop.refresh()}
    assert all(r.error and "is invalid" in r.error for r in results.values())


def test_views_postgres_does_not_merge_are_complete_only_and_missing_logs_name_the_table(db, make_project):
    db.execute(SCHEMA)
    db.execute("CREATE VIEW secure_customers WITH (security_barrier) AS SELECT id, name FROM customers WHERE active")
    db.execute("CREATE VIEW customer_counts AS SELECT tier, count(*) AS n FROM customers GROUP BY tier")
    db.execute("INSERT INTO customers VALUES (1, 'ann', 'gold', true), (2, 'bob', NULL, false)")
    views = [{"name": "v_secure", "query": "SELECT * FROM secure_customers"},
             {"name": "v_counts", "query": "SELECT c.tier, c.n FROM customer_counts c WHERE c.n > 0"}]
    project = make_project(["customers"], views)
    project.apply()
    fast = fast_capability(project.explain("v_secure").to_json())
    assert not fast["possible"] and "security-barrier view public.secure_customers" in fast["reason"]
    results = refresh_ok(project)
    db.execute("UPDATE customers SET active = true, tier = 'gold'")
    results = refresh_ok(project)
    assert results["v_secure"].method == "complete"
    assert_views_match(project, views)
    # A view over a table without a log: the error names the table, not the view.
    project = make_project(["customers"], [{"name": "v", "query": "SELECT * FROM big_orders"}])
    with pytest.raises(ConfigError, match=r"views\[0\] \(v\): table public.orders has no materialized view log"):
        project.apply()
