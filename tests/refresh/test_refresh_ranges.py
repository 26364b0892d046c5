"""Uncorrelated scalar subqueries compared with one table's rows (range parameters, TPC-H Q22):
fast refresh from the rows between the subquery's old and new value, checked against PostgreSQL
(issue #61, item 2)."""

from __future__ import annotations

import pytest
from conftest import assert_view_matches, examples, refresh_ok
from hypothesis import given, settings
from shop import check_fast_views, random_dml_then_refresh, sequences, shared_shop

from mvlog.sql.strategies import ranges

pytestmark = pytest.mark.integration

VIEWS = [
    {"name": "above_average", "refresh": "fast",  # one table, compared with its own average
     "query": "SELECT o.id, o.amount FROM orders o WHERE o.amount > (SELECT avg(o2.amount) FROM orders o2)"},
    {"name": "segments_of_big_orders", "refresh": "fast",  # an aggregate by deltas over a join
     "query": "SELECT c.segment, count(*) AS n, sum(o.amount) AS total FROM customers c JOIN orders o "
              "ON o.customer_id = c.id WHERE o.amount >= (SELECT avg(amount) FROM orders WHERE status = 'open') "
              "GROUP BY c.segment"},
    {"name": "q22_like", "refresh": "fast",  # Q22's shape: a derived table, NOT EXISTS, the value of another table
     "query": "SELECT s.segment, count(*) AS n FROM (SELECT c.segment, c.id FROM customers c "
              "WHERE c.nation_id < (SELECT max(n.id) FROM nation n WHERE n.region = 1) "
              "AND NOT EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id)) s GROUP BY s.segment"},
    {"name": "not_the_first_nation", "refresh": "fast",  # <>: the rows equal to the old or the new value
     "query": "SELECT id, name FROM customers WHERE nation_id <> (SELECT min(id) FROM nation WHERE region = 2)"},
]


@pytest.fixture(scope="module")
def built_shop(request, pg, tmp_path_factory):
    with shared_shop(request, pg, tmp_path_factory.mktemp("shop"), VIEWS, "local") as built:
        yield built


def test_a_fixed_scenario_moves_the_values(built_shop):
    shop, db = built_shop.seeded(), built_shop.db
    check_fast_views(shop, VIEWS)
    db.execute("INSERT INTO orders VALUES (9, 2, 'open', 400.00, 1)")   # every average rises
    db.execute("UPDATE nation SET region = 1 WHERE id = 2")             # max(id) of region 1: 3 -> 3
    db.execute("UPDATE nation SET region = 2 WHERE id = 3")             # ... and now 2
    results = refresh_ok(shop)
    assert {r.method for r in results.values()} == {"fast"}
    check_fast_views(shop, VIEWS)
    db.execute("DELETE FROM orders WHERE status = 'open'")              # the open average is NULL
    db.execute("DELETE FROM nation WHERE region = 2")                   # min(id) of region 2 is NULL
    refresh_ok(shop)
    check_fast_views(shop, VIEWS)


@pytest.mark.slow
@settings(max_examples=examples(1))
@given(sequence=sequences)
def test_random_dml_then_fast_refresh_equals_postgres(built_shop, sequence):
    random_dml_then_refresh(built_shop, sequence, VIEWS)


def test_without_the_rows_between_the_values_the_oracle_fails(db, make_project, monkeypatch):
    """The deliberate break: no row counted as moved. A row inserted far above the others raises
    the average past rows that did not change, which stay in the view."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v int)")
    db.execute("INSERT INTO t SELECT i, i FROM generate_series(1, 10) i")
    project = make_project(["t"], [{"name": "above", "refresh": "fast",
                                     "query": "SELECT id, v FROM t WHERE v > (SELECT avg(v) FROM t)"}])
    project.apply()
    db.execute("INSERT INTO t VALUES (11, 100)")  # avg 5.5 -> 14.1: rows 6 … 10 leave
    assert refresh_ok(project)["above"].method == "fast"
    assert_view_matches(project, "above")
    monkeypatch.setattr(ranges, "moved_condition", lambda shape, i: ranges.exp.false())
    db.execute("DELETE FROM t WHERE id = 11")  # back to 5.5: rows 6 … 10 return
    refresh_ok(project)
    with pytest.raises(AssertionError):
        assert_view_matches(project, "above")
