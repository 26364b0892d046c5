"""The correlated scalar aggregate as a grouped derived table (sql/decorrelate.py): which
subqueries decorrelate, and that the rewrite joins them by their correlation (issue #61, Q20)."""

from __future__ import annotations

import pytest
from sqlglot import exp
from sqlglot.optimizer.qualify import qualify

from mvlog.sql.analyze.analysis import parse
from mvlog.sql.parse.sqltree import DIALECT
from mvlog.sql.rewrite.decorrelate import joined_form, scalar_aggregates

SCHEMA = {"ps": {"pk": "int", "sk": "int", "qty": "int"}, "l": {"pk": "int", "sk": "int", "q": "numeric", "d": "date"},
          "s": {"sk": "int", "name": "text"}}

Q20 = ("SELECT s.name FROM s WHERE s.sk IN (SELECT ps.sk FROM ps WHERE ps.qty > "
       "(SELECT 0.5 * sum(l.q) FROM l WHERE l.pk = ps.pk AND l.sk = ps.sk AND l.d > date '1994-01-01'))")


def _rewritten(query: str) -> str | None:
    tree = qualify(parse(query), schema=SCHEMA, dialect=DIALECT, quote_identifiers=True, identify=True)
    return scalar_aggregates(tree)


def test_q20_s_aggregate_becomes_a_derived_table_grouped_by_its_correlation():
    rewritten = _rewritten(Q20)
    assert rewritten is not None
    tree = parse(rewritten)
    derived = [s for s in tree.find_all(exp.Subquery) if s.alias == "mvlog_agg_1"]
    assert len(derived) == 1
    inner = derived[0].this
    assert [g.sql(dialect=DIALECT) for g in inner.args["group"].expressions] == ['"l"."pk"', '"l"."sk"']
    assert [s.alias for s in inner.selects] == ["key_1", "key_2", "value"]
    assert '"l"."d" >' in inner.args["where"].sql(dialect=DIALECT)  # its own condition stays inside
    where = derived[0].parent_select.args["where"].sql(dialect=DIALECT)
    assert '"ps"."qty" > "mvlog_agg_1"."value"' in where
    assert '"mvlog_agg_1"."key_1" = "ps"."pk"' in where and '"mvlog_agg_1"."key_2" = "ps"."sk"' in where


@pytest.mark.parametrize("subquery, why", [
    ("SELECT count(*) FROM l WHERE l.pk = ps.pk", "count is 0 over no rows, not NULL"),
    ("SELECT coalesce(sum(l.q), 0) FROM l WHERE l.pk = ps.pk", "coalesce makes no rows a value"),
    ("SELECT sum(l.q) FROM l WHERE l.pk > ps.pk", "not an equality"),
    ("SELECT sum(l.q) FROM l WHERE l.pk = ps.pk OR l.sk = 1", "a correlation under OR"),
    ("SELECT sum(l.q) FROM l", "not correlated"),
    ("SELECT sum(l.q) FROM l WHERE l.pk = ps.pk GROUP BY l.sk", "grouped"),
    ("SELECT sum(l.q) FROM l WHERE l.pk = ps.pk + ps.sk", "the outer side is not a column"),
    ("SELECT max(l.q) + l.pk FROM l WHERE l.pk = ps.pk", "a column outside the aggregate"),
])
def test_what_does_not_decorrelate_exactly_is_left_alone(subquery, why):
    assert _rewritten(f"SELECT ps.sk FROM ps WHERE ps.qty > ({subquery})") is None, why


def test_a_comparison_under_or_is_left_alone():
    assert _rewritten("SELECT ps.sk FROM ps WHERE ps.qty > (SELECT sum(l.q) FROM l WHERE l.pk = ps.pk) "
                      "OR ps.sk = 1") is None


def test_min_avg_and_casts_decorrelate():
    assert _rewritten("SELECT ps.sk FROM ps WHERE ps.qty >= (SELECT CAST(avg(l.q) AS int) - min(l.q) FROM l "
                      "WHERE ps.pk = l.pk)") is not None


def test_a_subquery_under_arithmetic_decorrelates_as_q06_s_average_does():
    rewritten = _rewritten("SELECT ps.sk FROM ps WHERE ps.qty > 1.2 * (SELECT avg(l.q) FROM l WHERE l.pk = ps.pk)")
    assert rewritten is not None
    assert '"ps"."qty" > 1.2 * "mvlog_agg_1"."value"' in rewritten


@pytest.mark.parametrize("side, why", [
    ("coalesce((SELECT avg(l.q) FROM l WHERE l.pk = ps.pk), 0)", "coalesce makes no rows a value"),
    ("(SELECT avg(l.q) FROM l WHERE l.pk = ps.pk) + (SELECT max(l.q) FROM l WHERE l.sk = ps.sk)",
     "two subqueries in one side"),
])
def test_a_subquery_under_what_is_not_null_in_null_out_is_left_alone(side, why):
    assert _rewritten(f"SELECT ps.sk FROM ps WHERE ps.qty > {side}") is None, why


def test_the_joined_form_of_mvlog_s_sql():
    query = ('SELECT "ps"."sk" AS "sk" FROM "ps" AS "ps" WHERE "ps"."qty" > '
             '(SELECT max("l"."q") AS "m" FROM "l" AS "l" WHERE "l"."pk" = "ps"."pk")')
    joined = joined_form(query)
    assert joined is not None and '"mvlog_agg_1"."key_1" = "ps"."pk"' in joined
    assert parse(joined).selects[0].alias_or_name == "sk"  # the same outputs
    assert joined_form('SELECT "ps"."sk" FROM "ps" AS "ps"') is None  # no subquery
    assert joined_form(query.replace('"ps"."sk" AS "sk"', "*")) is None  # * would output the join's columns too


def test_a_conjunct_inside_parentheses_decorrelates_as_in_a_fast_read():
    """A fast read wraps the view's WHERE in parentheses before its own restriction."""
    rewritten = _rewritten("SELECT ps.sk FROM ps WHERE (ps.sk > 1 AND ps.qty > (SELECT max(l.q) FROM l "
                           "WHERE l.pk = ps.pk)) AND ps.pk IN (1, 2)")
    assert rewritten is not None and '"ps"."qty" > "mvlog_agg_1"."value"' in rewritten
    assert _rewritten("SELECT ps.sk FROM ps WHERE (ps.sk > 1 OR ps.qty > (SELECT max(l.q) FROM l "
                      "WHERE l.pk = ps.pk)) AND ps.pk IN (1, 2)") is None
