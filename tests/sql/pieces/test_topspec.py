"""Which queries are top-N views: their full view, their ORDER BY resolved to output columns, and
what an ORDER BY item that is no output adds to the full view (pure)."""

from __future__ import annotations

import pytest

from mvlog.sql.pieces import topspec


def test_a_top_n_query_splits_into_its_full_view_and_its_order():
    full, spec = topspec.split("SELECT a, sum(b) AS s FROM t GROUP BY a ORDER BY s DESC, 1 NULLS FIRST "
                            "LIMIT 10 OFFSET 5")
    assert full == "SELECT a, SUM(b) AS s FROM t GROUP BY a"
    assert (spec.limit, spec.offset) == (10, 5)
    assert topspec.order_of(spec, ["a", "s"]) == (("s", True, True), ("a", False, True))


def test_fetch_first_is_a_limit_and_an_order_defaults_to_postgres_nulls():
    full, spec = topspec.split('SELECT "A", b FROM t ORDER BY "A", b DESC FETCH FIRST 3 ROWS ONLY')
    assert (spec.limit, spec.offset) == (3, 0)
    assert topspec.order_of(spec, ["A", "b"]) == (("A", False, False), ("b", True, True))


def test_a_query_without_limit_is_not_top_n():
    assert topspec.split("SELECT a FROM t ORDER BY a") is None


@pytest.mark.parametrize(("query", "reason"), [
    ("SELECT a FROM t LIMIT 3", "without ORDER BY"),
    ("SELECT a FROM t ORDER BY a OFFSET 3", "OFFSET without LIMIT"),
    ("SELECT a FROM t ORDER BY a LIMIT 0", "LIMIT 0"),
    ("SELECT a FROM t ORDER BY a LIMIT (SELECT 1)", "whole numbers"),
    ("SELECT a FROM t ORDER BY a FETCH FIRST 3 ROWS WITH TIES", "WITH TIES"),
])
def test_what_cannot_be_a_top_n_view_says_why(query, reason):
    refusal = topspec.split(query)
    assert isinstance(refusal, str) and reason in refusal


@pytest.mark.parametrize(("query", "columns"), [("SELECT a, c FROM t ORDER BY 3 LIMIT 2", ["a", "c"]),
                                                ("SELECT * FROM t ORDER BY b LIMIT 2", ["a", "c"]),
                                                ("SELECT CAST(a AS INT), c FROM t ORDER BY b LIMIT 2", ["a", "c"])])
def test_a_top_n_view_orders_by_its_outputs_or_what_it_can_add_to_them(query, columns):
    # a position past the outputs; a name that is no output where the outputs are a * or an expression
    # PostgreSQL names (unknown to the split)
    _, spec = topspec.split(query)
    assert spec.hidden == () and "output columns" in topspec.order_of(spec, columns)


@pytest.mark.parametrize(("order", "added"), [("b", "b"), ("t.a", "t.a"), ("a + 1", "a + 1")])
def test_an_order_by_item_that_is_no_output_is_added_as_a_hidden_one(order, added):
    full, spec = topspec.split(f"SELECT a AS x, c FROM t ORDER BY {order}, a LIMIT 2")
    assert full == f'SELECT a AS x, c, {added} AS "_mvlog_order1" FROM t'
    assert topspec.order_of(spec, ["x", "c", *spec.hidden]) == (("_mvlog_order1", False, False), ("x", False, False))


def test_an_order_by_expression_over_the_rows_is_a_hidden_output_of_the_full_view():
    full, spec = topspec.split("SELECT a, c FROM t ORDER BY a + 1 DESC, c, CASE WHEN a = 0 THEN c END LIMIT 2")
    assert full == 'SELECT a, c, a + 1 AS "_mvlog_order1", CASE WHEN a = 0 THEN c END AS "_mvlog_order2" FROM t'
    assert spec.hidden == ("_mvlog_order1", "_mvlog_order2")
    assert topspec.order_of(spec, ["a", "c", *spec.hidden]) == (
        ("_mvlog_order1", True, True), ("c", False, False), ("_mvlog_order2", False, False))


@pytest.mark.parametrize("query", ["SELECT a FROM t UNION SELECT a FROM u ORDER BY a + 1 LIMIT 2",
                                   "SELECT DISTINCT a FROM t ORDER BY a + 1 LIMIT 2"])
def test_a_set_operation_or_distinct_adds_no_hidden_output(query):
    full, spec = topspec.split(query)
    assert spec.hidden == () and "_mvlog" not in full
