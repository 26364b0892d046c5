"""An aggregated derived table joined on all its groups, as correlated subqueries (pure, no database)."""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from mvlog.sql.rewrite.correlate import correlated

TOTALS = "(SELECT customer_id, sum(amount) AS spent FROM orders GROUP BY customer_id)"


def conjuncts(node: exp.Expr | None) -> list[exp.Expr]:
    if node is None:
        return []
    return list(node.flatten()) if isinstance(node, exp.And) else [node]


def rewrite(query: str) -> exp.Select | None:
    """``correlated`` over the query's derived table, its conditions (WHERE and every ON) and its other items."""
    select = sqlglot.parse_one(query, read="postgres")
    joins = select.args.get("joins") or []
    items = [select.args["from_"].this, *[j.this for j in joins]]
    source = next(i for i in items if isinstance(i, exp.Subquery))
    conditions = conjuncts(select.args["where"].this if select.args.get("where") else None)
    conditions += [c for j in joins for c in conjuncts(j.args.get("on"))]
    return correlated(select, source, list(source.this.args["group"].expressions), [c.copy() for c in conditions],
                      [i.copy() for i in items if i is not source])


def sql(node: exp.Expr) -> str:
    return node.sql(dialect="postgres")


def test_the_derived_table_s_aggregate_is_a_subquery_correlated_with_its_join_and_its_rows_an_exists():
    result = rewrite(f"SELECT n.name, count(*) AS k, sum(t.spent) AS s FROM customers c JOIN nation n "
                     f"ON n.id = c.nation_id JOIN {TOTALS} t ON t.customer_id = c.id WHERE t.spent > 100 "
                     f"GROUP BY n.name")
    assert result is not None
    spent = "(SELECT SUM(amount) FROM orders WHERE customer_id = c.id)"
    assert sql(result.selects[2]) == f"SUM(({spent})) AS s"
    assert [sql(i) for i in [result.args["from_"].this, *[j.this for j in result.args["joins"]]]] == [
        "customers AS c", "nation AS n"]  # the derived table is gone, the others cross-joined
    where = sql(result.args["where"].this)
    assert f"({spent}) > 100" in where and "n.id = c.nation_id" in where  # conditions kept
    assert "t.customer_id = c.id" not in where  # the join by the group became the correlation
    assert where.endswith("EXISTS(SELECT 1 FROM orders WHERE customer_id = c.id)")  # a customer with orders only
    assert sql(result.args["group"]) == "GROUP BY n.name"


def test_the_group_column_is_the_outer_expression_it_equals_and_having_is_one_more_condition():
    result = rewrite("SELECT c.name, t.customer_id FROM customers c JOIN (SELECT customer_id, sum(amount) AS spent "
                     "FROM orders GROUP BY customer_id HAVING count(*) > 2) t ON c.id = t.customer_id")
    assert result is not None
    assert [sql(p) for p in result.selects] == ["c.name", "c.id"]
    assert sql(result.args["where"].this) == ("EXISTS(SELECT 1 FROM orders WHERE customer_id = c.id) AND "
                                              "((SELECT COUNT(*) > 2 FROM orders WHERE customer_id = c.id))")


def test_a_group_not_joined_by_an_equality_is_not_rewritten():
    assert rewrite(f"SELECT c.name, t.spent FROM customers c JOIN {TOTALS} t ON t.customer_id > c.id") is None
    both = "(SELECT customer_id, status, sum(amount) AS spent FROM orders GROUP BY customer_id, status)"
    assert rewrite(f"SELECT c.name, t.spent FROM customers c JOIN {both} t ON t.customer_id = c.id") is None


def test_grouping_by_the_derived_table_s_aggregate_or_an_ungrouped_output_is_not_rewritten():
    assert rewrite(f"SELECT t.spent, count(*) AS n FROM customers c JOIN {TOTALS} t ON t.customer_id = c.id "
                   f"GROUP BY t.spent") is None
    assert rewrite("SELECT c.name, t.x FROM customers c JOIN (SELECT customer_id, amount AS x FROM orders "
                   "GROUP BY customer_id) t ON t.customer_id = c.id") is None


def test_a_column_the_derived_table_does_not_output_is_not_rewritten():
    assert rewrite(f"SELECT c.name, t.missing FROM customers c JOIN {TOTALS} t ON t.customer_id = c.id") is None
