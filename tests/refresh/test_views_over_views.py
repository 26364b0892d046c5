"""Views over views: a view's query reads other views of the project by their plain names. Chains
(simple → join → aggregate) and a diamond are refreshed fast and exactly, from one stamp, upstreams
first; the DAG shows in explain and status; redefinitions, drops, cycles and name clashes are
refused or followed, never left wrong."""

from __future__ import annotations

import pytest
from conftest import examples, refresh_ok
from hypothesis import given, settings
from shop import check_views, random_dml_then_refresh, sequences, shared_shop

from mvlog.errors import ConfigError, UsageError

pytestmark = pytest.mark.integration

VIEWS = [
    {"name": "gold_region", "refresh": "fast",  # three levels, and a diamond: order_lines reads two silvers
     "query": "SELECT region, segment, count(*) AS n, sum(amount) AS revenue, avg(amount) AS mean, "
              "min(amount) AS lo, max(amount) AS hi FROM order_lines GROUP BY region, segment"},
    {"name": "order_lines", "refresh": "fast",
     "query": "SELECT o.id AS order_id, o.amount, o.status, s.segment, s.region "
              "FROM silver_orders o JOIN silver_customers s ON s.customer_id = o.customer_id"},
    {"name": "silver_orders", "refresh": "fast",
     "query": "SELECT id, customer_id, amount, status FROM orders WHERE status IS DISTINCT FROM 'cancelled'"},
    {"name": "silver_customers", "refresh": "fast",
     "query": "SELECT c.id AS customer_id, c.segment, n.name AS nation, n.region "
              "FROM customers c JOIN nation n ON n.id = c.nation_id"},
    {"name": "gold_status", "refresh": "fast",  # two levels: an aggregate over the simple silver view
     "query": "SELECT status, count(*) AS n, sum(amount) AS total, max(amount) AS top "
              "FROM silver_orders GROUP BY status"},
    {"name": "customer_totals", "refresh": "fast",  # an aggregate silver view …
     "query": "SELECT customer_id, count(*) AS orders, sum(amount) AS total, max(amount) AS top "
              "FROM orders GROUP BY customer_id"},
    {"name": "customer_report", "refresh": "fast",  # … joined to a table, filtered on its aggregate
     "query": "SELECT c.name, c.segment, t.orders, t.total, t.top FROM customers c "
              "JOIN customer_totals t ON t.customer_id = c.id WHERE t.total > 10 OR t.orders > 1"},
    {"name": "segment_revenue", "refresh": "fast",  # an aggregate over the aggregate view, joined: folded
     "query": "SELECT c.segment, sum(t.total) AS revenue, sum(t.orders) AS orders, max(t.top) AS top "
              "FROM customers c JOIN customer_totals t ON t.customer_id = c.id GROUP BY c.segment "
              "HAVING sum(t.orders) > 1"},
    {"name": "repeat_buyers", "refresh": "fast",  # an aggregated derived table joined to two tables
     "query": "SELECT c.id, c.name, n.name AS nation, t.spent, t.n FROM customers c "
              "JOIN nation n ON n.id = c.nation_id JOIN (SELECT customer_id, sum(amount) AS spent, count(*) AS n "
              "FROM orders WHERE status IS DISTINCT FROM 'cancelled' GROUP BY customer_id HAVING count(*) > 1) t "
              "ON t.customer_id = c.id"},
    {"name": "segment_pairs", "refresh": "fast",  # count(*) and avg over a join with an aggregated CTE (#49)
     "query": "WITH rev AS (SELECT customer_id, sum(amount) AS total, count(*) AS n FROM orders GROUP BY customer_id) "
              "SELECT c.segment, sum(r.total) AS total, count(*) AS customers, avg(r.total) AS mean, "
              "avg(r.n) AS per_customer FROM customers c JOIN rev r ON r.customer_id = c.id GROUP BY c.segment"},
    {"name": "status_by_segment", "refresh": "fast",  # two project views joined: orders read twice (#49), and
     "query": "SELECT s.status, l.segment, sum(l.amount) AS revenue, count(*) AS n "  # s is also order_lines' alias
              "FROM order_lines l JOIN silver_orders s ON s.id = l.order_id GROUP BY s.status, l.segment"},
    {"name": "big_spenders", "refresh": "fast",  # a condition on the inner aggregate under an outer one (#49):
     "query": "SELECT n.name, count(*) AS customers, sum(t.spent) AS spent, avg(t.top) AS mean_top "  # correlated
              "FROM customers c JOIN nation n ON n.id = c.nation_id JOIN (SELECT customer_id, sum(amount) AS spent, "
              "max(amount) AS top FROM orders WHERE status IS DISTINCT FROM 'cancelled' GROUP BY customer_id) t "
              "ON t.customer_id = c.id WHERE t.spent > 10 GROUP BY n.name"},
    {"name": "spenders_by_segment", "refresh": "fast",  # over a project view: counts of its rows and values
     "query": "SELECT c.segment, count(*) AS buyers, count(t.top) AS with_top, max(t.total) AS biggest "
              "FROM customers c JOIN customer_totals t ON t.customer_id = c.id GROUP BY c.segment"},
    {"name": "large_orders", "refresh": "fast",  # a CTE nested in a CTE (#49)
     "query": "WITH v AS (WITH a AS (SELECT id, customer_id, amount FROM orders WHERE amount > 1) "
              "SELECT a.id, a.amount FROM a) SELECT v.id, v.amount FROM v"},
]


@pytest.fixture(scope="module")
def built_shop(request, pg, tmp_path_factory):
    # Local Spark only: the apply step these views use runs over Spark Connect in the fixed
    # scenarios of the simple, keyed, aggregate-delta, outer and rewrite tests.
    with shared_shop(request, pg, tmp_path_factory.mktemp("shop"), VIEWS, "local") as built:
        yield built


@pytest.mark.slow
@settings(max_examples=examples(1), deadline=None)
@given(sequence=sequences)
def test_random_dml_under_chains_and_a_diamond_refreshes_fast_and_exactly(built_shop, sequence):
    random_dml_then_refresh(built_shop, sequence, VIEWS)


def test_views_over_views_are_fast_show_their_dag_and_refresh_from_one_stamp(built_shop):
    project, db = built_shop.seeded(), built_shop.db
    for view in VIEWS:
        fast = next(c for c in project.explain(view["name"]).to_json()["capabilities"] if c["name"] == "REFRESH_FAST")
        assert fast["possible"], (view["name"], fast)
    explained = project.explain("gold_region").to_json()
    assert sorted(explained["upstreams"]) == ["order_lines", "silver_customers", "silver_orders"]
    assert explained["base_tables"] == ["orders", "customers", "nation"]
    assert project.explain("silver_orders").to_json()["dependents"] == ["order_lines", "gold_status",
                                                                        "status_by_segment"]
    status = {v["name"]: v for v in project.status()["views"]}
    assert status["order_lines"]["upstreams"] == ["silver_customers", "silver_orders"]
    assert status["silver_orders"]["dependents"] == ["order_lines", "gold_status", "status_by_segment"]
    assert status["gold_status"]["dependents"] == []
    # Refreshing the gold view refreshes what it reads first, all from one stamp.
    db.execute("UPDATE orders SET amount = amount + 1 WHERE id = 1")
    db.execute("UPDATE nation SET region = 3 WHERE id = 1")
    results = project.refresh(["gold_region"])
    order = [r.view for r in results]
    assert sorted(order[:2]) == ["silver_customers", "silver_orders"] and order[2:] == ["order_lines", "gold_region"]
    assert {r.method for r in results} == {"fast"} and len({r.snaptime for r in results}) == 1
    check_views(project, [v for v in VIEWS if v["name"] in order])
    status = {v["name"]: v for v in project.status()["views"]}
    assert status["gold_status"]["staleness"] == "stale" and status["gold_region"]["staleness"] == "fresh"
    # Dropping a view that others read is refused, naming them.
    with pytest.raises(UsageError, match="view silver_orders is read by the configuration's view.s. "
                                         "order_lines, gold_status"):
        project.drop_views(["silver_orders"])


def test_redefining_an_upstream_makes_its_dependents_complete(db, make_project):
    from shop import SCHEMA, SEED

    db.execute(SCHEMA)
    db.execute(SEED)
    views = [VIEWS[2], VIEWS[4]]
    project = make_project(["nation", "customers", "orders"], views)
    assert [r.error for r in project.apply().builds] == [None, None]
    redefined = [{**VIEWS[2], "query": VIEWS[2]["query"] + " AND amount > 5"}, VIEWS[4]]
    project = make_project(["nation", "customers", "orders"], redefined)
    builds = {r.view: r for r in project.apply().builds}
    assert builds["silver_orders"].method == "complete"
    # gold_status reads silver_orders: it is refreshed with it, complete, and says why
    assert builds["gold_status"].method == "complete"
    assert builds["gold_status"].reason == "complete refresh requested"
    check_views(project, redefined)
    db.execute("UPDATE orders SET amount = 6 WHERE id = 2")
    assert {r.method for r in refresh_ok(project).values()} <= {"fast", "fresh"}
    check_views(project, redefined)


def test_cycles_and_name_clashes_are_one_sentence_at_apply(db, make_project):
    from shop import SCHEMA

    db.execute(SCHEMA)
    cyclic = [{"name": "a", "query": "SELECT id FROM b"}, {"name": "b", "query": "SELECT id FROM a"}]
    with pytest.raises(ConfigError, match=r"views\[0\] \(a\): views read each other in a cycle: a → b → a"):
        make_project(["orders"], cyclic).apply()
    clash = [{"name": "customers", "query": "SELECT id, name FROM public.customers"},
             {"name": "v", "query": "SELECT id FROM customers"}]
    with pytest.raises(ConfigError, match=r"views\[1\] \(v\): customers is both a view of this project and the "
                                          r"PostgreSQL relation public.customers; rename the view, or schema-qualify"):
        make_project(["customers"], clash).apply()
    assert db.execute("SELECT to_regclass('mvlog.views')")[0][0] is None  # nothing applied
