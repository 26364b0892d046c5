"""The lineage's root of an aggregate with subqueries (pure): the FROM item its subqueries are
correlated with, when the FROM items are inner-joined (TPC-H Q18, Q21)."""

from __future__ import annotations

from facts import CATALOG, CUSTOMERS, LOG

from mvlog.sql.analyze.analysis import analyze
from mvlog.sql.pieces.choice import shape_view

Q18 = ("SELECT c.name, o.id, count(*) AS n FROM customers c JOIN orders o ON o.customer_id = c.id "
       "WHERE o.id IN (SELECT o2.id FROM orders o2 GROUP BY o2.id HAVING sum(o2.amount) > 3) GROUP BY c.name, o.id")


def _shape(query: str, names: list[str]):
    return shape_view("v", analyze(query, CATALOG, names), {"c": CUSTOMERS, "o": LOG, "o2": LOG})


def test_the_table_the_subquery_is_correlated_with_is_the_root():
    s = _shape(Q18, ["name", "id", "n"])
    assert [t.alias for t in s.tables] == ["o", "c", "o2"]
    assert s.select_sql.split(" WHERE ")[0].endswith('FROM "public"."orders" AS "o", "public"."customers" AS "c"')
    assert '"o"."customer_id" = "c"."id"' in s.select_sql.split(" WHERE ")[1]  # the ON, now in WHERE
    lineage, tied = s.keymap_cores  # the subquery is tied to the root by o2.id = o.id alone: its rows apart
    assert lineage.startswith('SELECT 1 FROM "public"."orders" AS "o"')
    assert tied == 'SELECT 1 FROM "public"."orders" AS "o2"' and s.keymap_ties[1].outer == ('"o"."id"',)


def test_the_first_table_stays_the_root_otherwise():
    outer = _shape(Q18.replace("customers c JOIN", "customers c LEFT JOIN"), ["name", "id", "n"])
    both = _shape("SELECT c.name, count(*) AS n FROM customers c JOIN orders o ON o.customer_id = c.id WHERE "
                  "EXISTS (SELECT 1 FROM orders o2 WHERE o2.customer_id = c.id AND o2.amount > o.amount) "
                  "GROUP BY c.name", ["name", "n"])
    joined = _shape("SELECT c.name, o.id FROM customers c JOIN orders o ON o.customer_id = c.id WHERE o.id IN "
                    "(SELECT o2.id FROM orders o2 WHERE o2.amount > 3)", ["name", "id"])  # a join: keyed by both
    for s, first in ((outer, "c"), (both, "c"), (joined, "c")):
        assert s.tables[0].alias == first
