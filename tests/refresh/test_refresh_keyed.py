"""Join and aggregate views: fast refresh from primary-key-only logs, checked against PostgreSQL."""

from __future__ import annotations

import pytest
import sqlglot
from conftest import (
    assert_view_matches,
    assert_views_match,
    examples,
    refresh_ok,
    stats_after,
    stats_before,
)
from hypothesis import given, settings
from shop import SCHEMA, check_views, random_dml_then_refresh, sequences, shared_shop

from mvlog.errors import ConfigError

pytestmark = pytest.mark.integration

VIEWS = [
    {"name": "join2", "refresh": "fast",
     "query": "SELECT o.id AS order_id, c.name, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id "
              "WHERE o.status IS DISTINCT FROM 'cancelled'"},
    {"name": "join3", "refresh": "fast",
     "query": "SELECT o.amount * 2 AS dbl, c.name AS customer, n.name AS nation FROM orders o "
              "JOIN customers c ON c.id = o.customer_id JOIN nation n ON n.id = c.nation_id WHERE n.region = 1"},
    {"name": "selfjoin", "refresh": "fast",
     "query": "SELECT a.id AS first_id, b.id AS second_id, a.segment FROM customers a "
              "JOIN customers b ON a.nation_id = b.nation_id AND a.id < b.id"},
    {"name": "agg_status", "refresh": "fast",
     "query": "SELECT status, count(*) AS n, count(amount) AS n_amount, sum(amount) AS total, "
              "avg(amount) AS average, min(amount) AS lo, max(amount) AS hi, "
              "count(DISTINCT customer_id) AS customers FROM orders GROUP BY status"},
    {"name": "agg_having", "refresh": "fast",
     "query": "SELECT customer_id, sum(amount) AS total, max(priority) AS top FROM orders "
              "GROUP BY customer_id HAVING count(*) >= 2"},
    {"name": "agg_global", "refresh": "fast",
     "query": "SELECT count(*) AS n, sum(amount) AS total, min(priority) AS lowest FROM orders WHERE amount > 0"},
    {"name": "agg_join", "refresh": "fast",
     "query": "SELECT n.name AS nation, count(*) AS orders, sum(o.amount) AS revenue, max(o.amount) AS biggest "
              "FROM orders o JOIN customers c ON c.id = o.customer_id JOIN nation n ON n.id = c.nation_id "
              "GROUP BY n.name"},
    {"name": "agg_expr", "refresh": "fast",
     "query": "SELECT c.segment, sum(o.amount) / nullif(count(*), 0) AS per_order, "
              "max(o.priority) - min(o.priority) AS spread FROM orders o JOIN customers c ON c.id = o.customer_id "
              "GROUP BY 1"},
    {"name": "agg_customer", "refresh": "fast",  # the name matched by the customer's key (q39's read)
     "query": "SELECT c.name, c.id, count(*) AS n, stddev(o.amount) AS spread FROM orders o "
              "LEFT JOIN customers c ON c.id = o.customer_id GROUP BY c.name, c.id"},
]


@pytest.fixture(scope="module", params=["local"])  # over Spark Connect: test_connect_paths
def built_shop(request, pg, tmp_path_factory):
    with shared_shop(request, pg, tmp_path_factory.mktemp("shop"), VIEWS, request.param) as built:
        yield built


@pytest.mark.deep  # the main tier: this class's random-DML oracle below
def test_fixed_scenario_join_and_aggregate(built_shop):
    shop, db = built_shop.seeded(), built_shop.db
    status = {v["name"]: v for v in shop.status()["views"]}
    assert {v: (s["class"], s["fast_refresh"]) for v, s in status.items()} == {
        "join2": ("join", True), "join3": ("join", True), "selfjoin": ("join", True),
        "agg_status": ("aggregate", True), "agg_having": ("aggregate", True), "agg_global": ("aggregate", True),
        "agg_join": ("aggregate", True), "agg_expr": ("aggregate", True), "agg_customer": ("aggregate", True),
    }
    db.execute("UPDATE nation SET name = 'République' WHERE id = 1")           # a dimension fans out
    db.execute("UPDATE orders SET status = NULL WHERE id = 1")                  # into the NULL group
    db.execute("UPDATE orders SET customer_id = 2 WHERE id = 2")                # moves between groups
    db.execute("DELETE FROM orders WHERE id = 5")                               # empties 'cancelled'
    db.execute("UPDATE customers SET id = 40 WHERE id = 4")                     # key update (orders dangle)
    db.execute("UPDATE orders SET amount = 99.99 WHERE id = 4")                 # MIN/MAX change
    db.execute("INSERT INTO customers VALUES (5, 'Eve', 1, 'corp')")            # self-join partners appear
    results = refresh_ok(shop)
    assert {r.method for r in results.values()} <= {"fast", "fresh"}
    check_views(shop, VIEWS)
    db.execute("DELETE FROM orders WHERE amount = (SELECT max(amount) FROM orders)")  # MIN/MAX after delete
    db.execute("UPDATE orders SET customer_id = 40 WHERE customer_id IS NOT NULL AND id = 3")
    results = refresh_ok(shop)
    assert {r.method for r in results.values()} <= {"fast", "fresh"}
    check_views(shop, VIEWS)


def test_a_null_group_that_stays_out_of_a_having_view_with_deletion_vectors(db, make_project):
    """The affected NULL group fails HAVING (no view row, nothing to delete) while another group's
    row changes in the same MERGE: Delta 4.4's deletion-vector MERGE failed on exactly this
    ("Unexpected row: did not match any merge clause")."""
    db.execute("CREATE TABLE sale (id int PRIMARY KEY, g int, v int)")
    db.execute("INSERT INTO sale VALUES (1, NULL, 1), (2, 1, 5), (3, 1, 6), (4, NULL, 20)")
    project = make_project(["sale"], [{"name": "big_groups", "refresh": "fast", "deletion_vectors": True,
                                       "query": "SELECT g, sum(v) AS s FROM sale GROUP BY g HAVING sum(v) > 10"}])
    project.apply()
    location = project.config.view_location("big_groups")
    properties = project.warehouse.spark.sql(f"DESCRIBE DETAIL delta.`{location}`").collect()[0]["properties"]
    assert properties.get("delta.enableDeletionVectors") == "true"
    assert_view_matches(project, "big_groups")  # NULL group: 21 > 10, in the view
    db.execute("UPDATE sale SET v = 0 WHERE id = 4")  # NULL group leaves (1 <= 10): a real delete
    assert refresh_ok(project)["big_groups"].rows_deleted == 1
    db.execute("UPDATE sale SET v = 2 WHERE id = 1; UPDATE sale SET v = 7 WHERE id = 2")  # NULL stays out; 1 changes
    result = refresh_ok(project)["big_groups"]
    assert (result.method, result.rows_updated, result.rows_deleted) == ("fast", 1, 0)
    assert_view_matches(project, "big_groups")
    db.execute("UPDATE sale SET v = 30 WHERE id = 1; DELETE FROM sale WHERE id = 3")  # NULL back in, 1 changes
    assert refresh_ok(project)["big_groups"].rows_inserted == 1
    assert_view_matches(project, "big_groups")


@pytest.mark.parametrize("join", ["JOIN", "LEFT JOIN"])
def test_a_group_column_its_table_s_key_determines_is_matched_by_the_key_alone(db, make_project, join):
    """Grouped by a warehouse's name and key (TPC-DS q39), the read matches the affected groups by
    the key alone: a NULL name, a renamed warehouse and one no row joins still read exactly their groups."""
    db.execute("CREATE TABLE wh (id int PRIMARY KEY, name text);"
               "CREATE TABLE inv (id int PRIMARY KEY, wh int, qty int);"
               "INSERT INTO wh VALUES (1, 'a'), (2, NULL), (3, 'c');"
               "INSERT INTO inv SELECT g, 1 + g % 3, g FROM generate_series(1, 12) g")
    views = [{"name": "wh_spread", "refresh": "fast",
              "query": f"SELECT w.name, w.id, count(*) AS n, stddev(i.qty) AS sd FROM inv i {join} wh w "
                       "ON w.id = i.wh GROUP BY w.name, w.id"}]
    project = make_project(["wh", "inv"], views)
    project.apply()
    for step in ("UPDATE inv SET qty = qty + 1 WHERE wh = 2",  # the NULL-named warehouse's group
                 "UPDATE wh SET name = NULL WHERE id = 1; UPDATE wh SET name = 'b' WHERE id = 2",  # renamed both ways
                 "INSERT INTO inv VALUES (13, NULL, 5), (14, 3, 7); DELETE FROM inv WHERE id = 3",
                 "UPDATE wh SET id = 4 WHERE id = 3; UPDATE inv SET wh = 4 WHERE id = 6",
                 "DELETE FROM wh WHERE id = 1"):
        db.execute(step)
        assert refresh_ok(project)["wh_spread"].method == "fast", step
        assert_views_match(project, views)


def test_a_view_grouped_by_an_expression_refreshes_fast(db, make_project):
    db.execute("CREATE TABLE sale (id int PRIMARY KEY, amount numeric(10,2))")
    db.execute("INSERT INTO sale SELECT g, g * 10 FROM generate_series(1, 9) g")
    project = make_project(["sale"], [{"name": "big_sales", "refresh": "fast", "query":
                                       "SELECT amount > 50 AS big, sum(amount) AS total FROM sale "
                                       "GROUP BY amount > 50"}])
    project.apply()
    db.execute("UPDATE sale SET amount = 5 WHERE id = 9; INSERT INTO sale VALUES (10, NULL), (11, 70)")
    result = refresh_ok(project)["big_sales"]
    assert (result.method, result.keys_read) == ("fast", 3)  # groups true, false and NULL
    assert_view_matches(project, "big_sales")


def test_a_null_group_of_a_query_with_table_alias_a(db, make_project):
    """The null-safe branch once aliased the affected keys ``a``, shadowing the query's own ``a``."""
    db.execute("CREATE TABLE acct (id int PRIMARY KEY, branch int); CREATE TABLE ord (id int PRIMARY KEY, acct int)")
    db.execute("INSERT INTO acct VALUES (1, NULL), (2, 1); INSERT INTO ord VALUES (1, 1), (2, 2), (3, 1)")
    project = make_project(["acct", "ord"], [{"name": "per_branch", "refresh": "fast", "query":
                           "SELECT a.branch, count(*) AS n FROM ord o JOIN acct a ON a.id = o.acct GROUP BY a.branch"}])
    project.apply()
    db.execute("INSERT INTO ord VALUES (4, 1); UPDATE acct SET branch = 1 WHERE id = 1")  # the NULL group empties
    assert refresh_ok(project)["per_branch"].method == "fast"
    assert_view_matches(project, "per_branch")


def test_apply_has_postgresql_check_every_statement_of_a_fast_refresh(db, make_project, monkeypatch):
    """A view whose generated SQL PostgreSQL rejects is found at apply, not at its first refresh:
    here the IN of a grouped expression without its parentheses (what mvlog once generated)."""
    from mvlog.sql.generate import sqlgen

    unparenthesized = lambda expressions, query: sqlglot.exp.In(  # noqa: E731
        this=expressions[0] if len(expressions) == 1 else sqlglot.exp.Tuple(expressions=expressions),
        query=sqlglot.exp.Subquery(this=query))
    monkeypatch.setattr(sqlgen, "in_query", unparenthesized)
    db.execute("CREATE TABLE sale (id int PRIMARY KEY, amount numeric(10,2))")
    # stddev(): its affected groups are recomputed, by the IN of the grouped expression (sums, min and
    # max go by state)
    query = "SELECT amount > 50 AS big, stddev(amount) AS spread FROM sale GROUP BY amount > 50"
    project = make_project(["sale"], [{"name": "big_sales", "refresh": "fast", "query": query}])
    with pytest.raises(ConfigError, match=r"^views\[0\] \(big_sales\): refresh: fast is impossible: mvlog cannot key "
                                          r"this view for fast refresh: PostgreSQL refused the SQL mvlog wrote for "
                                          r"its shape \(aggregate\): operator does not exist: \w+ [=>] boolean "
                                          r"\(a bug in mvlog"):
        project.validate()
    forced = make_project(["sale"], [{"name": "big_sales", "refresh": "force", "query": query}])
    warnings = forced.apply().warnings  # said at apply, not only in status
    assert [w for w in warnings if w.startswith("view big_sales will always be refreshed completely: mvlog cannot")]
    status = {v["name"]: v for v in forced.status()["views"]}["big_sales"]
    assert status["fast_refresh"] is False and "operator does not exist" in status["why_not_fast"]


@pytest.mark.slow  # before the key map's test: it takes the shop as built
@pytest.mark.parametrize("built_shop", ["local"], indirect=True)
@settings(max_examples=examples(1))
@given(sequence=sequences)
def test_random_dml_on_all_tables_then_fast_refresh_equals_postgres(built_shop, sequence):
    random_dml_then_refresh(built_shop, sequence, VIEWS)


@pytest.mark.parametrize("built_shop", ["local"], indirect=True)
def test_complete_refresh_rebuilds_the_key_map(built_shop):
    shop, db = built_shop.changed(), built_shop.db  # any rows: the complete refresh rebuilds from them
    refresh_ok(shop, complete=True)
    db.execute("UPDATE orders SET status = 'open' WHERE id = 3; DELETE FROM customers WHERE id = 1")
    assert {r.method for r in refresh_ok(shop).values()} <= {"fast", "fresh"}
    check_views(shop, VIEWS)


@pytest.mark.slow
@pytest.mark.parametrize("built_shop", ["logical"], indirect=True)
# Every log captured by logical decoding (#41): the one Spark oracle under logical capture; the
# capture contract itself is tests/postgres/capture/test_contract.py (PostgreSQL only, both kinds).
@settings(max_examples=examples(1))
@given(sequence=sequences)
def test_random_dml_then_fast_refresh_with_logical_capture(built_shop, sequence):
    random_dml_then_refresh(built_shop, sequence, VIEWS)


def test_aggregate_refresh_reads_only_affected_groups(db, make_project):
    db.execute(SCHEMA)
    db.execute("INSERT INTO customers SELECT g, 'c' || g, 1 + g % 3, 'retail' FROM generate_series(1, 1000) g")
    db.execute("INSERT INTO orders SELECT g, 1 + g % 1000, 'open', g % 100, g % 7 FROM generate_series(1, 50000) g")
    db.execute("ANALYZE")
    project = make_project(["customers", "orders"], [
        {"name": "per_customer", "refresh": "fast",
         "query": "SELECT customer_id, count(*) AS n, sum(amount) AS total, max(amount) AS hi FROM orders "
                  "GROUP BY customer_id"},
        {"name": "order_lines", "refresh": "fast",
         "query": "SELECT o.id, c.name, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id"},
    ])
    project.apply()
    db.execute("UPDATE orders SET amount = 1000 WHERE id IN (10, 20)")   # groups 10 and 20
    db.execute("UPDATE orders SET customer_id = 30 WHERE id = 40")       # group 40 -> group 30
    before = stats_before(db, "orders")
    results = refresh_ok(project)
    after = stats_after(db, "orders", before)
    assert results["per_customer"].method == "fast" and results["per_customer"].keys_read == 4  # groups 10, 20, 30, 40
    # The join view's key holds both primary keys: moving order 40 deletes (40, 40) and inserts (40, 30).
    lines = results["order_lines"]
    assert (lines.keys_read, lines.rows_updated, lines.rows_deleted, lines.rows_inserted) == (4, 2, 1, 1)
    assert after[0] - before[0] == 0, "a sequential scan read the orders table"
    # 4 groups of 50 orders each, read for the recompute and the key map, plus the changed rows.
    assert after[2] - before[2] <= 4 * 50 * 3 + 20, f"{after[2] - before[2]} orders rows fetched"
    assert_views_match(project, ("per_customer", "order_lines"))
