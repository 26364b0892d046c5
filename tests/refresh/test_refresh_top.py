"""Top-N views (``ORDER BY … LIMIT n [OFFSET m]``): fast refresh from the full view's changes and
a margin of rows below the cut, checked against PostgreSQL (issue #61, item 4)."""

from __future__ import annotations

import contextlib

import deltalake
import psycopg2
import pytest
from conftest import examples, refresh_ok
from hypothesis import given, settings
from shop import check_fast_views, random_dml_then_refresh, sequences, shared_shop
from sqlglot import exp

from mvlog.sql.strategies import topn

pytestmark = pytest.mark.integration

# Each ORDER BY ends with the view key, so PostgreSQL's own result is the one mvlog keeps; ties
# without it are tested below. The margins hold as many rows as the LIMIT: the shop's 15 orders
# leave and refill them often.
VIEWS = [
    {"name": "top_amounts", "refresh": "fast",  # one table; NULL amounts sort last
     "query": "SELECT id, customer_id, amount FROM orders ORDER BY amount DESC NULLS LAST, id LIMIT 3"},
    {"name": "busiest_customers", "refresh": "fast",  # an aggregate by deltas, OFFSET, a NULL group
     "query": "SELECT customer_id, count(*) AS n, sum(amount) AS total FROM orders GROUP BY customer_id "
              "ORDER BY n DESC, customer_id LIMIT 2 OFFSET 1"},
    {"name": "top_named_orders", "refresh": "fast",  # a join, ordered by position and by name
     "query": "SELECT o.id AS order_id, c.name, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id "
              "ORDER BY 3 ASC NULLS FIRST, order_id FETCH FIRST 2 ROWS ONLY"},
    {"name": "top_counted", "refresh": "fast",  # a correlated scalar subquery
     "query": "SELECT c.id, (SELECT count(*) FROM orders o WHERE o.customer_id = c.id) AS n FROM customers c "
              "ORDER BY n DESC, id LIMIT 2"},
    {"name": "nearest_to_fifty", "refresh": "fast",  # ordered by an expression over its rows, not an output
     "query": "SELECT id, amount FROM orders ORDER BY abs(amount - 50) NULLS LAST, CASE WHEN id > 5 THEN id END "
              "NULLS FIRST, id LIMIT 3"},
]


@pytest.fixture(scope="module")
def built_shop(request, pg, tmp_path_factory):
    with shared_shop(request, pg, tmp_path_factory.mktemp("shop"), VIEWS, "local") as built:
        yield built


def test_a_fixed_scenario_moves_rows_in_and_out_of_the_top(built_shop):
    shop, db = built_shop.seeded(), built_shop.db
    check_fast_views(shop, VIEWS)
    db.execute("UPDATE orders SET amount = 900 WHERE id = 5")                 # a row enters at the top
    db.execute("DELETE FROM orders WHERE id IN (1, 2)")                       # the old top leaves
    db.execute("INSERT INTO orders VALUES (9, 2, 'open', 1.00, 1), (10, 2, 'open', NULL, 1)")
    results = refresh_ok(shop)
    assert {r.method for r in results.values()} == {"fast"}
    check_fast_views(shop, VIEWS)
    db.execute("DELETE FROM orders WHERE amount > 5")                         # more leave than the margin held
    db.execute("UPDATE customers SET id = 30 WHERE id = 2")
    refresh_ok(shop)
    check_fast_views(shop, VIEWS)


@pytest.mark.slow
@settings(max_examples=examples(1))
@given(sequence=sequences)
def test_random_dml_then_fast_refresh_equals_postgres(built_shop, sequence):
    random_dml_then_refresh(built_shop, sequence, VIEWS)


def _rows(dsn: str, query: str) -> list[tuple]:
    with contextlib.closing(psycopg2.connect(dsn)) as conn, conn.cursor() as cur:
        cur.execute(query)
        return sorted(cur.fetchall(), key=repr)


def _view_rows(project, view: str, columns: str) -> list[tuple]:
    table = deltalake.DeltaTable(project.config.view_location(view).removeprefix("file:")).to_pyarrow_table()
    return sorted(zip(*(table.column(c).to_pylist() for c in columns.split(", "))), key=repr)


def test_ties_are_broken_by_the_view_key(db, make_project):
    """Four groups tie on their count: the view holds the two with the smallest keys, as the
    query with its key appended to the ORDER BY returns them, after changes too."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, g int, v int)")
    db.execute("INSERT INTO t SELECT i, i % 4, i FROM generate_series(1, 8) i")
    project = make_project(["t"], [{"name": "top_groups", "refresh": "fast",
                                     "query": "SELECT g, count(*) AS n FROM t GROUP BY g ORDER BY n DESC LIMIT 2"}])
    project.apply()
    tied = "SELECT g, count(*) AS n FROM t GROUP BY g ORDER BY n DESC, g LIMIT 2"
    assert _view_rows(project, "top_groups", "g, n") == _rows(db.dsn, tied) == [(0, 2), (1, 2)]
    db.execute("DELETE FROM t WHERE id = 4; INSERT INTO t VALUES (9, 3, 9)")  # group 0 drops out, 3 leads
    assert refresh_ok(project)["top_groups"].method == "fast"
    assert _view_rows(project, "top_groups", "g, n") == _rows(db.dsn, tied) == [(1, 2), (3, 3)]


def test_without_reading_the_query_again_when_the_margin_runs_out_the_oracle_fails(db, make_project, monkeypatch):
    """The deliberate break: the candidates always taken as enough. Deleting the top rows leaves
    fewer than the LIMIT above the margin's cut; the view must read the rows below it again."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v int)")
    db.execute("INSERT INTO t SELECT i, i FROM generate_series(1, 8) i")
    query = "SELECT id, v FROM t ORDER BY v DESC LIMIT 2"  # the margin: v 8 … 5; the cut: 5
    project = make_project(["t"], [{"name": "top_v", "refresh": "fast", "query": query}])
    project.apply()
    db.execute("DELETE FROM t WHERE v >= 6")
    assert refresh_ok(project)["top_v"].method == "fast"
    assert _view_rows(project, "top_v", "id, v") == _rows(db.dsn, query) == [(4, 4), (5, 5)]
    monkeypatch.setattr(topn, "enough_above_cut", lambda cut, top: topn.exp.true())
    db.execute("DELETE FROM t WHERE v >= 4")  # the margin (5, 4, 3, 2) loses its top two
    refresh_ok(project)
    db.execute("DELETE FROM t WHERE v = 3")  # one row left above the cut (2): too few
    refresh_ok(project)
    assert _rows(db.dsn, query) == [(1, 1), (2, 2)]
    assert _view_rows(project, "top_v", "id, v") != [(1, 1), (2, 2)]


def test_a_recompute_over_an_aggregate_reads_its_group_state_and_changes(db, make_project, monkeypatch):
    """An aggregate by deltas is recomputed from its group table and the changed groups, not the
    base tables. The deliberate break: the changed groups left out of that recompute — a group
    that changed and fell below the old cut is then missing from the new top."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, g text, v int)")
    query = "SELECT g, sum(v) AS s FROM t GROUP BY g ORDER BY s DESC, g LIMIT 1"  # margin: a 10, b 9; cut b
    for name, break_it in (("top_group", False), ("top_group_broken", True)):
        db.execute("TRUNCATE t; INSERT INTO t VALUES (1, 'a', 10), (2, 'b', 9), (3, 'c', 8), (4, 'd', 1)")
        project = make_project(["t"], [{"name": name, "refresh": "fast", "query": query}])
        project.apply()
        assert "from its group state" in next(c for c in project.explain(name).capabilities
                                              if c.name == "REFRESH_FAST").reason
        if break_it:
            monkeypatch.setattr(topn, "_now_from_state", lambda top, keys, state: exp.select(
                *[exp.column(c, table="s") for c in top.columns]).from_(exp.Subquery(
                    this=state, alias=exp.TableAlias(this=exp.to_identifier("s")))))
        db.execute("DELETE FROM t WHERE id IN (1, 2); UPDATE t SET v = 7 WHERE id = 3")  # c 7 is below b 9
        assert refresh_ok(project)[name].method == "fast"
        if break_it:
            assert _view_rows(project, name, "g, s") != _rows(db.dsn, query)
        else:
            assert _view_rows(project, name, "g, s") == _rows(db.dsn, query) == [("c", 7)]
