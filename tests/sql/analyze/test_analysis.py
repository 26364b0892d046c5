"""Query analysis: classes, base tables, reasons (pure, no database)."""

from __future__ import annotations

import pytest

from mvlog.errors import ConfigError
from mvlog.sql.analyze.analysis import ViewClass, analyze


@pytest.mark.parametrize(
    ("query", "view_class"),
    [
        ("SELECT * FROM t", ViewClass.SIMPLE),
        ("SELECT a, b * 2 AS c FROM s.t WHERE a > 1 AND b IS NOT NULL", ViewClass.SIMPLE),
        ("SELECT upper(x) FROM t ORDER BY x", ViewClass.SIMPLE),
        ("SELECT t.a FROM t JOIN u ON u.id = t.uid", ViewClass.JOIN),
        ("SELECT g, count(*) FROM t GROUP BY g", ViewClass.AGGREGATE),
        ("SELECT sum(x) FROM t", ViewClass.AGGREGATE),
        ("SELECT * FROM t CROSS JOIN u", ViewClass.JOIN),
        ("SELECT t.a FROM t, u WHERE u.id = t.uid", ViewClass.JOIN),
        ("SELECT t.a FROM t JOIN u USING (id)", ViewClass.JOIN),
        ("SELECT u.g, max(t.x) FROM t JOIN u ON u.id = t.uid GROUP BY u.g HAVING count(*) > 1", ViewClass.AGGREGATE),
        ("SELECT * FROM t LEFT JOIN u ON u.id = t.id", ViewClass.JOIN),
        ("SELECT * FROM t RIGHT OUTER JOIN u ON u.id = t.id LEFT JOIN w USING (id)", ViewClass.JOIN),
        ("SELECT * FROM t NATURAL LEFT JOIN u", ViewClass.JOIN),
        ("SELECT u.g, count(t.id) FROM u LEFT JOIN t ON t.uid = u.id GROUP BY u.g", ViewClass.AGGREGATE),
        ("SELECT DISTINCT a FROM t", ViewClass.AGGREGATE),
        ("SELECT a FROM t UNION SELECT u.b FROM u LEFT JOIN w ON w.id = u.wid UNION SELECT c FROM w",
         ViewClass.UNION),
        ("SELECT * FROM t FULL OUTER JOIN u ON u.id = t.id LEFT JOIN w ON w.id = u.wid", ViewClass.JOIN),
        ("SELECT * FROM t JOIN w ON w.id = t.id FULL OUTER JOIN u ON u.id = t.id", ViewClass.JOIN),
        ("SELECT * FROM t JOIN u ON u.id = t.id RIGHT JOIN w ON w.id = u.id JOIN x ON x.id = w.id", ViewClass.JOIN),
        # after LEFT joins: ON compares a column of every NULL-extendable table, or reads tables before it only
        ("SELECT * FROM t LEFT JOIN w ON w.id = t.id FULL OUTER JOIN u ON u.id = t.id", ViewClass.JOIN),
        ("SELECT * FROM t LEFT JOIN w ON w.id = t.wid RIGHT JOIN u ON u.id = w.uid AND u.k IS NOT NULL",
         ViewClass.JOIN),
        ("SELECT * FROM t JOIN v ON v.id = t.id LEFT JOIN w ON w.id = t.wid LEFT JOIN x ON x.id = t.xid "
         "RIGHT JOIN u ON u.id = (w.uid + 1) AND u.x = x.id", ViewClass.JOIN),
        ("SELECT DISTINCT t.a, u.b FROM t JOIN u ON u.id = t.uid", ViewClass.AGGREGATE),
    ],
)
def test_classes(query, view_class):
    assert analyze(query).view_class is view_class


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("SELECT * FROM t LIMIT 10", "LIMIT"),
        ("SELECT * FROM t LEFT JOIN w ON w.id = t.id FULL JOIN u ON u.id = coalesce(w.uid, t.id)",
         "reads w or a table joined after it yet can hold where w is NULL-extended"),
        ("SELECT * FROM t LEFT JOIN w ON w.id = t.id LEFT JOIN x ON x.id = w.xid RIGHT JOIN u ON u.id = w.uid "
         "AND (u.k = x.k OR u.k IS NULL)", "where x is NULL-extended"),
        ("SELECT * FROM t LEFT JOIN w ON w.id = t.id JOIN x ON x.id = t.xid RIGHT JOIN u ON u.id = t.uid",
         "RIGHT JOIN after an inner join that follows a LEFT JOIN"),
        ("SELECT * FROM t LEFT JOIN w ON w.id = t.id RIGHT JOIN u ON u.id = uid", "columns are qualified"),
        ("SELECT * FROM t FULL JOIN w ON w.id = t.id RIGHT JOIN u ON u.id = t.id", "RIGHT JOIN after a FULL JOIN"),
        ("SELECT * FROM t, w FULL JOIN u ON u.id = w.id", "FULL JOIN after a comma or CROSS join"),
        ("SELECT t.g, count(*) FROM t FULL JOIN u ON u.id = t.id GROUP BY t.g", "over a FULL JOIN"),
        ("SELECT * FROM t FULL JOIN u USING (id)", "FULL JOIN with USING or NATURAL"),
        ("SELECT * FROM t RIGHT JOIN u ON u.id = t.id RIGHT JOIN w ON w.id = u.id", "RIGHT JOIN after a RIGHT JOIN"),
        ("SELECT * FROM t JOIN u ON u.id = t.id RIGHT JOIN w USING (id)", "RIGHT JOIN after the first join with USING"),
        ("SELECT * FROM t LEFT JOIN u ON u.id = t.id, w", "comma or CROSS join after an outer join"),
        ("SELECT DISTINCT ON (a) a, b FROM t", "DISTINCT ON"),
        ("SELECT DISTINCT * FROM t", "DISTINCT *"),
        ("SELECT DISTINCT a, count(*) FROM t GROUP BY a", "DISTINCT over GROUP BY"),
        ("SELECT a, row_number() OVER (ORDER BY a) FROM t", "window functions"),
        ("SELECT a, now() FROM t", "non-deterministic"),
        ("SELECT a FROM t WHERE b > random()", "non-deterministic"),
        ("SELECT a FROM t WHERE d > current_date", "non-deterministic"),
        ("SELECT a FROM t INTERSECT SELECT a FROM u", "set operations (INTERSECT)"),
        ("(SELECT a FROM t UNION SELECT a FROM u) UNION ALL SELECT a FROM w", "a UNION (distinct) inside a UNION ALL"),
        ("SELECT a, count(*) FROM t GROUP BY a UNION SELECT a, 1 FROM u", "a UNION of aggregates"),
        ("SELECT a FROM t WHERE a IN (SELECT a FROM u)", "subqueries"),
        ("SELECT * FROM (SELECT a FROM t) x", "a derived table or CTE that does not merge"),
        ("WITH x AS (SELECT a FROM t) SELECT a FROM x", "WITH"),
        ("SELECT * FROM generate_series(1, 3)", "functions and VALUES in FROM"),
        ("SELECT a, b, sum(c) FROM t GROUP BY GROUPING SETS ((a), (a, b), ()) LIMIT 5",
         "GROUPING SETS, CUBE and ROLLUP with LIMIT"),
        ("SELECT a, b, sum(c) FROM t GROUP BY ROLLUP (1, 2)", "GROUPING SETS, CUBE and ROLLUP with"),
        ("SELECT a, b, sum(c), rank() OVER (ORDER BY a) FROM t GROUP BY CUBE (a, b)", "GROUPING SETS, CUBE and ROLLUP"),
    ],
)
def test_other_shapes_say_why(query, reason):
    analysis = analyze(query)
    assert analysis.view_class is ViewClass.OTHER
    assert not analysis.fast_possible
    assert any(reason in why for why in analysis.reasons), analysis.reasons
    assert any(reason in r for r in analysis.reasons), analysis.reasons


def test_tables_and_identifier_case():
    analysis = analyze('SELECT * FROM Sales.Orders AS O JOIN "Sales"."Line Items" li ON li.oid = O.id')
    assert [(t.schema, t.name, t.alias) for t in analysis.tables] == [
        ("sales", "orders", "o"), ("Sales", "Line Items", "li"),
    ]


@pytest.mark.parametrize("query", ["", "SELEC 1", "SELECT 1; SELECT 2", "DELETE FROM t", "SELECT (1"])
def test_unparsable_or_not_a_query(query):
    with pytest.raises(ConfigError):
        analyze(query)


def test_untyped_literals_of_a_union_take_the_column_types():
    """A fast refresh reads each branch on its own, where a bare NULL or quoted literal would be text."""
    analysis = analyze("SELECT id, amount, day FROM a UNION ALL SELECT id, NULL, '2024-01-01' FROM b "
                       "UNION ALL SELECT NULL, amount, day FROM c", None, ["id", "amount", "day"],
                       ["integer", "numeric(10,2)", "date"])
    assert analysis.reasons == []
    first, second, third = (b.query for b in analysis.branches)
    assert first == "SELECT id, amount, day FROM a"
    assert second == ("SELECT id, CAST(NULL AS DECIMAL(10, 2)) AS \"amount\", "
                      "CAST('2024-01-01' AS DATE) AS \"day\" FROM b")
    assert third == 'SELECT CAST(NULL AS INT) AS "id", amount, day FROM c'
    # without the types (no database at hand) the branches stay as written
    assert analyze("SELECT id FROM a UNION ALL SELECT NULL FROM b").branches[1].query == "SELECT NULL FROM b"


def test_a_parenthesized_query_is_the_query_inside_and_clauses_outside_make_it_complete_only():
    assert analyze("(SELECT id, amount FROM orders)").view_class is ViewClass.SIMPLE
    assert analyze("((SELECT id FROM orders WHERE amount > 1))").view_class is ViewClass.SIMPLE
    limited = analyze("(SELECT id FROM orders) LIMIT 1")
    assert limited.view_class is ViewClass.OTHER and "parenthesized" in limited.reasons[0]
