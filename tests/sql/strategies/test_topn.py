"""Top-N views' pure parts: the SQL that keeps their margin (which queries are top-N: test_topspec)."""

from __future__ import annotations

import sqlglot

from mvlog.sql.analyze.analysis import ViewClass
from mvlog.sql.pieces import topspec
from mvlog.sql.pieces.shape import ViewShape
from mvlog.sql.strategies import topn


def _top(offset: int = 0) -> ViewShape:
    full = ViewShape("v", ViewClass.SIMPLE, (), (), ("id",), (), "SELECT id, amount FROM t")
    _, spec = topspec.split(f"SELECT id, amount FROM t ORDER BY amount DESC LIMIT 3 OFFSET {offset}")
    return topn.keep_top(full, spec, topspec.order_of(spec, ["id", "amount"]), ["id", "amount"])


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
