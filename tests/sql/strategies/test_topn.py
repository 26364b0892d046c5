"""Top-N views' pure parts: which queries are top-N and the SQL that keeps their margin."""

from __future__ import annotations

import pytest
import sqlglot

from mvlog.sql.analyze.analysis import ViewClass
from mvlog.sql.pieces.shape import ViewShape
from mvlog.sql.strategies import topn


def test_a_top_n_query_splits_into_its_full_view_and_its_order():
    full, spec = topn.split("SELECT a, sum(b) AS s FROM t GROUP BY a ORDER BY s DESC, 1 NULLS FIRST "
                            "LIMIT 10 OFFSET 5")
    assert full == "SELECT a, SUM(b) AS s FROM t GROUP BY a"
    assert (spec.limit, spec.offset) == (10, 5)
    assert topn.order_of(spec, ["a", "s"]) == (("s", True, True), ("a", False, True))


def test_fetch_first_is_a_limit_and_an_order_defaults_to_postgres_nulls():
    full, spec = topn.split('SELECT "A", b FROM t ORDER BY "A", b DESC FETCH FIRST 3 ROWS ONLY')
    assert (spec.limit, spec.offset) == (3, 0)
    assert topn.order_of(spec, ["A", "b"]) == (("A", False, False), ("b", True, True))


def test_a_query_without_limit_is_not_top_n():
    assert topn.split("SELECT a FROM t ORDER BY a") is None


@pytest.mark.parametrize(("query", "reason"), [
    ("SELECT a FROM t LIMIT 3", "without ORDER BY"),
    ("SELECT a FROM t ORDER BY a OFFSET 3", "OFFSET without LIMIT"),
    ("SELECT a FROM t ORDER BY a LIMIT 0", "LIMIT 0"),
    ("SELECT a FROM t ORDER BY a LIMIT (SELECT 1)", "whole numbers"),
    ("SELECT a FROM t ORDER BY a FETCH FIRST 3 ROWS WITH TIES", "WITH TIES"),
])
def test_what_cannot_be_a_top_n_view_says_why(query, reason):
    refusal = topn.split(query)
    assert isinstance(refusal, str) and reason in refusal


@pytest.mark.parametrize(("query", "columns"), [("SELECT a, c FROM t ORDER BY 3 LIMIT 2", ["a", "c"]),
                                                ("SELECT * FROM t ORDER BY b LIMIT 2", ["a", "c"]),
                                                ("SELECT CAST(a AS INT), c FROM t ORDER BY b LIMIT 2", ["a", "c"])])
def test_a_top_n_view_orders_by_its_outputs_or_what_it_can_add_to_them(query, columns):
    # a position past the outputs; a name that is no output where the outputs are a * or an expression
    # PostgreSQL names (unknown to the split)
    _, spec = topn.split(query)
    assert spec.hidden == () and "output columns" in topn.order_of(spec, columns)


@pytest.mark.parametrize(("order", "added"), [("b", "b"), ("t.a", "t.a"), ("a + 1", "a + 1")])
def test_an_order_by_item_that_is_no_output_is_added_as_a_hidden_one(order, added):
    full, spec = topn.split(f"SELECT a AS x, c FROM t ORDER BY {order}, a LIMIT 2")
    assert full == f'SELECT a AS x, c, {added} AS "_mvlog_order1" FROM t'
    assert topn.order_of(spec, ["x", "c", *spec.hidden]) == (("_mvlog_order1", False, False), ("x", False, False))


def test_an_order_by_expression_over_the_rows_is_a_hidden_output_of_the_full_view():
    full, spec = topn.split("SELECT a, c FROM t ORDER BY a + 1 DESC, c, CASE WHEN a = 0 THEN c END LIMIT 2")
    assert full == 'SELECT a, c, a + 1 AS "_mvlog_order1", CASE WHEN a = 0 THEN c END AS "_mvlog_order2" FROM t'
    assert spec.hidden == ("_mvlog_order1", "_mvlog_order2")
    assert topn.order_of(spec, ["a", "c", *spec.hidden]) == (
        ("_mvlog_order1", True, True), ("c", False, False), ("_mvlog_order2", False, False))


@pytest.mark.parametrize("query", ["SELECT a FROM t UNION SELECT a FROM u ORDER BY a + 1 LIMIT 2",
                                   "SELECT DISTINCT a FROM t ORDER BY a + 1 LIMIT 2"])
def test_a_set_operation_or_distinct_adds_no_hidden_output(query):
    full, spec = topn.split(query)
    assert spec.hidden == () and "_mvlog" not in full


def _top(offset: int = 0) -> ViewShape:
    full = ViewShape("v", ViewClass.SIMPLE, (), (), ("id",), (), "SELECT id, amount FROM t")
    _, spec = topn.split(f"SELECT id, amount FROM t ORDER BY amount DESC LIMIT 3 OFFSET {offset}")
    return topn.keep_top(full, spec, topn.order_of(spec, ["id", "amount"]), ["id", "amount"])


def test_the_complete_read_breaks_ties_by_the_view_key():
    shape = _top(offset=2)
    assert shape.top is not None and shape.top.capacity == 8  # offset 2 + limit 3 + a margin of 3
    # PostgreSQL's defaults: DESC puts NULLs first, ASC last
    assert shape.select_sql.endswith('ORDER BY "amount" DESC, "id" LIMIT 3 OFFSET 2'), shape.select_sql
    assert topn.full_shape(shape).select_sql == "SELECT id, amount FROM t"


def test_the_fast_read_and_the_margin_s_update_are_one_statement_each():
    shape = _top()
    changed = 'SELECT 1 AS "_mvlog_key_0", 1 AS id, 2 AS amount, TRUE AS "_mvlog_present"'
    read = sqlglot.parse_one(topn.read_sql(shape.top, shape.key_columns, changed), dialect="postgres")
    update = sqlglot.parse_one(topn.update_sql(shape.top, shape.key_columns, changed), dialect="postgres")
    assert isinstance(read, sqlglot.exp.Select)
    assert isinstance(update, sqlglot.exp.Insert)
    # the update empties the margin in a CTE: every CTE sees the margin as it was
    assert any(isinstance(cte.this, sqlglot.exp.Delete) for cte in update.args["with_"].expressions)
    assert "row_number" in read.sql(dialect="postgres").lower()
