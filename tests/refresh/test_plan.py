"""Refresh planning: fast or complete and why, after the stamp, partitions (pure, no database)."""

from __future__ import annotations

import pytest
from facts import LOG, T0, shape

import mvlog.pipeline.plan
from mvlog.config import RefreshMethod, ViewConfig
from mvlog.errors import RefreshError
from mvlog.model import ColumnStats, Measured, WindowSize
from mvlog.pipeline.cost import COMPLETE_MIN_KEYS
from mvlog.pipeline.plan import (
    ROWS_PER_PARTITION,
    after_stamp,
    group_tables,
    needs_complete,
    partition_predicates,
    plan_refresh,
    requested_method,
    schema_drift,
    with_partitions,
    with_read_scope,
    without_missing_groups,
)
from mvlog.sql.analyze.analysis import analyze
from mvlog.sql.generate import aggdelta
from mvlog.sql.pieces.choice import shape_view


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


def test_a_plan_says_its_correlated_aggregate_may_be_read_joined():
    s = shape_view("v", analyze("SELECT o.id FROM orders o WHERE o.amount > (SELECT avg(o2.amount) FROM orders o2 "
                                "WHERE o2.customer_id = o.customer_id)"), {"o": LOG, "o2": LOG, "orders": LOG})
    plan = plan_refresh(s, "/wh/v", RefreshMethod.COMPLETE, T0, None, True)
    assert "correlated aggregates joined where PostgreSQL estimates that cheaper" in plan.describe()
    plain = plan_refresh(shape("SELECT id FROM orders"), "/wh/v", RefreshMethod.COMPLETE, T0, None, True)
    assert "correlated" not in plain.describe()


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


def fast_plan(refresh: RefreshMethod = RefreshMethod.FORCE):
    return plan_refresh(shape("SELECT id AS order_id, amount FROM orders"), "/wh/v", refresh, T0, None, True)


def test_after_the_stamp_a_truncated_table_makes_force_complete_and_fast_refuse():
    plan = fast_plan()
    assert after_stamp(plan, [], []) is plan  # nothing new: the same plan
    complete = after_stamp(plan, ["table public.orders was truncated"], [])
    assert complete.method is RefreshMethod.COMPLETE and complete.reason == "table public.orders was truncated"
    assert plan.method is RefreshMethod.FAST  # a new plan; the old one is unchanged
    with pytest.raises(RefreshError, match=r"cannot be fast-refreshed: table public.orders was truncated; "
                                           r"run 'mvlog refresh --complete v'"):
        after_stamp(fast_plan(RefreshMethod.FAST), ["table public.orders was truncated"], [])


def test_after_the_stamp_only_force_switches_for_a_large_window():
    large = [WindowSize("public.orders", 10 * COMPLETE_MIN_KEYS, 10 * COMPLETE_MIN_KEYS)]
    switched = after_stamp(fast_plan(), [], large)
    assert switched.method is RefreshMethod.COMPLETE and "a complete refresh is cheaper" in switched.reason
    assert switched.window_keys is None  # only a fast refresh records its window's keys
    kept = after_stamp(fast_plan(RefreshMethod.FAST), [], large)
    assert kept.method is RefreshMethod.FAST
    complete = plan_refresh(shape("SELECT id FROM orders"), "/wh/v", RefreshMethod.COMPLETE, T0, None, True)
    assert after_stamp(complete, ["table public.orders was truncated"], large) is complete


def test_partitions_apply_to_complete_plans_only():
    histogram = tuple(str(v) for v in range(0, 2_000_001, 100_000))
    stats = ColumnStats(histogram, 2_000_000, 2_000_000)
    assert with_partitions(fast_plan(), stats).partitions == ()
    complete = plan_refresh(shape("SELECT id FROM orders"), "/wh/v", RefreshMethod.COMPLETE, T0, None, True)
    assert len(with_partitions(complete, stats).partitions) == 4 and complete.partitions == ()


def test_why_a_view_needs_a_complete_refresh():
    assert needs_complete(None, (), False, None) is None
    assert needs_complete("the view is new", ("public.t",), True, None) == "the view is new"
    assert needs_complete(None, ("public.t", "public.u"), True, None) == "the primary key of public.t changed"
    assert needs_complete(None, (), True, None) == "the columns of its query changed"
    assert needs_complete(None, (), True, ("ALTER TABLE", "public.t")) == \
        "the columns of its query changed (ALTER TABLE on public.t)"


def test_schema_drift_compares_column_names_in_any_order():
    assert schema_drift("/wh/v", None, ("a", "b")) is None  # no table: planned as missing instead
    assert schema_drift("/wh/v", ["b", "a"], ("a", "b")) is None
    assert schema_drift("/wh/v", ["b", "a", "_mvlog_row_hash"], ("a", "b")) is None  # mvlog's, not the query's
    assert schema_drift("/wh/v", ["a"], ("a", "b")) == "the columns of /wh/v differ from the query's columns"


def test_complete_is_asked_only_of_the_views_named():
    fast = ViewConfig(name="v", query="SELECT id FROM orders", refresh="fast")
    assert requested_method(fast, {"v"}) is RefreshMethod.COMPLETE
    assert requested_method(fast, {"w"}) is RefreshMethod.FAST
    assert requested_method(fast, ()) is RefreshMethod.FAST


def test_an_aggregate_whose_group_table_is_missing_or_stale_recomputes_its_groups():
    s = shape("SELECT status, sum(amount) AS total, count(*) AS n FROM orders GROUP BY status")
    plan = plan_refresh(s, "/wh/v", RefreshMethod.FAST, T0, None, True)
    (table,) = group_tables(s)
    kept = without_missing_groups(plan, {table: aggdelta.groups_columns(s)})
    assert kept is plan and kept.shape.deltas is not None
    for columns in ([], aggdelta.groups_columns(s)[:-1]):
        recomputed = without_missing_groups(plan, {table: columns})
        assert recomputed.shape.deltas is None
        assert recomputed.shape.recompute_reason == "the state of its groups is built by its next complete refresh"
    assert without_missing_groups(plan, {}).shape.deltas is None  # never read: taken as missing
    complete = plan_refresh(s, "/wh/v", RefreshMethod.COMPLETE, T0, None, True)
    assert without_missing_groups(complete, {}) is complete  # a complete refresh builds the state


def test_a_phase_inside_another_counts_its_seconds_once(monkeypatch):
    """The Delta table's look (``table``) is timed inside ``prepare``: its seconds are taken out of
    ``prepare``, and what a refresh took before its first phase goes to ``prepare`` by ``rest``."""
    from mvlog.pipeline import results

    clock = iter([0.0, 1.0, 3.0, 3.5, 10.0, 12.0])  # prepare opens, table opens, table ends, prepare ends, …
    monkeypatch.setattr(results.time, "monotonic", lambda: next(clock))
    phases = results.Phases()
    with phases("prepare"):
        with phases("table"):
            pass
    with phases("write"):
        pass
    assert phases.seconds == {"prepare": 1.5, "table": 2.0, "write": 2.0}
    assert phases.rest("prepare", 6.0).seconds == {"prepare": 2.0, "table": 2.0, "write": 2.0}


def test_a_fast_plan_reads_its_whole_query_where_measured_cheaper_but_never_a_composed_view(monkeypatch):
    measured = [Measured(RefreshMethod.FAST, 40.0, 5, None, phases={"read": 30.0}),
                Measured(RefreshMethod.COMPLETE, 5.0, None, 10, phases={"write": 2.0})]
    simple = plan_refresh(shape("SELECT id, amount FROM orders"), "/wh/v", RefreshMethod.FAST, T0, None, True)
    whole = with_read_scope(simple, measured, 10)
    assert whole.whole_read and whole.to_json()["read"] == "whole" and whole.to_json()["write"] == "merge"
    assert "read: the whole query" in whole.describe() and '"_mvlog_present"' in whole.read_sql()
    assert with_read_scope(simple, measured[1:], 10).to_json()["read"] == "keys"  # no keyed read measured
    # A strategy whose record takes rows from its keyed read (a composed view's: tests/refresh/
    # test_refresh_whole.py has them from the compiler) keeps reading its keys.
    takes = type("Takes", (), {"record_takes_read": lambda self: True})()
    monkeypatch.setattr(mvlog.pipeline.plan, "strategy_of", lambda shape: takes)
    assert with_read_scope(simple, measured, 10).whole_read is None
    monkeypatch.undo()
    complete = plan_refresh(simple.shape, "/wh/v", RefreshMethod.COMPLETE, T0, None, True)
    assert with_read_scope(complete, measured, 10).to_json()["read"] is None
