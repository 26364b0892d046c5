"""GROUPING SETS, ROLLUP and CUBE views: kept fast as one aggregate per grouping set (by deltas and
by state), GROUPING() in the select list, the global set included; random DML checked against
PostgreSQL's own GROUPING SETS on both session kinds."""

from __future__ import annotations

import pytest
from conftest import examples
from hypothesis import given, settings
from shop import check_fast_views, random_dml_then_refresh, sequences, shared_shop

pytestmark = pytest.mark.integration

VIEWS = [
    {"name": "rollup_segment_status", "refresh": "fast",
     "query": "SELECT c.segment, o.status, count(*) AS n, sum(o.amount) AS total, avg(o.amount) AS mean, "
              "min(o.amount) AS lo, max(o.amount) AS hi, grouping(c.segment, o.status) AS g "
              "FROM orders o JOIN customers c ON c.id = o.customer_id GROUP BY ROLLUP (c.segment, o.status)"},
    {"name": "cube_status_priority", "refresh": "fast",
     "query": "SELECT status, priority, count(*) AS n, sum(amount) AS total, max(amount) AS hi, "
              "grouping(priority) AS no_priority FROM orders GROUP BY CUBE (status, priority)"},
    {"name": "sets_status_customer", "refresh": "fast",
     "query": "SELECT status, customer_id, count(*) AS n, min(amount) AS lo, count(DISTINCT priority) AS priorities "
              "FROM orders GROUP BY GROUPING SETS ((status), (customer_id), ()) HAVING count(*) > 1"},
    # Under a window: composed views whose piece is the finest level, grouped again on top.
    {"name": "ranked_rollup", "refresh": "fast",
     "query": "SELECT c.segment, o.status, sum(o.amount) AS total, count(*) AS n, min(o.amount) AS lo, "
              "grouping(c.segment, o.status) AS g, rank() OVER (PARTITION BY grouping(c.segment, o.status), "
              "CASE WHEN grouping(o.status) = 0 THEN c.segment END ORDER BY sum(o.amount) DESC NULLS LAST) AS rk "
              "FROM orders o JOIN customers c ON c.id = o.customer_id GROUP BY ROLLUP (c.segment, o.status)"},
    # A division by the piece's count: a group the changes empty must not reach it (0 / 0)
    {"name": "ranked_mean", "refresh": "fast",
     "query": "SELECT c.segment, o.status, CAST(sum(o.amount) AS double precision) / count(*) AS mean, "
              "grouping(c.segment, o.status) AS g, rank() OVER (PARTITION BY grouping(c.segment, o.status), "
              "CASE WHEN grouping(o.status) = 0 THEN c.segment END ORDER BY CAST(sum(o.amount) AS double precision) "
              "/ count(*) NULLS FIRST) AS rk "
              "FROM orders o JOIN customers c ON c.id = o.customer_id GROUP BY ROLLUP (c.segment, o.status)"},
    {"name": "ranked_cube", "refresh": "fast",
     "query": "SELECT status, priority, n, total, hi, dense_rank() OVER (PARTITION BY status ORDER BY n DESC) AS r "
              "FROM (SELECT status, priority, count(*) AS n, sum(amount) AS total, max(amount) AS hi FROM orders "
              "GROUP BY CUBE (status, priority) HAVING count(*) > 1) t"},
]


@pytest.fixture(scope="module")
def built_shop(request, pg, tmp_path_factory):
    # Local Spark only: the apply step these views use runs over Spark Connect in the fixed
    # scenarios of the simple, keyed, aggregate-delta, outer and rewrite tests.
    with shared_shop(request, pg, tmp_path_factory.mktemp("shop"), VIEWS, "local") as built:
        yield built


def test_grouping_sets_views_are_fast_with_one_branch_per_set(built_shop):
    project = built_shop.seeded()
    explained = project.explain("rollup_segment_status").to_json()
    assert explained["class"] == "union"
    fast = next(c for c in explained["capabilities"] if c["name"] == "REFRESH_FAST")
    assert fast["possible"], fast
    check_fast_views(project, VIEWS)
    built_shop.db.execute("UPDATE orders SET status = NULL WHERE id = 1")  # a NULL group beside the rolled-up NULL
    built_shop.db.execute("DELETE FROM orders WHERE id = 2")
    from shop import fast_refresh_and_check
    fast_refresh_and_check(project, VIEWS)


def test_grouping_sets_under_a_window_keep_only_their_finest_level_as_a_piece(built_shop):
    project = built_shop.seeded()
    for name in ("ranked_rollup", "ranked_cube"):
        explained = project.explain(name).to_json()
        fast = next(c for c in explained["capabilities"] if c["name"] == "REFRESH_FAST")
        assert explained["class"] == "composed" and fast["possible"], fast
        # one plain aggregate, not a UNION ALL of one per grouping set
        assert "its 1 piece are kept fast" in fast["reason"] and "piece 1 (aggregate)" in fast["reason"], fast


def test_a_group_the_changes_empty_leaves_a_window_over_its_piece_without_a_trace(built_shop):
    project = built_shop.seeded()
    db = built_shop.db
    db.execute("INSERT INTO orders (id, customer_id, status, amount) VALUES (9001, 1, 'gone', 5), (9002, 1, 'gone', 7)")
    from shop import fast_refresh_and_check
    fast_refresh_and_check(project, VIEWS)
    db.execute("DELETE FROM orders WHERE status = 'gone'")  # its group, and its piece's row, emptied
    fast_refresh_and_check(project, VIEWS)


@pytest.mark.slow
@settings(max_examples=examples(1), deadline=None)
@given(sequence=sequences)
def test_random_dml_under_grouping_sets_refreshes_fast_and_exactly(built_shop, sequence):
    random_dml_then_refresh(built_shop, sequence, VIEWS)
