"""Which CTEs a read sends NOT MATERIALIZED (sql/rewrite/restricted_ctes.py): those read several
times, every time restricted by a constant on a column PostgreSQL can push into the CTE's body."""

from __future__ import annotations

import random

import pytest

from mvlog.sql.parse.sqltree import parsed
from mvlog.sql.rewrite.restricted_ctes import inlined_form, restricted_ctes

# q04's shape: one UNION ALL of per-channel aggregates, read once per channel and year.
YEAR_TOTAL = ("WITH year_total AS (SELECT s.c AS customer_id, s.y AS dyear, sum(s.v) AS total, 's' AS sale_type "
              "FROM store s GROUP BY s.c, s.y UNION ALL SELECT w.c, w.y, sum(w.v), 'w' FROM web w GROUP BY w.c, w.y) "
              "SELECT a.customer_id FROM year_total a, year_total b "
              "WHERE a.customer_id = b.customer_id AND {first} AND {second}")


def inlined_names(sql: str) -> tuple[str, ...]:
    found = inlined_form(sql)
    return found[1] if found else ()


@pytest.mark.parametrize("first, second", [
    ("a.sale_type = 's' AND a.dyear = 2001", "b.sale_type = 'w' AND b.dyear = 2002"),
    ("2001 = a.dyear", "b.dyear BETWEEN 2001 AND 2002"),  # the constant on either side, a range
    ("a.dyear IN (2001, 2002)", "(b.sale_type = 'w' AND b.customer_id > 0)"),  # inside parentheses
    ("a.dyear = CAST('2001' AS INT)", "b.dyear = 2000 + 1"),  # constant expressions
])
def test_a_cte_every_reference_restricts_by_a_constant_is_inlined(first, second):
    sql = YEAR_TOTAL.format(first=first, second=second)
    found = inlined_form(sql)
    assert found is not None and found[1] == ("year_total",)
    assert "WITH year_total AS NOT MATERIALIZED (" in found[0]
    assert parsed(found[0]).sql() == parsed(sql).sql().replace("year_total AS (", "year_total AS NOT MATERIALIZED (")


@pytest.mark.parametrize("first, second", [
    ("a.dyear = 2001", "b.dyear = a.dyear"),  # b keeps every year: inlined, it is computed whole again
    ("a.total > 100", "b.total > 100"),  # an aggregate's output: the filter stays above the GROUP BY
    ("a.dyear <> 2001", "b.dyear <> 2002"),  # keeps nearly everything
    ("a.dyear = 2001 OR a.dyear = 2002", "b.dyear = 2001"),  # a disjunction is not pushed as one column's filter
    ("a.dyear = (SELECT max(y) FROM store)", "b.dyear = 2001"),  # a subquery is no constant
    ("dyear = 2001", "b.dyear = 2001"),  # unqualified among two FROM items: whose column it is needs the catalog
])
def test_a_reference_not_restricted_by_a_constant_on_a_pushable_column_keeps_the_cte_materialized(first, second):
    assert inlined_form(YEAR_TOTAL.format(first=first, second=second)) is None


@pytest.mark.parametrize("sql", [
    # read once: PostgreSQL inlines it itself
    "WITH t AS (SELECT x.a, sum(x.b) AS s FROM x GROUP BY x.a) SELECT t.s FROM t WHERE t.a = 1",
    # written MATERIALIZED: the user's word
    "WITH t AS MATERIALIZED (SELECT x.a FROM x) SELECT p.a FROM t p, t q WHERE p.a = 1 AND q.a = 2",
    # LIMIT in the body: a filter cannot pass it
    "WITH t AS (SELECT x.a FROM x LIMIT 10) SELECT p.a FROM t p, t q WHERE p.a = 1 AND q.a = 2",
    # a window's output, and grouping sets
    "WITH t AS (SELECT x.a, rank() OVER (ORDER BY x.b) AS r FROM x) SELECT p.a FROM t p, t q WHERE p.r = 1 AND q.r = 2",
    "WITH t AS (SELECT x.a, sum(x.b) AS s FROM x GROUP BY ROLLUP (x.a)) "
    "SELECT p.s FROM t p, t q WHERE p.a = 1 AND q.a = 2",
    # a column aggregated in one branch of a UNION ALL only
    "WITH t AS (SELECT x.a FROM x UNION ALL SELECT max(y.a) FROM y) SELECT p.a FROM t p, t q WHERE p.a = 1 AND q.a = 2",
    # one reference in a subquery's IN list: not restricted there
    "WITH t AS (SELECT x.a FROM x) SELECT p.a FROM t p WHERE p.a = 1 AND p.a IN (SELECT q.a FROM t q)",
    # restricted only in a LEFT JOIN's condition: the reference keeps every row
    "WITH t AS (SELECT x.a FROM x) SELECT p.a FROM t p LEFT JOIN t q ON q.a = 2 AND q.a = p.a WHERE p.a = 1",
    # what two computations may give differently: a window's numbering of ties, an order-sensitive
    # aggregate, a function mvlog does not know (materialized, the references share one result)
    "WITH t AS (SELECT x.a, row_number() OVER (ORDER BY x.b) AS r FROM x) "
    "SELECT p.r FROM t p, t q WHERE p.a = 1 AND q.a = 2",
    "WITH t AS (SELECT x.a, string_agg(x.c, ',') AS cs FROM x GROUP BY x.a) "
    "SELECT p.cs FROM t p, t q WHERE p.a = 1 AND q.a = 2",
    "WITH t AS (SELECT x.a, my_udf(x.b) AS b FROM x) SELECT p.b FROM t p, t q WHERE p.a = 1 AND q.a = 2",
    # a star in the body: its columns need the catalog
    "WITH t AS (SELECT x.* FROM x) SELECT p.a FROM t p, t q WHERE p.a = 1 AND q.a = 2",
    # no CTE
    "SELECT x.a FROM x WHERE x.a = 1",
])
def test_what_stays_materialized(sql):
    assert inlined_form(sql) is None


def test_a_cte_inside_a_derived_table_and_several_ctes():
    """mvlog's reads wrap the view's query in its own SELECT (a bag view's row key): the WITH is
    then in a derived table; of two CTEs only the restricted one is inlined."""
    body = ("WITH t AS (SELECT x.a, x.b FROM x), u AS (SELECT y.a FROM y) "
            "SELECT p.b FROM t p, t q, u, u v WHERE p.a = 1 AND q.a = 2 AND u.a = v.a AND v.a = 3")
    wrapped = f"SELECT o.*, 1 AS k FROM ({body}) AS o"
    assert inlined_names(wrapped) == ("t",)
    assert [c.alias for c in restricted_ctes(parsed(wrapped))] == ["t"]


def test_a_reference_from_another_cte_counts():
    sql = ("WITH t AS (SELECT x.a FROM x), u AS (SELECT r.a FROM t r WHERE r.a = 5) "
           "SELECT p.a FROM t p, u WHERE p.a = 1 AND u.a = p.a")
    assert inlined_names(sql) == ("t",)
    unrestricted = sql.replace("WHERE r.a = 5", "")
    assert inlined_names(unrestricted) == ()


def test_random_restrictions_inline_exactly_when_every_reference_has_one():
    """Any number of references, each restricted or not at random: inlined iff all are."""
    rng = random.Random()
    for _ in range(50):
        n = rng.randint(2, 5)
        restricted = [rng.random() < 0.7 for _ in range(n)]
        where = " AND ".join([f"r{i}.a = r0.a" for i in range(1, n)]
                             + [f"r{i}.b = {rng.randint(1, 9)}" for i in range(n) if restricted[i]])
        sql = ("WITH t AS (SELECT x.a, x.b, count(*) AS c FROM x GROUP BY x.a, x.b) SELECT r0.c FROM "
               + ", ".join(f"t r{i}" for i in range(n)) + f" WHERE {where}")
        assert (inlined_form(sql) is not None) is all(restricted), (sql, restricted)
