"""Which aggregates are kept by state and how their outputs read the group state (pure, no database)."""

from __future__ import annotations

import pytest
import sqlglot
from facts import shape
from sqlglot import exp

from mvlog.sql.parse.restrictions import group_expressions
from mvlog.sql.pieces import aggplan
from mvlog.sql.pieces.shape import AggregateDeltas


def plan(query: str) -> AggregateDeltas | str:
    select = sqlglot.parse_one(query, read="postgres")
    return aggplan.plan_deltas(select, group_expressions(select), "keys$_v")


def outputs(deltas: AggregateDeltas) -> dict[str, str]:
    tree = sqlglot.parse_one(deltas.outputs_sql, read="postgres")
    return {p.alias_or_name: p.this.sql(dialect="postgres") for p in tree.selects}


def test_count_sum_and_avg_share_one_input_and_read_the_group_state():
    deltas = plan("SELECT status, count(*) AS n, sum(amount) AS total, avg(amount) AS mean, count(amount) AS c "
                  "FROM orders GROUP BY status")
    assert isinstance(deltas, AggregateDeltas)
    assert deltas.inputs == ("amount",) and deltas.summed == (True,)
    assert deltas.groups == "groups$_v"
    assert deltas.aggregates == ("COUNT(*)", "SUM(amount)", "AVG(amount)", "COUNT(amount)")
    out = outputs(deltas)
    assert out["status"] == '"_mvlog_state"."_mvlog_k0"'
    assert out["n"] == '"_mvlog_state"."_mvlog_n"'  # count(*): the group's rows
    assert out["c"] == '"_mvlog_state"."_mvlog_c0"'  # count(x): its non-NULL count
    # a sum over no non-NULL value is NULL; avg is a numeric sum over the count
    assert out["total"] == 'CASE WHEN "_mvlog_state"."_mvlog_c0" > 0 THEN "_mvlog_state"."_mvlog_s0" END'
    assert 'CAST("_mvlog_state"."_mvlog_s0" AS DECIMAL) / "_mvlog_state"."_mvlog_c0"' in out["mean"]
    where = sqlglot.parse_one(deltas.outputs_sql, read="postgres").args["where"].sql(dialect="postgres")
    assert where == 'WHERE "_mvlog_state"."_mvlog_n" > 0'  # a group without rows is gone


def test_filter_becomes_a_case_input_and_count_of_it_is_only_counted():
    deltas = plan("SELECT status, sum(amount) FILTER (WHERE p > 1) AS s, count(*) FILTER (WHERE p > 1) AS n "
                  "FROM orders GROUP BY status")
    assert isinstance(deltas, AggregateDeltas)
    assert deltas.inputs == ("CASE WHEN p > 1 THEN amount END", "CASE WHEN p > 1 THEN 1 END")
    assert deltas.summed == (True, False)
    assert deltas.aggregates == ("SUM(amount) FILTER(WHERE p > 1)", "COUNT(*) FILTER(WHERE p > 1)")  # as written
    assert outputs(deltas)["n"] == '"_mvlog_state"."_mvlog_c1"'


def test_extremes_and_count_distinct_are_kept_as_probed_inputs():
    deltas = plan("SELECT status, max(amount + 1) AS hi, count(DISTINCT customer_id) AS buyers "
                  "FROM orders GROUP BY status")
    assert isinstance(deltas, AggregateDeltas)
    assert deltas.inputs == ("amount + 1", "customer_id") and deltas.summed == (False, False)
    assert deltas.extremes == (("max", 0),) and deltas.distinct == (1,)
    assert outputs(deltas) == {"status": '"_mvlog_state"."_mvlog_k0"', "hi": '"_mvlog_state"."_mvlog_max0"',
                               "buyers": '"_mvlog_state"."_mvlog_d1"', "_mvlog_present": "TRUE"}


def test_having_is_a_condition_over_the_state_and_its_parameters_stay_subqueries():
    deltas = plan("SELECT status, count(*) AS n FROM orders GROUP BY status "
                  "HAVING sum(amount) > (SELECT avg(amount) FROM orders)")
    assert isinstance(deltas, AggregateDeltas)
    assert deltas.inputs == ("amount",)  # the parameter's avg() is not an input of the view
    assert deltas.aggregates == ("COUNT(*)", "SUM(amount)")
    where = sqlglot.parse_one(deltas.outputs_sql, read="postgres").args["where"].this
    assert isinstance(where, exp.Case)
    assert where.sql(dialect="postgres").startswith('CASE WHEN "_mvlog_state"."_mvlog_n" > 0 THEN (')
    assert "(SELECT AVG(amount) FROM orders)" in where.sql(dialect="postgres")


@pytest.mark.parametrize(("query", "reason"), [
    ("SELECT count(*) AS n FROM orders", "a global aggregate"),
    ("SELECT DISTINCT status FROM orders", "SELECT DISTINCT"),
    ("SELECT status, stddev(amount) AS s FROM orders GROUP BY status", "stddev() is recomputed"),
    ("SELECT status, sum(amount) OVER () AS s FROM orders GROUP BY status", "with OVER"),
    ("SELECT status, sum(DISTINCT amount) AS s FROM orders GROUP BY status", "sum(DISTINCT …)"),
    ("SELECT status, count(DISTINCT (a, b)) AS s FROM orders GROUP BY status", "of a record"),
    ("SELECT status, sum(amount) FROM orders GROUP BY status", "has no name"),
    ("SELECT status, amount AS a FROM orders GROUP BY status", "output amount is not a GROUP BY expression"),
])
def test_what_is_not_kept_by_state_says_why(query, reason):
    planned = plan(query)
    assert isinstance(planned, str) and reason in planned


def test_sums_of_floats_are_not_exact_but_counts_of_them_are():
    deltas = plan("SELECT status, sum(amount) AS s, count(weight) AS w FROM orders GROUP BY status")
    assert isinstance(deltas, AggregateDeltas)
    assert aggplan.exact_inputs_reason(deltas, [1700, 701]) is None  # numeric sum; a float only counted
    reason = aggplan.exact_inputs_reason(deltas, [701, 701])  # float8 summed
    assert reason is not None and "sum/avg of amount" in reason


def test_the_inputs_probe_selects_the_inputs_over_the_view_s_rows():
    s = shape("SELECT status, sum(amount) AS s, max(priority) AS p FROM orders WHERE status <> 'x' GROUP BY status")
    probe = sqlglot.parse_one(aggplan.inputs_probe_sql(s), read="postgres")
    assert [p.sql(dialect="postgres") for p in probe.selects] == ["amount", "priority"]
    assert probe.args["where"].sql(dialect="postgres") == "WHERE status <> 'x'"
    assert not probe.args.get("group")
