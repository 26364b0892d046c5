"""View shapes: view keys, hidden columns, range keys (pure, no database)."""

from __future__ import annotations

from facts import CUSTOMERS, LOG, shape

from mvlog.sql.analyze.analysis import analyze
from mvlog.sql.parse.sqltree import projected_columns
from mvlog.sql.pieces.choice import shape_view


def test_simple_view_key_is_the_projected_primary_key():
    s = shape("SELECT id AS order_id, amount FROM orders WHERE amount > 0")
    assert s.key_columns == ("order_id",) and s.hidden_columns == ()


def test_simple_view_without_its_key_gets_a_hidden_key_column():
    s = shape("SELECT amount FROM orders")
    assert s.key_columns == ("_mvlog_id",) and s.hidden_columns == ("_mvlog_id",)
    assert '"orders"."id" AS "_mvlog_id"' in s.select_sql


def test_range_key_is_the_first_key_column_and_the_base_column_it_equals():
    simple = shape("SELECT id AS order_id, amount FROM orders")
    assert (simple.range_key.column, simple.range_key.log, simple.range_key.base_column) == ("order_id", LOG, "id")
    join = shape_view("v", analyze("SELECT c.name, o.amount FROM customers c JOIN orders o ON o.customer_id = c.id"),
                      {"c": CUSTOMERS, "o": LOG})
    assert (join.range_key.column, join.range_key.log, join.range_key.base_column) == ("_mvlog_c_id", CUSTOMERS, "id")
    grouped = shape_view("v", analyze("SELECT o.customer_id, count(*) AS n FROM orders o GROUP BY o.customer_id"),
                         {"o": LOG})
    assert (grouped.range_key.column, grouped.range_key.base_column, grouped.range_key.grouped) == (
        "customer_id", "customer_id", True)
    assert shape("SELECT count(*) AS n FROM orders").range_key is None  # one row: nothing to split
    assert shape("SELECT amount + 1 AS a, count(*) AS n FROM orders GROUP BY amount + 1").range_key is None


def outer(query: str):
    return shape_view("v", analyze(query), {"c": CUSTOMERS, "o": LOG})


def test_an_outer_join_is_keyed_from_its_root():
    left = outer("SELECT o.id, c.name FROM orders o LEFT JOIN customers c ON c.id = o.customer_id")
    assert left.outer and [t.alias for t in left.tables] == ["o", "c"]
    assert left.key_columns == ("id", "_mvlog_c_id")
    right = outer("SELECT o.id, c.name FROM orders o RIGHT JOIN customers c ON c.id = o.customer_id")
    assert right.outer and [t.alias for t in right.tables] == ["c", "o"]  # the RIGHT JOIN's table is the root
    assert right.key_columns[0] == "_mvlog_c_id" and right.range_key.log == CUSTOMERS
    inner = outer("SELECT o.id, c.name FROM orders o JOIN customers c ON c.id = o.customer_id")
    assert not inner.outer


def test_the_lineage_of_an_outer_join_keeps_its_partial_rows():
    s = outer("SELECT o.id, c.name FROM orders o RIGHT JOIN customers c ON c.id = o.customer_id "
              "WHERE c.segment = 'retail' AND o.status = 'open' AND (c.id > 1 OR o.id > 1)")
    # From the root, LEFT; only conditions on the root itself (a NULL-extended row that the WHERE
    # drops may appear when its partner goes).
    assert s.core_sql == ("SELECT 1 FROM customers AS c LEFT JOIN orders AS o ON c.id = o.customer_id "
                          "WHERE c.segment = 'retail'")
    chain = shape_view("v", analyze("SELECT o.id FROM orders o LEFT JOIN customers c ON c.id = o.customer_id "
                                    "JOIN customers d ON d.id = c.id"), {"c": CUSTOMERS, "o": LOG, "d": CUSTOMERS})
    assert "LEFT JOIN customers AS d" in chain.core_sql  # an inner join after an outer one keeps its partial rows


def test_a_right_join_after_inner_joins_is_rooted_at_its_table_with_the_inner_joins_nested():
    s = shape_view("v", analyze("SELECT c.name, o.id FROM customers c JOIN customers d ON d.id = c.id "
                                "RIGHT JOIN orders o ON o.customer_id = c.id LEFT JOIN customers e ON e.id = o.id "
                                "WHERE o.amount > 0 AND d.segment = 'x'"),
                   {"c": CUSTOMERS, "d": CUSTOMERS, "o": LOG, "e": CUSTOMERS})
    assert s.outer and [t.alias for t in s.tables] == ["o", "c", "d", "e"]
    assert s.key_columns[0] == "id" and s.range_key.log == LOG
    assert s.core_sql == ("SELECT 1 FROM orders AS o LEFT JOIN (customers AS c JOIN customers AS d ON d.id = c.id) "
                          "ON o.customer_id = c.id LEFT JOIN customers AS e ON e.id = o.id WHERE o.amount > 0")


def test_a_full_join_after_inner_joins_is_two_outer_join_views():
    s = shape_view("v", analyze("SELECT c.name, o.id FROM customers c JOIN customers d ON d.id = c.id "
                                "FULL JOIN orders o ON o.customer_id = c.id"),
                   {"c": CUSTOMERS, "d": CUSTOMERS, "o": LOG})
    assert s.full_join and [b.tables[0].alias for b in s.branches] == ["c", "o"]
    assert "RIGHT JOIN orders AS o" in s.branch_selects[1] and '"c"."id" IS NULL' in s.branch_selects[1]
    assert "LEFT JOIN (customers AS c JOIN customers AS d" in s.branches[1].core_sql


def test_distinct_is_grouped_by_its_outputs():
    s = shape("SELECT DISTINCT status, amount * 2 AS double, status FROM orders")
    assert s.view_class == "aggregate" and s.key_columns == ("status", "double")


def test_union_all_is_keyed_by_branch_and_row_text():
    s = shape_view("v", analyze("SELECT id, amount FROM orders UNION ALL "
                                "SELECT c.id, count(*) FROM customers c GROUP BY c.id"),
                   {"orders": LOG, "customers": CUSTOMERS})
    assert s.view_class == "union" and s.key_columns == ("_mvlog_branch", "_mvlog_row_key")
    assert [b.view_class for b in s.branches] == ["simple", "aggregate"]
    assert s.branches[1].keymap.endswith("_b2")  # each keyed branch has a key map of its own
    assert 'CAST(ROW(c.id) AS TEXT) AS "_mvlog_row_key"' in s.select_sql
    other = shape_view("v", analyze("SELECT id FROM orders UNION ALL SELECT id FROM orders LIMIT 1"), {"orders": LOG})
    assert other.view_class == "other" and "LIMIT" in other.fast_reasons[0]


def test_projected_columns():
    select = analyze('SELECT o.id AS order_id, "K2", amount FROM orders o').tree
    assert projected_columns(select, "o", ["id", "K2", "other"]) == {"id": "order_id", "K2": "K2"}
    assert projected_columns(analyze("SELECT * FROM orders").tree, "orders", ["id"]) == {"id": "id"}
    assert projected_columns(analyze("SELECT id + 0 AS id FROM orders").tree, "orders", ["id"]) == {}
    assert projected_columns(analyze("SELECT ID FROM orders").tree, "orders", ["id"]) == {"id": "id"}
