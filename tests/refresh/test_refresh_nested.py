"""Queries over an aggregated derived table or CTE that does not merge (TPC-H Q13, Q15, and Q20's
correlated aggregate once decorrelated into one): the
aggregate kept fast with its rows as state, the query recomputed from them, checked against
PostgreSQL (issue #61, item 3)."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import assert_view_matches, examples, refresh_ok
from hypothesis import given, settings
from shop import check_fast_views, random_dml_then_refresh, sequences, shared_shop
from sqlglot import exp

from mvlog.sql.parse.sqltree import parsed
from mvlog.sql.rewrite import decorrelate
from mvlog.sql.strategies import composed

pytestmark = pytest.mark.integration

VIEWS = [
    {"name": "orders_per_customer", "refresh": "fast",  # Q13: a count of counts over a LEFT JOIN
     "query": "SELECT n, count(*) AS customers FROM (SELECT c.id, count(o.id) AS n FROM customers c "
              "LEFT JOIN orders o ON o.customer_id = c.id GROUP BY c.id) t GROUP BY n"},
    {"name": "top_spender", "refresh": "fast",  # Q15: a CTE joined, and its max
     "query": "WITH totals AS (SELECT customer_id, sum(amount) AS total FROM orders GROUP BY customer_id) "
              "SELECT c.id, c.name, t.total FROM customers c, totals t WHERE c.id = t.customer_id "
              "AND t.total = (SELECT max(total) FROM totals)"},
    {"name": "spread_of_totals", "refresh": "fast",  # a global aggregate over an aggregate
     "query": "SELECT avg(t.total) AS mean, max(t.total) AS top, count(*) AS n FROM "
              "(SELECT customer_id, sum(amount) AS total FROM orders GROUP BY customer_id) t"},
    {"name": "big_open_buyers", "refresh": "fast",  # Q20: a correlated aggregate inside IN, decorrelated
     "query": "SELECT n.name, c.name AS customer FROM customers c, nation n WHERE c.nation_id = n.id AND c.id IN "
              "(SELECT o.customer_id FROM orders o WHERE o.amount > (SELECT 0.5 * sum(o2.amount) FROM orders o2 "
              "WHERE o2.customer_id = o.customer_id AND o2.priority = o.priority AND o2.status = 'open'))"},
    {"name": "above_status_average", "refresh": "fast",  # TPC-DS q01: a correlated average over a piece
     "query": "WITH totals AS (SELECT customer_id, status, sum(amount) AS total FROM orders GROUP BY customer_id, "
              "status) SELECT c.name, t1.status, t1.total FROM totals t1, customers c WHERE t1.total > "
              "(SELECT avg(t2.total) FROM totals t2 WHERE t2.status = t1.status) AND c.id = t1.customer_id"},
    {"name": "segment_counts", "refresh": "fast",  # outer-joined: equal rows, NULL-extended ones
     "query": "SELECT c.segment, t.n FROM customers c LEFT JOIN (SELECT customer_id, count(*) AS n FROM orders "
              "GROUP BY customer_id) t ON t.customer_id = c.id"},
]


@pytest.fixture(scope="module")
def built_shop(request, pg, tmp_path_factory):
    with shared_shop(request, pg, tmp_path_factory.mktemp("shop"), VIEWS, "local") as built:
        yield built


def test_a_fixed_scenario(built_shop):
    shop, db = built_shop.seeded(), built_shop.db
    check_fast_views(shop, VIEWS)
    # recomputed each refresh: its correlated average joined grouped, not run once per row of the piece
    on_top = parsed(shop.plan("above_status_average").shape.composed.outer_sql)
    assert not [q for q in on_top.find_all(exp.Subquery) if q.find_ancestor(exp.Where)], on_top.sql()
    db.execute("INSERT INTO orders VALUES (9, 4, 'open', 400.00, 1), (10, NULL, 'open', 1.00, 1)")
    db.execute("UPDATE orders SET customer_id = 3 WHERE id = 1")
    db.execute("UPDATE customers SET segment = 'corp' WHERE id = 2")
    results = refresh_ok(shop)
    assert {r.method for r in results.values()} == {"fast"}
    check_fast_views(shop, VIEWS)
    db.execute("DELETE FROM orders WHERE customer_id = 4; UPDATE customers SET id = 40 WHERE id = 1")
    refresh_ok(shop)
    check_fast_views(shop, VIEWS)


@pytest.mark.slow
@settings(max_examples=examples(1))
@given(sequence=sequences)
def test_random_dml_then_fast_refresh_equals_postgres(built_shop, sequence):
    random_dml_then_refresh(built_shop, sequence, VIEWS)


def test_without_the_inner_rows_kept_the_oracle_fails(db, make_project, monkeypatch):
    """The deliberate break: the inner aggregate's rows (and the view's keys) not brought to the
    refresh's end. The next refresh recomputes the query from stale rows."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, g int)")
    db.execute("INSERT INTO t SELECT i, i % 3 FROM generate_series(1, 9) i")
    project = make_project(["t"], [{"name": "counts", "refresh": "fast",
                                     "query": "SELECT n, count(*) AS groups FROM (SELECT g, count(*) AS n FROM t "
                                              "GROUP BY g) s GROUP BY n"}])
    project.apply()
    db.execute("INSERT INTO t VALUES (10, 0)")
    assert refresh_ok(project)["counts"].method == "fast"
    assert_view_matches(project, "counts")
    monkeypatch.setattr(composed, "update_sql", lambda composition, changed, keys=True: ["SELECT 1"])
    db.execute("INSERT INTO t VALUES (11, 1)")
    refresh_ok(project)
    assert_view_matches(project, "counts")  # read from the rows as they were recorded: still right
    db.execute("INSERT INTO t VALUES (12, 2)")
    refresh_ok(project)  # group 1's new count was never kept
    with pytest.raises(AssertionError):
        assert_view_matches(project, "counts")


def test_the_view_s_keys_come_from_its_read_and_none_kept_fails_the_oracle(db, make_project, monkeypatch):
    """A fast refresh keeps the keys of the rows its read returned (the query's rows now) instead
    of computing the query again. The deliberate break: no keys kept. A row the next refresh
    takes away is then not known as the view's, and stays in it."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, g int)")
    db.execute("INSERT INTO t SELECT i, i % 3 FROM generate_series(1, 9) i")
    query = "SELECT n, count(*) AS groups FROM (SELECT g, count(*) AS n FROM t GROUP BY g) s GROUP BY n"
    project = make_project(["t"], [{"name": "counts", "refresh": "fast", "query": query},
                                   {"name": "counts_broken", "refresh": "fast", "query": query}])
    project.apply()
    kept, statement = [], composed.kept_keys_sql
    monkeypatch.setattr(composed, "kept_keys_sql", lambda c: kept.append(c) or statement(c))
    db.execute("INSERT INTO t VALUES (10, 0)")  # counts 4, 3, 3: rows (4, 1) and (3, 2)
    assert refresh_ok(project, ["counts"])["counts"].method == "fast" and kept
    db.execute("DELETE FROM t WHERE id = 10")  # counts 3, 3, 3 again: (4, 1) and (3, 2) taken away
    refresh_ok(project, ["counts"])
    assert_view_matches(project, "counts")
    monkeypatch.setattr(composed, "kept_keys_sql", lambda composition: "SELECT 1")
    db.execute("INSERT INTO t VALUES (10, 0)")
    refresh_ok(project, ["counts_broken"])
    assert_view_matches(project, "counts_broken")  # written from the read: right, but its keys not kept
    db.execute("DELETE FROM t WHERE id = 10")
    refresh_ok(project, ["counts_broken"])
    with pytest.raises(AssertionError):
        assert_view_matches(project, "counts_broken")


def test_the_record_s_second_computation_of_the_pieces_reads_is_its_own_phase(db, make_project, monkeypatch):
    """A composed view's record computes its pieces' fast reads again (``Strategy.scratch``) before
    it updates their state: that time is ``reread``, counted once (not in ``record`` too); a view
    without such reads has no ``reread``."""
    from mvlog.sql.strategies.strategy import Scratch

    db.execute("CREATE TABLE t (id int PRIMARY KEY, g int)")
    db.execute("INSERT INTO t SELECT i, i % 3 FROM generate_series(1, 9) i")
    project = make_project(["t"], [
        {"name": "counts", "refresh": "fast",
         "query": "SELECT n, count(*) AS groups FROM (SELECT g, count(*) AS n FROM t GROUP BY g) s GROUP BY n"},
        {"name": "plain", "refresh": "fast", "query": "SELECT id, g FROM t WHERE g > 0"}])
    project.apply()
    scratch = composed.ComposedRows.scratch

    def slow_scratch(self, since):  # each piece's read takes 0.8 s more
        return [Scratch(s.create, s.fill, s.analyze + "; SELECT pg_sleep(0.8)", s.drop, s.carried)
                for s in scratch(self, since)]

    monkeypatch.setattr(composed.ComposedRows, "scratch", slow_scratch)
    db.execute("INSERT INTO t VALUES (10, 1)")
    results = refresh_ok(project)
    assert {r.method for r in results.values()} == {"fast"}
    phases = results["counts"].phases
    assert phases["reread"] >= 0.8 and phases["record"] < phases["reread"], phases
    assert sum(phases.values()) <= results["counts"].seconds
    assert "reread" not in results["plain"].phases, results["plain"].phases
    assert_view_matches(project, "counts")


def test_the_record_takes_the_pieces_rows_from_the_read_and_none_carried_fails_the_oracle(
        db, make_project, monkeypatch):
    """A composed view's fast read returns its pieces' changed rows too, and the record fills its
    scratch tables from them: a record that computed them again would fail here (their query made
    to divide by zero). The deliberate break: the carried rows lost on the way (none filled) —
    the pieces' rows are not brought to the refresh's end, and the next refresh is wrong."""
    from mvlog.sql.strategies.strategy import Scratch

    db.execute("CREATE TABLE t (id int PRIMARY KEY, g int)")
    db.execute("INSERT INTO t SELECT i, i % 3 FROM generate_series(1, 9) i")
    query = "SELECT n, count(*) AS groups FROM (SELECT g, count(*) AS n FROM t GROUP BY g) s GROUP BY n"
    project = make_project(["t"], [{"name": "counts", "refresh": "fast", "query": query}])
    project.apply()
    scratch = composed.ComposedRows.scratch
    monkeypatch.setattr(composed.ComposedRows, "scratch", lambda self, since: [
        Scratch(s.create, "SELECT 1 / 0", s.analyze, s.drop, s.carried) for s in scratch(self, since)])
    for change in ("INSERT INTO t VALUES (10, 0)", "DELETE FROM t WHERE id IN (1, 2)",
                   "UPDATE t SET g = 5 WHERE id = 3"):
        db.execute(change)
        assert refresh_ok(project)["counts"].method == "fast"
        assert_view_matches(project, "counts")
    monkeypatch.setattr(composed.ComposedRows, "scratch", lambda self, since: [
        Scratch(s.create, "SELECT 1", s.analyze, s.drop, ("SELECT 1", s.carried[1]) if s.carried else None)
        for s in scratch(self, since)])
    db.execute("INSERT INTO t VALUES (11, 1), (12, 1)")
    refresh_ok(project)
    assert_view_matches(project, "counts")  # written from the read: right, but the piece's rows not kept
    db.execute("INSERT INTO t VALUES (13, 0)")
    refresh_ok(project)
    with pytest.raises(AssertionError):
        assert_view_matches(project, "counts")


def test_the_carried_rows_are_kept_when_the_view_s_own_rows_are_too_many_to_carry(db, make_project, monkeypatch):
    """The rows a read carried for the scratch tables do not depend on the view's own rows being
    few enough to carry as keys (``KEPT_ROWS_MAX``): with none kept, the record still fills its
    scratch tables from the carried rows (their own query made to divide by zero) and computes the
    keys itself."""
    from mvlog.pipeline import fastwrite
    from mvlog.sql.strategies.strategy import Scratch

    db.execute("CREATE TABLE t (id int PRIMARY KEY, g int)")
    db.execute("INSERT INTO t SELECT i, i % 3 FROM generate_series(1, 9) i")
    query = "SELECT n, count(*) AS groups FROM (SELECT g, count(*) AS n FROM t GROUP BY g) s GROUP BY n"
    project = make_project(["t"], [{"name": "counts", "refresh": "fast", "query": query}])
    project.apply()
    monkeypatch.setattr(fastwrite, "KEPT_ROWS_MAX", 0)
    scratch = composed.ComposedRows.scratch
    monkeypatch.setattr(composed.ComposedRows, "scratch", lambda self, since: [
        Scratch(s.create, "SELECT 1 / 0", s.analyze, s.drop, s.carried) for s in scratch(self, since)])
    for change in ("INSERT INTO t VALUES (10, 0)", "UPDATE t SET g = 7 WHERE id IN (4, 5)"):
        db.execute(change)
        assert refresh_ok(project)["counts"].method == "fast"
        assert_view_matches(project, "counts")


def test_carried_rows_the_record_refuses_are_computed_again(db, make_project, monkeypatch):
    """Rows a read carried that do not fit the record's scratch table (a read sent in another form
    with other columns) are computed again by the record, which says so, and the view stays right."""
    from mvlog.pipeline import fastwrite

    db.execute("CREATE TABLE t (id int PRIMARY KEY, g int)")
    db.execute("INSERT INTO t SELECT i, i % 3 FROM generate_series(1, 9) i")
    query = "SELECT n, count(*) AS groups FROM (SELECT g, count(*) AS n FROM t GROUP BY g) s GROUP BY n"
    project = make_project(["t"], [{"name": "counts", "refresh": "fast", "query": query}])
    project.apply()
    kept_rows = fastwrite.kept_rows
    monkeypatch.setattr(fastwrite, "kept_rows", lambda *args: dataclasses.replace(
        kept_rows(*args), carried={1: ["(1,2,3,4,5,6,7)"]}))
    said = []
    monkeypatch.setattr(project, "_message", said.append)
    db.execute("INSERT INTO t VALUES (10, 0)")
    assert refresh_ok(project)["counts"].method == "fast"
    assert [m for m in said if "the rows its read carried do not fit" in m and "computed again" in m], said
    assert_view_matches(project, "counts")
    db.execute("DELETE FROM t WHERE id = 10")
    assert refresh_ok(project)["counts"].method == "fast"
    assert_view_matches(project, "counts")


def test_a_count_decorrelated_as_if_null_over_no_rows_fails_the_oracle(db, make_project, monkeypatch):
    """The deliberate break of the decorrelation's rule: a count taken as NULL over no rows (it
    is 0). A row whose subquery reads no rows is dropped by the join, kept by the query."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, g int, v int)")
    db.execute("INSERT INTO t VALUES (1, 1, 1), (2, 1, 5), (3, 2, 0)")
    view = {"name": "small", "refresh": "force",
            "query": "SELECT s.id FROM t s WHERE s.id IN (SELECT a.id FROM t a WHERE a.v >= "
                     "(SELECT count(*) FROM t b WHERE b.g = a.g AND b.v > 2))"}
    project = make_project(["t"], [view])
    project.apply()
    db.execute("INSERT INTO t VALUES (5, 1, 7)")
    assert refresh_ok(project)["small"].method == "complete"  # a count: left alone
    assert_view_matches(project, "small")
    monkeypatch.setattr(decorrelate, "_NULL_ON_EMPTY", (*decorrelate._NULL_ON_EMPTY, exp.Count))
    broken = make_project(["t"], [{**view, "name": "small_broken"}])
    broken.apply()
    db.execute("INSERT INTO t VALUES (4, 3, 0)")  # group 3 has no row with v > 2: count 0, 0 >= 0
    assert refresh_ok(broken)["small_broken"].method == "fast"
    with pytest.raises(AssertionError):
        assert_view_matches(broken, "small_broken")


def test_every_state_table_is_counted_by_status_and_dropped_with_its_view(db, make_project):
    """The catalog finds a view's state by the names its strategy owns (the registry), whatever the
    view's kind: a composed view's pieces (their key maps, group tables and rows), a top-N view's
    first rows, a range parameter's values."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, g int, v int)")
    db.execute("INSERT INTO t SELECT i, i % 3, i FROM generate_series(1, 12) i")
    views = [
        {"name": "counts", "refresh": "fast", "query": "SELECT n, count(*) AS groups FROM (SELECT g, count(*) AS n "
                                                       "FROM t GROUP BY g) s GROUP BY n"},
        {"name": "top_groups", "refresh": "fast", "query": "SELECT g, sum(v) AS s FROM t GROUP BY g "
                                                           "ORDER BY s DESC LIMIT 2"},
        {"name": "above_mean", "refresh": "fast", "query": "SELECT id FROM t WHERE v > (SELECT avg(v) FROM t)"},
    ]
    project = make_project(["t"], views)
    project.apply()

    def state() -> set[str]:
        return {r[0] for r in db.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'mvlog' AND tablename "
                                         "~ '^(keys|groups|top|inner|outer|param)\\$'")}

    kept = state()
    status = {v["name"]: v for v in project.status()["views"]}
    assert sum(status[v["name"]]["state_tables"] for v in views) == len(kept)
    assert all(status[v["name"]]["state_tables"] > 0 and status[v["name"]]["state_bytes"] > 0 for v in views)
    assert {t.split("$")[0] for t in kept} >= {"keys", "groups", "top", "inner", "outer", "param"}
    project.drop_views(["counts"])
    assert not any("counts" in t for t in state()) and state()
    project.drop_views(["top_groups", "above_mean"])
    assert state() == set()
