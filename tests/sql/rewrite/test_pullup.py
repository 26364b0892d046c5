"""An aggregated derived table joined to tables, pulled up into one aggregate over the join."""

from __future__ import annotations

import pytest
from facts import CATALOG

from mvlog.sql.analyze.analysis import ViewClass, analyze
from mvlog.sql.pieces.aggplan import plan_deltas

TOTALS = ("(SELECT customer_id, sum(amount) AS total, count(*) AS n FROM orders WHERE status <> 'x' "
          "GROUP BY customer_id)")


def test_pulled_up_grouped_by_the_tables_keys_and_its_groups_with_conditions_on_aggregates_in_having():
    query = (f"SELECT c.name, t.total FROM customers c JOIN {TOTALS} t ON t.customer_id = c.id "
             "WHERE t.total > 100 AND c.nation_id = 1")
    analysis = analyze(query, CATALOG, ["name", "total"])
    assert analysis.view_class is ViewClass.AGGREGATE and not analysis.reasons
    sql = analysis.tree.sql(dialect="postgres")
    assert 'GROUP BY "c"."id", "c"."name", "orders"."customer_id"' in sql
    assert 'HAVING (SUM("orders"."amount")) > 100' in sql
    assert '"orders"."customer_id" = "c"."id"' in sql.split("WHERE")[1] and "\"c\".\"nation_id\" = 1" in sql
    by_position = analyze("SELECT c.name, t.n FROM customers c JOIN (SELECT customer_id, count(*) AS n FROM orders "
                          "GROUP BY 1) t ON t.customer_id = c.id", CATALOG, ["name", "n"])
    assert 'GROUP BY "c"."id", "c"."name", "orders"."customer_id"' in by_position.tree.sql(dialect="postgres")


def test_an_aggregate_folding_the_derived_tables_aggregates_is_one_aggregate_over_the_join():
    query = ("SELECT c.nation_id, sum(t.total) AS revenue, sum(t.n) AS orders, max(t.top) AS top "
             "FROM customers c JOIN (SELECT customer_id, sum(amount) AS total, count(*) AS n, max(amount) AS top "
             "FROM orders GROUP BY customer_id) t ON t.customer_id = c.id GROUP BY c.nation_id HAVING sum(t.n) > 1")
    folded = analyze(query, CATALOG, ["nation_id", "revenue", "orders", "top"],
                     ["integer", "numeric", "numeric", "integer"])
    assert folded.view_class is ViewClass.AGGREGATE and not folded.reasons
    sql = folded.tree.sql(dialect="postgres")
    # a sum of sums (of counts) keeps the outer sum's type
    assert 'CAST(SUM("orders"."amount") AS DECIMAL) AS "revenue"' in sql and "CAST(COUNT(*) AS DECIMAL)" in sql
    assert 'MAX("orders"."amount") AS "top"' in sql and "HAVING COUNT(*) > 1" in sql
    # a max of a sum is not a fold: the derived table's values become correlated subqueries
    unfolded = analyze(query.replace("max(t.top)", "max(t.total)"), CATALOG)
    assert unfolded.view_class is ViewClass.AGGREGATE and unfolded.semi_joins


def test_count_of_the_pairs_and_avg_over_them_fold_into_the_aggregate_over_the_join():
    query = (f"SELECT c.nation_id, count(*) AS customers, avg(t.total) AS mean, avg(t.n) AS per_customer "
             f"FROM customers c JOIN {TOTALS} t ON t.customer_id = c.id GROUP BY c.nation_id HAVING count(*) > 1")
    folded = analyze(query, CATALOG, ["nation_id", "customers", "mean", "per_customer"],
                     ["integer", "bigint", "numeric", "numeric"])
    assert folded.view_class is ViewClass.AGGREGATE and not folded.reasons
    sql = folded.tree.sql(dialect="postgres")
    pairs = '("c"."id", "orders"."customer_id")'
    # count(*) counts the pairs of a customer and a group; avg of a sum skips the groups whose sum is NULL
    assert f'COUNT(DISTINCT {pairs}) AS "customers"' in sql and f"HAVING COUNT(DISTINCT {pairs}) > 1" in sql
    assert (f'CAST(CAST(SUM("orders"."amount") AS DECIMAL) / COUNT(DISTINCT CASE WHEN NOT "orders"."amount" IS NULL '
            f'THEN {pairs} END) AS DECIMAL) AS "mean"') in sql
    assert f'CAST(CAST(COUNT(*) AS DECIMAL) / COUNT(DISTINCT {pairs}) AS DECIMAL) AS "per_customer"' in sql
    # kept per affected group: a record's distinct count is not kept by state
    kept = plan_deltas(folded.tree, list(folded.tree.args["group"].expressions), "km")
    assert isinstance(kept, str) and "of a record is recomputed per affected group" in kept, kept


@pytest.mark.parametrize("query", [
    f"SELECT c.name, t.total FROM customers c LEFT JOIN {TOTALS} t ON t.customer_id = c.id",  # outer join
    # joined on an aggregate, not on its groups: a customer row may join several groups
    f"SELECT c.nation_id, count(*) AS n FROM customers c JOIN {TOTALS} t ON t.n = c.id GROUP BY 1",
    "SELECT c.name, t.total FROM customers c JOIN (SELECT DISTINCT customer_id, sum(amount) AS total FROM orders "
    "GROUP BY customer_id) t ON t.customer_id = c.id",
    f"SELECT c.name FROM customers c JOIN {TOTALS} t ON t.customer_id = c.id JOIN {TOTALS} u ON u.n = t.n",
])
def test_what_it_cannot_pull_up_stays_complete_only(query):
    analysis = analyze(query, CATALOG)
    assert analysis.view_class is ViewClass.OTHER and analysis.reasons, analysis.tree.sql()


@pytest.mark.parametrize("query", [
    f"SELECT c.nation_id, avg(t.total) FROM customers c JOIN {TOTALS} t ON t.customer_id = c.id GROUP BY 1",  # no type
    f"SELECT c.nation_id, count(t.total) FROM customers c JOIN {TOTALS} t ON t.customer_id = c.id GROUP BY 1",
    # the "big spenders": a condition on the inner aggregate under an outer aggregate
    f"SELECT n.name, count(*) AS customers, sum(t.total) AS spent FROM customers c JOIN nation n "
    f"ON n.id = c.nation_id JOIN {TOTALS} t ON t.customer_id = c.id WHERE t.total > 100 GROUP BY n.name",
])
def test_an_aggregate_that_does_not_fold_reads_the_derived_table_as_correlated_subqueries(query):
    analysis = analyze(query, CATALOG)
    assert analysis.view_class is ViewClass.AGGREGATE and not analysis.reasons, analysis.reasons
    sql = analysis.tree.sql(dialect="postgres")
    # the group a customer joins is the one of its key; it joins one if that group exists (with
    # the derived table's own WHERE); its values are the group's aggregates
    assert 'EXISTS(SELECT 1 FROM "public"."orders" AS "orders" WHERE "orders"."status" <> \'x\' AND ' \
           '"orders"."customer_id" = "c"."id")' in sql, sql
    assert "(SELECT SUM(" in sql or "(SELECT COUNT(*)" in sql
    assert "JOIN (SELECT" not in sql
    # the subqueries read one table under one condition: one join of the lineage, not one each
    assert len(analysis.semi_joins) == 1 and [t.name for t in analysis.tables].count("orders") == 1


def test_a_having_of_the_derived_table_is_a_condition_of_each_row():
    query = ("SELECT c.nation_id, count(*) AS n FROM customers c JOIN (SELECT customer_id, max(amount) AS top "
             "FROM orders GROUP BY customer_id HAVING count(*) > 2) t ON t.customer_id = c.id "
             "WHERE t.top > 5 GROUP BY c.nation_id")
    sql = analyze(query, CATALOG).tree.sql(dialect="postgres")
    assert '((SELECT COUNT(*) > 2 FROM "public"."orders"' in sql, sql
