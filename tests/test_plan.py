"""Refresh planning and the SQL it pushes down (pure, no database)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
import sqlglot

from mvlog.analysis import analyze
from mvlog.config import RefreshMethod
from mvlog.errors import RefreshError
from mvlog.plan import ROWS_PER_PARTITION, partition_predicates, plan_refresh
from mvlog.shape import shape_view
from mvlog.source import ColumnStats, LogInfo
from mvlog import sqlgen

LOG = LogInfo("public", "orders", "mlog$_orders_1", ("id",), ("bigint",), 1)
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def shape(query: str, alias: str = "orders"):
    return shape_view("v", analyze(query), {alias: LOG})


def test_simple_view_key_is_the_projected_primary_key():
    s = shape("SELECT id AS order_id, amount FROM orders WHERE amount > 0")
    assert s.key_columns == ("order_id",) and s.hidden_columns == ()


def test_simple_view_without_its_key_gets_a_hidden_key_column():
    s = shape("SELECT amount FROM orders")
    assert s.key_columns == ("_mvlog_id",) and s.hidden_columns == ("_mvlog_id",)
    assert '"orders"."id" AS "_mvlog_id"' in s.select_sql


def test_fast_sql_restricts_the_view_to_changed_keys_in_the_window():
    s = shape("SELECT o.amount FROM public.orders o WHERE o.status = 'open'", alias="o")
    plan = plan_refresh(s, "/wh/v", RefreshMethod.FORCE, T0, None, True)
    assert plan.method == "fast"
    text = plan.read_sql()
    tree = sqlglot.parse_one(text, read="postgres")  # valid SQL
    assert tree is not None
    assert '"mvlog"."mlog$_orders_1"' in text
    assert "SELECT DISTINCT" in text and "LEFT JOIN" in text
    assert "\"snaptime$$\" > CAST('2026-01-01T00:00:00+00:00' AS TIMESTAMPTZ)" in text
    assert "\"snaptime$$\" <=" not in text  # at the stamp's snapshot nothing above S is visible
    assert "\"dmltype$$\" <> 'T'" in text
    assert '"v"."_mvlog_id" = "k"."_mvlog_key_0"' in text


def test_force_falls_back_to_complete_with_the_reason():
    s = shape_view("v", analyze("SELECT id FROM orders LIMIT 3"), {"orders": LOG})
    plan = plan_refresh(s, "/wh/v", RefreshMethod.FORCE, T0, None, True)
    assert plan.method == "complete" and "LIMIT" in plan.reason


def test_fast_on_an_impossible_view_is_an_error():
    s = shape_view("v", analyze("SELECT id, now() FROM orders"), {"orders": LOG})
    with pytest.raises(RefreshError, match="cannot be fast-refreshed: the non-deterministic function"):
        plan_refresh(s, "/wh/v", RefreshMethod.FAST, T0, None, True)


@pytest.mark.parametrize(
    ("since", "needs", "exists", "reason"),
    [
        (None, None, True, "has not been built yet"),
        (T0, None, False, "Delta table is missing"),
        (T0, "the query changed", True, "the query changed"),
    ],
)
def test_complete_when_state_requires_it(since, needs, exists, reason):
    plan = plan_refresh(shape("SELECT id FROM orders"), "/wh/v", RefreshMethod.FORCE, since, needs, exists)
    assert plan.method == "complete" and reason in plan.reason
    assert "method: complete" in plan.describe()


def test_complete_requested():
    plan = plan_refresh(shape("SELECT id FROM orders"), "/wh/v", RefreshMethod.COMPLETE, T0, None, True)
    assert plan.method == "complete" and plan.read_sql() == plan.shape.select_sql


CUSTOMERS = LogInfo("public", "customers", "mlog$_customers_2", ("id",), ("integer",), 2)


def test_range_key_is_the_first_key_column_and_the_base_column_it_equals():
    simple = shape("SELECT id AS order_id, amount FROM orders")
    assert (simple.range_key.column, simple.range_key.log, simple.range_key.base_column) == ("order_id", LOG, "id")
    join = shape_view("v", analyze("SELECT c.name, o.amount FROM customers c JOIN orders o ON o.customer_id = c.id"),
                      {"c": CUSTOMERS, "o": LOG})
    assert (join.range_key.column, join.range_key.log, join.range_key.base_column) == ("_mvlog_c_id", CUSTOMERS, "id")
    grouped = shape_view("v", analyze("SELECT o.customer_id, count(*) AS n FROM orders o GROUP BY o.customer_id"),
                         {"o": LOG})
    assert (grouped.range_key.column, grouped.range_key.base_column, grouped.range_key.grouped) == (
        "customer_id", "customer_id", True)
    assert shape("SELECT count(*) AS n FROM orders").range_key is None  # one row: nothing to split
    assert shape("SELECT amount + 1 AS a, count(*) AS n FROM orders GROUP BY amount + 1").range_key is None


def test_partitions_split_by_histogram_bounds_and_cover_every_value_once():
    s = shape("SELECT id AS order_id, amount FROM orders")
    histogram = tuple(str(v) for v in range(0, 10_000_001, 100_000))  # 101 bounds, 100 buckets
    predicates = partition_predicates(s, ColumnStats(histogram, 10_000_000, 10_000_000))
    assert len(predicates) == 10_000_000 // ROWS_PER_PARTITION
    assert predicates[0] == "\"order_id\" < '500000' OR \"order_id\" IS NULL"
    assert predicates[1] == "\"order_id\" >= '500000' AND \"order_id\" < '1000000'"
    assert predicates[-1] == "\"order_id\" >= '9500000'"
    # Repeated bounds (a skewed column) are split at once, not into empty ranges.
    skewed = partition_predicates(s, ColumnStats(("0",) + ("1",) * 50 + ("2",) * 50, 10_000_000, 10_000_000))
    assert skewed == ("\"order_id\" < '1' OR \"order_id\" IS NULL",
                      "\"order_id\" >= '1' AND \"order_id\" < '2'", "\"order_id\" >= '2'")


def test_small_tables_and_missing_statistics_read_in_one_piece():
    s = shape("SELECT id AS order_id, amount FROM orders")
    assert partition_predicates(s, None) == ()
    assert partition_predicates(s, ColumnStats(("1", "50", "100"), ROWS_PER_PARTITION / 2, 100)) == ()
    grouped = shape("SELECT customer_id, count(*) AS n FROM orders GROUP BY customer_id")
    many_rows_few_groups = ColumnStats(tuple(str(v) for v in range(101)), 10_000_000, 1000)
    assert partition_predicates(grouped, many_rows_few_groups) == ()


def test_keyed_fast_sql_joins_on_plain_equality_so_postgresql_can_hash_it():
    # IS NOT DISTINCT FROM cannot be hashed: a 95k-key read ran > 20 min in a nested loop.
    join = shape_view("v", analyze("SELECT c.name, o.amount FROM customers c JOIN orders o ON o.customer_id = c.id"),
                      {"c": CUSTOMERS, "o": LOG})
    grouped = shape("SELECT status, count(*) AS n FROM orders GROUP BY status")
    for s in (join, grouped):
        assert "DISTINCT FROM" not in sqlgen.fast_keyed_sql(s, T0).upper()
    # A NULL group key takes its own null-safe branch, restricted to rows with a NULL key.
    with_nulls = sqlglot.parse_one(sqlgen.fast_keyed_sql(grouped, T0, null_keys=True), read="postgres")
    branches = list(with_nulls.find_all(sqlglot.exp.Join))
    assert len(branches) == 2
    null_safe = [b for b in branches if b.find(sqlglot.exp.NullSafeEQ)]
    assert len(null_safe) == 1
    restricted = null_safe[0].this.this  # the right side: the view restricted to NULL keys
    assert restricted.args["where"].find(sqlglot.exp.Is) is not None


def test_force_switches_to_complete_only_for_large_windows_of_large_tables():
    from mvlog.plan import COMPLETE_ABOVE_FRACTION, COMPLETE_MIN_KEYS, WindowSize, cheaper_complete

    big = 10 * COMPLETE_MIN_KEYS / COMPLETE_ABOVE_FRACTION
    small_change = WindowSize("public.orders", int(big * COMPLETE_ABOVE_FRACTION) - 1, big)
    assert cheaper_complete([small_change]) is None
    large_change = WindowSize("public.customers", int(big * COMPLETE_ABOVE_FRACTION), big)
    reason = cheaper_complete([small_change, large_change])
    assert reason is not None and "public.customers" in reason and "10%" in reason
    # A small table changed entirely is still cheap to refresh fast; unknown sizes never switch.
    assert cheaper_complete([WindowSize("public.t", COMPLETE_MIN_KEYS - 1, COMPLETE_MIN_KEYS - 1)]) is None
    assert cheaper_complete([WindowSize("public.t", 10**9, -1)]) is None


def test_plan_json_reports_the_partitioned_read():
    import dataclasses
    import json

    s = shape("SELECT id AS order_id, amount FROM orders")
    plan = plan_refresh(s, "/wh/v", RefreshMethod.COMPLETE, None, None, True)
    histogram = tuple(str(v) for v in range(0, 2_000_001, 100_000))
    plan = dataclasses.replace(plan, partitions=partition_predicates(s, ColumnStats(histogram, 2_000_000, 2_000_000)))
    data = json.loads(json.dumps(plan.to_json()))
    assert data["method"] == "complete" and data["partition_column"] == "order_id"
    assert data["partitions"] == list(plan.partitions) and len(data["partitions"]) == 4
    fast = plan_refresh(s, "/wh/v", RefreshMethod.FORCE, T0, None, True).to_json()
    assert fast["partitions"] == [] and fast["partition_column"] is None and fast["since"] == T0.isoformat()
