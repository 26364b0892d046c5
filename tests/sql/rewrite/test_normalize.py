"""Normalization as a list of rules in one declared order (pure, no database)."""

from __future__ import annotations

import pytest
from test_rewrite import CATALOG

from mvlog.sql.analyze.analysis import parse_query
from mvlog.sql.parse.sqltree import DIALECT
from mvlog.sql.rewrite import normalize
from mvlog.sql.rewrite.rewrite import NotMergeable


def test_the_rules_run_in_their_declared_order():
    names = [rule.__name__ for rule, _ in normalize.RULES]
    assert names == ["qualify", "comma_joins_as_inner_joins", "inline_ctes", "flatten_in_subqueries",
                     "distribute_joins_over_unions", "merge_derived_tables", "name_outputs", "pull_up_aggregates",
                     "grouping_sets_as_union", "type_untyped_literals"]
    # qualifying comes first: every other rule matches qualified columns
    assert [needs for _, needs in normalize.RULES][:8] == [True] * 8


def test_comma_joins_after_an_outer_join_become_inner_joins_on_their_conditions():
    tree = parse_query("SELECT o.id, c.name FROM orders o LEFT JOIN customers c ON c.id = o.customer_id, customers n "
                       "WHERE n.id = c.nation_id AND o.amount > 1")
    result, _ = normalize.normalize(tree, normalize.Context(CATALOG, ["id", "name"]))
    sql = result.sql(dialect=DIALECT)
    assert 'JOIN "public"."customers" AS "n" ON "n"."id" = "c"."nation_id"' in sql, sql
    assert sql.endswith('WHERE "o"."amount" > 1'), sql


def test_a_union_all_joined_to_a_table_is_a_union_all_of_the_joins():
    tree = parse_query("SELECT c.name, sum(u.amount) AS total FROM customers c, (SELECT customer_id, amount FROM "
                       "orders UNION ALL SELECT customer_id, amount FROM orders WHERE amount > 5) u "
                       "WHERE u.customer_id = c.id GROUP BY c.name")
    result, _ = normalize.normalize(tree, normalize.Context(CATALOG, ["name", "total"]))
    sql = result.sql(dialect=DIALECT)
    assert sql.startswith('SELECT "mvlog_union"."mvlog_c1" AS "name", SUM("mvlog_union"."mvlog_c2") AS "total" '
                          'FROM ('), sql
    assert sql.count('"public"."customers"') == 2 and " UNION ALL " in sql, sql


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


def test_an_in_inside_an_in_subquery_is_a_join_inside_it():
    tree = parse_query("SELECT o.id FROM orders o WHERE o.customer_id IN (SELECT c.id FROM customers c "
                       "WHERE c.nation_id IN (SELECT c2.nation_id FROM customers c2 WHERE c2.segment = 'x'))")
    result, _ = normalize.normalize(tree, normalize.Context(CATALOG, ["id"]))
    sql = result.sql(dialect=DIALECT)
    assert ('IN (SELECT "c"."id" AS "id" FROM "public"."customers" AS "c", "public"."customers" AS "c2" '
            'WHERE ') in sql, sql
    assert '"c"."nation_id" = "c2"."nation_id" AND "c2"."segment" = \'x\'' in sql, sql
    top = parse_query("SELECT o.id FROM orders o WHERE o.customer_id IN (SELECT c.id FROM customers c)")
    result, _ = normalize.normalize(top, normalize.Context(CATALOG, ["id"]))  # the outer query's rows count: kept
    assert " IN (SELECT " in result.sql(dialect=DIALECT)
