"""Aggregate views maintained by state (count, sum, avg over exact types by deltas; min and max
by an index probe of the key map; FILTER clauses): random DML, moves between groups, dimension
fan-out, emptied and refilled groups, deletes of the current MIN/MAX, NULL groups and inputs, and
HAVING, checked against PostgreSQL by the oracle and by ``mvlog verify``."""

from __future__ import annotations

import pytest
from conftest import examples, refresh_ok
from hypothesis import given, settings
from shop import check_views, random_dml_then_refresh, sequences, shared_shop

from mvlog.sql.pieces.shape import keymap_name

pytestmark = pytest.mark.integration

VIEWS = [
    {"name": "by_status", "refresh": "fast",
     "query": "SELECT status, count(*) AS n, count(amount) AS n_amount, sum(amount) AS total, "
              "avg(amount) AS average, sum(priority) AS priorities, avg(priority) AS mean_priority "
              "FROM orders GROUP BY status"},
    {"name": "by_segment_region", "refresh": "fast",  # two dimensions fan out; NULL segments; HAVING
     "query": "SELECT c.segment, n.region, count(*) AS orders, sum(o.amount) AS revenue, "
              "sum(o.amount) / nullif(count(*), 0) AS per_order, count(o.amount) * 2 AS twice "
              "FROM orders o JOIN customers c ON c.id = o.customer_id JOIN nation n ON n.id = c.nation_id "
              "WHERE o.status IS DISTINCT FROM 'cancelled' "
              "GROUP BY c.segment, n.region HAVING count(*) >= 2"},
    {"name": "by_size", "refresh": "fast",  # grouped by an expression it does not output
     "query": "SELECT sum(o.priority) AS p, avg(o.amount * 2) AS a FROM orders o GROUP BY o.amount > 50"},
    {"name": "extremes", "refresh": "fast",  # MIN/MAX by state, shared and lone inputs; FILTER by deltas
     "query": "SELECT status, max(amount) AS hi, min(amount) AS lo, sum(amount) AS total, min(priority) AS p_lo, "
              "max(id) - min(id) AS id_span, count(*) FILTER (WHERE amount > 50) AS big, "
              "sum(amount) FILTER (WHERE priority > 1) AS urgent, max(amount) FILTER (WHERE priority < 5) AS hi_low, "
              "count(DISTINCT customer_id) AS buyers, count(DISTINCT amount) FILTER (WHERE priority > 2) AS prices "
              "FROM orders GROUP BY status"},
    {"name": "extremes_joined", "refresh": "fast",  # two group columns with NULLs; text MIN; HAVING on MAX
     "query": "SELECT c.segment, n.region, max(o.amount) AS hi, min(c.name) AS first_name, min(o.status) AS first, "
              "count(*) AS n, count(DISTINCT o.status) AS statuses, count(DISTINCT c.id) AS customers "
              "FROM orders o JOIN customers c ON c.id = o.customer_id "
              "JOIN nation n ON n.id = c.nation_id "
              "GROUP BY c.segment, n.region HAVING max(o.amount) IS NULL OR max(o.amount) > 4"},
]


@pytest.fixture(scope="module", params=["local"])  # over Spark Connect: test_connect_paths
def built_shop(request, pg, tmp_path_factory):
    with shared_shop(request, pg, tmp_path_factory.mktemp("shop"), VIEWS, request.param) as built:
        yield built


def groups_table(db, view: str) -> str | None:
    """The view's group table in schema mvlog, if it has one."""
    rows = db.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'mvlog' AND tablename LIKE %s",
                      (f"groups$\\_{view}\\_%",))
    return rows[0][0] if rows else None


def verify_ok(project) -> None:
    results = project.verify(sample=None)
    assert {(r.view, r.status) for r in results} == {(v["name"], "ok") for v in VIEWS}, \
        [(r.view, r.status, r.reason, r.mismatches[:2]) for r in results]


@pytest.mark.parametrize("built_shop", ["local"], indirect=True)  # plans and explanations: no Spark work
def test_every_view_is_kept_by_deltas_and_explain_and_plan_say_so(built_shop):
    shop = built_shop.project  # read only: plans and explanations
    for view in VIEWS:
        plan = shop.plan(view["name"]).to_json()
        assert plan["aggregate_deltas"] and plan["groups_recomputed"] is None, plan
        fast = next(c for c in shop.explain(view["name"]).capabilities if c.name == "REFRESH_FAST")
        assert fast.possible and fast.reason.startswith("by deltas"), fast.reason


@pytest.mark.deep  # the main tier: this class's random-DML oracle below
def test_fixed_scenario_moves_fans_out_empties_and_refills_groups(built_shop):
    shop, db = built_shop.seeded(), built_shop.db
    db.execute("UPDATE orders SET status = NULL WHERE id = 1")                 # into the NULL group
    db.execute("UPDATE orders SET customer_id = 2 WHERE id = 2")               # moves between groups
    db.execute("DELETE FROM orders WHERE id = 5")                              # empties 'cancelled'
    db.execute("UPDATE nation SET region = 2 WHERE id = 1")                    # a dimension fans out
    db.execute("UPDATE customers SET segment = NULL WHERE id = 3")             # into a NULL segment
    db.execute("UPDATE customers SET id = 40 WHERE id = 4")                    # key update: orders dangle
    db.execute("UPDATE orders SET amount = NULL WHERE id = 3")                 # a sum loses its only value
    results = refresh_ok(shop)
    assert {r.method for r in results.values()} <= {"fast", "fresh"}
    check_views(shop, VIEWS)
    db.execute("INSERT INTO orders VALUES (5, 4, 'cancelled', 1.00, 1)")       # 'cancelled' refilled
    db.execute("UPDATE customers SET id = 4 WHERE id = 40")                    # orders attach again
    db.execute("UPDATE orders SET amount = amount + 0.01, priority = NULL")    # every group changes
    results = refresh_ok(shop)
    assert {r.method for r in results.values()} <= {"fast", "fresh"}
    check_views(shop, VIEWS)
    verify_ok(shop)


@pytest.mark.slow
@pytest.mark.parametrize("built_shop", ["local"], indirect=True)
@settings(max_examples=examples(2))
@given(sequence=sequences)
def test_random_dml_then_fast_refresh_equals_postgres(built_shop, sequence):
    random_dml_then_refresh(built_shop, sequence, VIEWS)
    verify_ok(built_shop.project)


def test_a_fast_refresh_reads_changed_rows_not_whole_groups(db, make_project):
    """Two groups of 20,000 rows each: a changed row costs its own delta, not its group's rows."""
    db.execute("CREATE TABLE sale (id int PRIMARY KEY, g int NOT NULL, v numeric(10,2))")
    db.execute("INSERT INTO sale SELECT i, i % 2, i / 100.0 FROM generate_series(1, 40000) i")
    db.execute("ANALYZE sale")
    project = make_project(["sale"], [{"name": "per_g", "refresh": "fast",
                                       "query": "SELECT g, count(*) AS n, sum(v) AS total FROM sale GROUP BY g"}])
    project.apply()
    db.execute("UPDATE sale SET v = v + 1 WHERE id IN (1, 2); DELETE FROM sale WHERE id = 3")
    assert base_rows_read(project, "per_g", db, "sale") <= 10  # the 3 changed rows (the groups hold 40,000)
    assert refresh_ok(project)["per_g"].method == "fast"
    check_views(project, [{"name": "per_g"}])


def base_rows_read(project, view: str, db, table: str) -> int:
    """Rows the fast read of ``view`` takes from ``table`` (EXPLAIN ANALYZE of its SQL)."""
    plan = db.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + project.plan(view).read_sql())[0][0][0]["Plan"]

    def rows(node) -> int:
        here = node.get("Actual Rows", 0) * node.get("Actual Loops", 1) if node.get("Relation Name") == table else 0
        return here + sum(rows(child) for child in node.get("Plans", []))
    return rows(plan)


def test_min_max_and_distinct_counts_come_from_the_key_map_not_the_groups(db, make_project):
    """Two groups of 20,000 rows: deleting a group's current MAX and MIN, raising another row above
    it and moving one between groups reads those rows from the base table and probes the key
    map's (group, value) index, never the groups' other rows; a distinct count follows values
    that leave a group with their last row and values that enter it."""
    db.execute("CREATE TABLE sale (id int PRIMARY KEY, g int, v numeric(10,2), t text)")
    db.execute("INSERT INTO sale SELECT i, i % 2, i / 100.0, md5(i::text) FROM generate_series(1, 40000) i")
    db.execute("INSERT INTO sale VALUES (40001, NULL, 5, 'n1'), (40002, NULL, 7, 'n2')")  # a NULL group
    db.execute("ANALYZE sale")
    views = [{"name": "per_g", "refresh": "fast",
              "query": "SELECT g, max(v) AS hi, min(v) AS lo, max(t) AS last_t, count(*) AS n, "
                       "count(DISTINCT floor(v)) AS units FROM sale GROUP BY g"}]
    project = make_project(["sale"], views)
    project.apply()
    db.execute("DELETE FROM sale WHERE id IN (40000, 39999, 1, 2, 40002)")  # each group's MAX and MIN
    db.execute("UPDATE sale SET v = 1000 WHERE id = 10; UPDATE sale SET g = 1, v = -1 WHERE id = 20")
    db.execute("UPDATE sale SET t = NULL WHERE t = (SELECT max(t) FROM sale WHERE g = 0)")
    assert base_rows_read(project, "per_g", db, "sale") <= 10  # the 8 changed rows (the groups hold 20,000)
    probed = base_rows_read(project, "per_g", db, keymap_name("per_g"))
    assert probed <= 100, probed  # the changed rows' old entries, each probe's skipped and found rows
    assert refresh_ok(project)["per_g"].method == "fast"
    check_views(project, views)
    db.execute("DELETE FROM sale WHERE g IS NULL; UPDATE sale SET v = NULL WHERE id = 10")  # group emptied
    assert refresh_ok(project)["per_g"].method == "fast"
    check_views(project, views)


def test_a_view_without_its_group_table_recomputes_groups_until_a_complete_refresh(db, make_project):
    """A view built before aggregate deltas (no group table) stays fast and exact, recomputing
    its affected groups; its next complete refresh builds the state, and deltas take over."""
    db.execute("CREATE TABLE sale (id int PRIMARY KEY, g int, v numeric(10,2))")
    db.execute("INSERT INTO sale SELECT i, i % 3, i FROM generate_series(1, 30) i")
    views = [{"name": "per_g", "refresh": "fast", "query": "SELECT g, count(*) AS n, sum(v) AS s FROM sale GROUP BY g"}]
    project = make_project(["sale"], views)
    project.apply()
    table = groups_table(db, "per_g")
    db.execute(f'DROP TABLE mvlog."{table}"')
    db.execute("UPDATE sale SET g = 7 WHERE id < 5; DELETE FROM sale WHERE id = 9")
    assert refresh_ok(project)["per_g"].method == "fast"
    check_views(project, views)
    assert groups_table(db, "per_g") is None
    refresh_ok(project, complete=True)
    assert groups_table(db, "per_g") == table
    db.execute("UPDATE sale SET g = NULL WHERE id = 10; INSERT INTO sale VALUES (100, 7, 1)")
    assert "by deltas" in project.plan("per_g").describe()
    assert refresh_ok(project)["per_g"].method == "fast"
    check_views(project, views)


def test_aggregates_deltas_cannot_keep_exact_recompute_their_groups(db, make_project):
    db.execute("CREATE TABLE m (id int PRIMARY KEY, g int, x float8, y numeric)")
    db.execute("INSERT INTO m VALUES (1, 1, 0.1, 1), (2, 1, 0.2, 2), (3, 2, 0.3, 3)")
    views = [
        {"name": "float_sum", "refresh": "fast", "query": "SELECT g, sum(x) AS s FROM m GROUP BY g"},
        {"name": "spread", "refresh": "fast", "query": "SELECT g, stddev(y) AS sd, count(*) AS n FROM m GROUP BY g"},
        {"name": "exact", "refresh": "fast", "query": "SELECT g, sum(y) AS s, count(x) AS n, max(x) AS hi "
                                                      "FROM m GROUP BY g"},
    ]
    project = make_project(["m"], views)
    project.apply()
    plans = {v["name"]: project.plan(v["name"]).to_json() for v in views}
    assert "would drift" in plans["float_sum"]["groups_recomputed"]
    assert plans["spread"]["groups_recomputed"].startswith("stddev()")
    assert plans["exact"]["aggregate_deltas"] == ["SUM(y)", "COUNT(x)", "MAX(x)"]  # max of a float: exact
    assert [groups_table(db, v) is not None for v in ("float_sum", "spread", "exact")] == [False, False, True]
    db.execute("UPDATE m SET x = x + 0.7, y = y * 3 WHERE id = 2; DELETE FROM m WHERE id = 1")
    assert {r.method for r in refresh_ok(project).values()} <= {"fast", "fresh"}
    check_views(project, views)
