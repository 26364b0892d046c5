"""GROUPING SETS, ROLLUP and CUBE as one aggregate per grouping set (PostgreSQL's rules)."""

from __future__ import annotations

import sqlglot

from mvlog.sql.analyze.analysis import ViewClass, analyze
from mvlog.sql.rewrite.groupingsets import as_union, grouping_sets


def sets(query: str) -> list[list[str]]:
    return [[e.sql() for e in s] for s in grouping_sets(sqlglot.parse_one(query, read="postgres"))]


def test_the_sets_of_rollup_cube_and_their_cross_product_in_postgres_order():
    assert sets("SELECT 1 FROM t GROUP BY ROLLUP (a, (b, c))") == [["a", "b", "c"], ["a"], []]
    assert sets("SELECT 1 FROM t GROUP BY CUBE (a, b)") == [["a", "b"], ["a"], ["b"], []]
    assert sets("SELECT 1 FROM t GROUP BY x, GROUPING SETS ((a, b), a, ()), ROLLUP (x)") == [
        ["x", "a", "b"], ["x", "a", "b"], ["x", "a"], ["x", "a"], ["x"], ["x"]]
    assert sets("SELECT 1 FROM t GROUP BY GROUPING SETS (ROLLUP (a), b)") == [["a"], [], ["b"]]


def test_left_out_expressions_are_null_outside_aggregates_and_grouping_is_the_mask():
    union = as_union(sqlglot.parse_one(
        "SELECT a, upper(b) AS ub, sum(a) AS s, grouping(a, b) AS g FROM t GROUP BY ROLLUP (a, b) "
        "HAVING max(b) > 'x' OR b IS NULL ORDER BY 1", read="postgres"))
    assert union is not None
    branches = [s.sql() for s in union.find_all(sqlglot.exp.Select)]
    assert sorted(branches) == sorted([
        "SELECT a, UPPER(b) AS ub, SUM(a) AS s, 0 AS g FROM t GROUP BY a, b HAVING MAX(b) > 'x' OR b IS NULL",
        "SELECT a, UPPER(NULL) AS ub, SUM(a) AS s, 1 AS g FROM t GROUP BY a HAVING MAX(b) > 'x' OR NULL IS NULL",
        'SELECT NULL AS "a", UPPER(NULL) AS ub, SUM(a) AS s, 3 AS g FROM t HAVING MAX(b) > \'x\' OR NULL IS NULL'])


def test_what_a_union_would_change_stays_complete_only():
    for query in ["SELECT a, count(*) FROM t GROUP BY ROLLUP (a) LIMIT 3",
                  "SELECT DISTINCT a, count(*) FROM t GROUP BY CUBE (a)",
                  "SELECT a, count(*) FROM t GROUP BY ROLLUP (1)"]:
        assert as_union(sqlglot.parse_one(query, read="postgres")) is None
        analysis = analyze(query)
        assert analysis.view_class is ViewClass.OTHER or analysis.reasons, query
        assert any("GROUPING SETS" in r for r in analysis.reasons), (query, analysis.reasons)
