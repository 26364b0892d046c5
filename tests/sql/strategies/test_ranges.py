"""Range parameters' pure parts: which subqueries are one, and the log a refresh reads for them."""

from __future__ import annotations

import pytest
import sqlglot

from mvlog.model import LogInfo
from mvlog.sql.analyze.analysis import ViewClass
from mvlog.sql.analyze.subqueries import subquery_lineage
from mvlog.sql.parse.sqltree import table_refs
from mvlog.sql.pieces.shape import Ranged, ViewShape
from mvlog.sql.strategies import ranges


def _lineage(query: str):
    select = sqlglot.parse_one(query, dialect="postgres")
    return subquery_lineage(select, table_refs(select), set())


def test_a_subquery_compared_with_one_table_s_rows_is_a_range_parameter():
    semi, reasons, parameters, found = _lineage(
        "SELECT o.id FROM orders o WHERE o.amount * 2 >= (SELECT avg(o2.amount) FROM orders o2 WHERE o2.status = 'x')")
    assert (semi, reasons, parameters) == ([], [], [])
    (ranged,) = found
    assert (ranged.alias, ranged.value) == ("o", "o.amount * 2")
    assert [t.alias for t in ranged.tables] == ["o2"]


@pytest.mark.parametrize("query", [
    "SELECT o.id, o.amount * (SELECT max(n.region) FROM nation n) AS x FROM orders o",  # not compared
    "SELECT o.id FROM orders o, customers c WHERE o.amount + c.id > (SELECT avg(n.id) FROM nation n)",  # two rows
    "SELECT o.id FROM orders o WHERE 5 > (SELECT avg(n.id) FROM nation n)",  # no row at all
])
def test_other_uncorrelated_subqueries_are_refused(query):
    _, reasons, _, found = _lineage(query)
    assert found == [] and any("uncorrelated" in r for r in reasons)


LOG = LogInfo("public", "orders", "orders_log", ("id",), ("integer",), 1)


def _shape() -> ViewShape:
    return ViewShape("v", ViewClass.SIMPLE, (), (LOG,), ("id",), (), "SELECT o.id FROM orders o",
                     ranges=(Ranged(LOG, "o", "o.amount", "SELECT avg(o2.amount) FROM orders o2"),))


def test_a_refresh_reads_the_compared_table_s_log_with_the_rows_between_the_values():
    resolved = ranges.resolve(_shape(), 'SELECT DISTINCT "id" FROM "mvlog"."orders_log" WHERE "snaptime$$" > NOW()')
    tree = sqlglot.parse_one(resolved, dialect="postgres")
    union = tree.find(sqlglot.exp.Union)
    assert union is not None  # the log, then the moved rows
    moved = union.expression
    assert moved.find(sqlglot.exp.Between) is not None
    # the table's rows beside the value then (mvlog's table) and now (the subquery), each read once
    assert sorted(t.name for t in moved.find_all(sqlglot.exp.Table)) == ["orders", "orders", "param$_v_" + _digest("v")]


def _digest(view: str) -> str:
    import hashlib

    return hashlib.sha256(view.encode()).hexdigest()[:8]
