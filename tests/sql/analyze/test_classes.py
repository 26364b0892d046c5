"""Parsing a view query and listing the tables it reads (pure)."""

from __future__ import annotations

import pytest

from mvlog.errors import ConfigError
from mvlog.sql.analyze.classes import Analysis, ViewClass, parse_query, tables_read


def test_every_table_read_at_any_depth_once_and_no_cte_name():
    tree = parse_query("WITH s AS (SELECT * FROM orders) SELECT * FROM s JOIN app.customers c ON true "
                       "WHERE EXISTS (SELECT 1 FROM orders o2 WHERE o2.id = c.id)")
    assert sorted((t.schema or "", t.name) for t in tables_read(tree)) == [("", "orders"), ("app", "customers")]


@pytest.mark.parametrize("query, message", [("DELETE FROM t", "must be a SELECT"),
                                            ("SELECT 1; SELECT 2", "exactly one"),
                                            ("SELEC 1", "cannot be parsed")])
def test_what_is_not_one_query_is_refused(query, message):
    with pytest.raises(ConfigError, match=message):
        parse_query(query)


def test_an_analysis_reads_its_parameters_and_ranges_tables_too():
    analysis = Analysis("q", parse_query("SELECT 1"), ViewClass.OTHER, [], ["why"])
    assert not analysis.fast_possible and analysis.read_tables == []
