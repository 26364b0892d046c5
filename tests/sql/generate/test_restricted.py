"""The recompute of a few keys asks a grouped IN subquery per row (pure, no database)."""

from __future__ import annotations

import sqlglot

from mvlog.sql.generate.restricted import grouped_in_as_exists


def rewritten(sql: str) -> str:
    return grouped_in_as_exists(sqlglot.parse_one(sql, read="postgres")).sql("postgres")


def test_an_in_over_a_grouped_subquery_on_its_key_becomes_a_correlated_exists():
    q18 = ("SELECT o.o_orderkey FROM orders AS o WHERE (o.o_orderkey IN (SELECT l2.l_orderkey AS l_orderkey "
           "FROM lineitem AS l2 GROUP BY l2.l_orderkey HAVING SUM(l2.l_quantity) > 300) AND o.o_custkey = 1)")
    assert rewritten(q18) == ("SELECT o.o_orderkey FROM orders AS o WHERE (EXISTS(SELECT 1 FROM lineitem AS l2 "
                              "WHERE l2.l_orderkey = o.o_orderkey GROUP BY l2.l_orderkey "
                              "HAVING SUM(l2.l_quantity) > 300) AND o.o_custkey = 1)")
    # the subquery's own WHERE is kept beside the correlation
    kept = rewritten("SELECT 1 FROM o WHERE o.k IN (SELECT l.k FROM l WHERE l.q > 0 GROUP BY l.k)")
    assert "WHERE l.q > 0 AND l.k = o.k GROUP BY l.k" in kept


def test_other_in_subqueries_are_left_as_they_are():
    for sql in (
        "SELECT 1 FROM o WHERE NOT o.k IN (SELECT l.k FROM l GROUP BY l.k)",  # NOT IN: NULLs differ
        "SELECT 1 FROM o WHERE o.k IN (SELECT l.k FROM l GROUP BY l.k) OR o.x = 1",  # not a conjunct
        "SELECT 1 FROM o WHERE o.k IN (SELECT l.k FROM l GROUP BY l.k, l.j)",  # not grouped by the key alone
        "SELECT 1 FROM o WHERE o.k IN (SELECT max(l.k) FROM l GROUP BY l.j)",  # not the group key
        "SELECT 1 FROM o WHERE o.k IN (SELECT l.k FROM l)",  # not grouped: PostgreSQL's semi-join is right
        "SELECT 1 FROM l WHERE l.k IN (SELECT l.k FROM l GROUP BY l.k)",  # l would bind inside
        "SELECT 1 FROM o WHERE k IN (SELECT l.k FROM l GROUP BY l.k)",  # unqualified: could bind inside
    ):
        assert rewritten(sql) == sqlglot.parse_one(sql, read="postgres").sql("postgres"), sql
