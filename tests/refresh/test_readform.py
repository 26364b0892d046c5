"""Which form of a read PostgreSQL is sent (pipeline/readform.py): a correlated scalar aggregate
as written (a SubPlan, run per outer row) or joined grouped, by PostgreSQL's estimates — chosen
from the estimates alone (no database), then from PostgreSQL's own over the large shop, where
each form wins somewhere and both return the same rows; and a CTE read several times, each time
restricted by a constant, inlined — planned without a CTE Scan, the same rows, and sent so by a
build, a fast and a complete refresh."""

from __future__ import annotations

import pytest
from conftest import assert_view_matches, refresh_ok
from shop import build_large_shop, built_over_large_shop

from mvlog.pipeline.readform import choose, inlined
from mvlog.postgres.source import Source
from mvlog.sql.rewrite.decorrelate import joined_form


def test_the_joined_form_is_sent_only_where_its_estimate_is_lower():
    costs = {"written": 100.0, "joined": 10.0}
    assert choose("written", "joined", costs.get).sql == "joined"
    chosen = choose("written", "joined", {"written": 10.0, "joined": 10.0}.get)
    assert chosen.sql == "written" and not chosen.joined and chosen.note("v") is None
    assert choose("written", "joined", {"written": 10.0}.get).sql == "written"  # the joined form not planned
    assert choose("written", "joined", {"joined": 1.0}.get).sql == "written"
    joined = choose("written", "joined", costs.get)
    assert joined.note("q06") == ("q06: its correlated aggregates read as joins (PostgreSQL's estimate 10 against "
                                  "100 run per row)")


def test_without_a_joined_form_nothing_is_estimated():
    def estimate(sql: str) -> float:
        raise AssertionError(f"estimated {sql}")

    assert choose("written", None, estimate).sql == "written"


# Over 40,000 orders: each order against 1.2 times its customer's average (orders.customer_id is
# indexed), as TPC-DS q06 compares an item with its category's average price.
ABOVE_AVERAGE = ('SELECT "o"."id" AS "id", "o"."amount" AS "amount" FROM "orders" AS "o" WHERE "o"."amount" > '
                 '1.2 * (SELECT avg("o2"."amount") AS "a" FROM "orders" AS "o2" WHERE "o2"."customer_id" = '
                 '"o"."customer_id")')


@pytest.mark.integration
@pytest.mark.parametrize("restriction, joined", [
    ("", True),  # every order: one grouped scan beats 40,000 index lookups
    (' AND "o"."id" IN (6, 18)', False),  # two orders: two index lookups beat aggregating every customer
])
def test_postgresql_s_estimates_choose_the_form_and_both_return_the_same_rows(db, restriction, joined):
    build_large_shop(db)
    db.execute("UPDATE orders SET amount = amount + 50 WHERE id % 3 = 0; ANALYZE orders")  # a third above average
    written = ABOVE_AVERAGE + restriction
    rewritten = joined_form(written)
    assert rewritten is not None
    source = Source(db.dsn)
    try:
        with source.inspection() as cur:
            form = choose(written, rewritten, lambda query: source.estimated_cost(cur, query))
            assert source.estimated_cost(cur, "SELECT no_such_column FROM orders") is None
            assert source.estimated_cost(cur, "SELECT 1") is not None  # the savepoint kept the transaction usable
    finally:
        source.close()
    assert form.joined is joined, form.costs
    assert form.sql == (rewritten if joined else written)
    rows = db.execute(f"SELECT count(*) FROM ({written}) w")[0][0]  # noqa: S608 (the test's own SQL)
    assert rows > (1000 if not restriction else 0)
    differ = db.execute(f"SELECT count(*) FROM (({written}) EXCEPT ALL ({rewritten})) a")[0][0]  # noqa: S608
    assert differ == 0 and db.execute(f"SELECT count(*) FROM (({rewritten}) EXCEPT ALL ({written})) b")[0][0] == 0


# TPC-DS q04's shape over 40,000 orders: one aggregate, read once per priority it compares.
PER_PRIORITY = ("WITH per_priority AS (SELECT o.customer_id, o.priority, sum(o.amount) AS total, count(*) AS n "
                "FROM orders o GROUP BY o.customer_id, o.priority) "
                "SELECT a.customer_id, a.total AS low, b.total AS high FROM per_priority a, per_priority b "
                "WHERE a.customer_id = b.customer_id AND a.priority = 1 AND b.priority = 2")


def plan_text(db, sql: str) -> str:
    return "\n".join(row[0] for row in db.execute(f"EXPLAIN {sql}"))


@pytest.mark.integration
def test_a_restricted_cte_is_planned_inlined_and_returns_the_same_rows(db):
    build_large_shop(db)
    form = inlined(PER_PRIORITY, PER_PRIORITY)
    assert form.inlined == ("per_priority",) and form.sql != PER_PRIORITY
    assert form.note("v") == "v: its CTE per_priority read inlined (every reference restricted by a constant)"
    assert "CTE Scan" in plan_text(db, PER_PRIORITY)  # PostgreSQL materializes a CTE read twice
    assert "CTE Scan" not in plan_text(db, form.sql)
    rows = db.execute(f"SELECT count(*) FROM ({PER_PRIORITY}) w")[0][0]  # noqa: S608 (the test's own SQL)
    assert rows > 1000
    for a, b in ((PER_PRIORITY, form.sql), (form.sql, PER_PRIORITY)):
        assert db.execute(f"SELECT count(*) FROM (({a}) EXCEPT ALL ({b})) d")[0][0] == 0  # noqa: S608
    assert inlined("SELECT 1", PER_PRIORITY).sql == PER_PRIORITY  # the view's own query has none: not looked at


@pytest.mark.integration
def test_a_view_s_reads_send_its_restricted_cte_inlined(db, make_project):
    """The build, a fast and a complete refresh of a q04-shaped view read the CTE inlined, and the
    view stays exact."""
    view = {"name": "priority_pairs", "refresh": "fast", "query": PER_PRIORITY}
    with built_over_large_shop(db, make_project, view, "per_priority read inlined") as (project, said):
        db.execute("UPDATE orders SET priority = 2 WHERE id % 50 = 0")  # rows move between the two references
        db.execute("UPDATE orders SET amount = amount + 3 WHERE id % 7 = 0; DELETE FROM orders WHERE id % 97 = 0")
        db.execute("INSERT INTO orders SELECT 50000 + g, g, 'open', 5, 1 + g % 2 FROM generate_series(1, 300) g")
        assert refresh_ok(project)["priority_pairs"].method == "fast"
        assert_view_matches(project, "priority_pairs")
        said.clear()
        assert refresh_ok(project, complete=True)["priority_pairs"].method == "complete"
        assert [m for m in said if "per_priority read inlined" in m], said
        assert_view_matches(project, "priority_pairs")
