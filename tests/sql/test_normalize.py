"""Normalization as a list of rules in one declared order (pure, no database)."""

from __future__ import annotations

import pytest
from test_rewrite import CATALOG

from mvlog.sql import normalize
from mvlog.sql.analysis import parse_query
from mvlog.sql.rewrite import NotMergeable
from mvlog.sql.sqltree import DIALECT


def test_the_rules_run_in_their_declared_order():
    names = [rule.__name__ for rule, _ in normalize.RULES]
    assert names == ["qualify", "inline_ctes", "merge_derived_tables", "name_outputs", "pull_up_aggregates",
                     "grouping_sets_as_union", "type_untyped_literals"]
    # qualifying comes first: every other rule matches qualified columns
    assert [needs for _, needs in normalize.RULES][:5] == [True] * 5


def test_a_cte_is_inlined_and_merged_once_the_query_is_qualified():
    tree = parse_query("WITH s AS (SELECT id, amount FROM orders WHERE amount > 0) SELECT id FROM s")
    result, not_null = normalize.normalize(tree, normalize.Context(CATALOG, ["id"]))
    sql = result.sql(dialect=DIALECT)
    assert "WITH" not in sql and '"public"."orders"' in sql and '"orders"."amount" > 0' in sql
    assert ("customers", "nation_id") not in (not_null or set())  # only the tables it reads
    assert ("orders", "id") in (not_null or set())


def test_without_the_catalog_only_the_rules_that_need_none_run():
    tree = parse_query("SELECT status, count(*) AS n FROM orders GROUP BY ROLLUP (status)")
    result, not_null = normalize.normalize(tree, normalize.Context())
    assert not_null is None  # not qualified
    assert result.key == "union"  # grouping sets as one aggregate per set


def test_a_rule_that_cannot_rewrite_raises_the_reason():
    tree = parse_query("WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r) SELECT n FROM r")
    with pytest.raises(NotMergeable, match="recursive CTEs"):
        normalize.normalize(tree, normalize.Context(CATALOG))


def test_untyped_literals_of_a_set_operation_take_the_output_types():
    tree = parse_query("SELECT id, NULL AS note FROM orders UNION ALL SELECT id, 'x' FROM customers")
    result = normalize.type_untyped_literals(tree, normalize.Context(output_names=["id", "note"],
                                                                     output_types=["integer", "text"]))
    assert result.sql(dialect=DIALECT).count("CAST(") == 2


def test_set_operation_branches():
    tree = parse_query("SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3")
    assert len(normalize.set_operation_branches(tree) or []) == 3
    assert normalize.set_operation_branches(parse_query("SELECT 1 UNION SELECT 2")) is None
    assert len(normalize.set_operation_branches(parse_query("SELECT 1 UNION SELECT 2"), distinct=True) or []) == 2
    assert normalize.set_operation_branches(parse_query("SELECT 1 EXCEPT SELECT 2"), distinct=True) is None
