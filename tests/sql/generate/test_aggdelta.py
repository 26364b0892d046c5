"""How aggregates are kept by state (pure: the plan and the SQL, no database)."""

from __future__ import annotations

import sqlglot
from facts import T0, shape

from mvlog.sql.generate import aggdelta, keymap


def test_min_max_and_filter_are_kept_by_state_and_share_inputs():
    s = shape("SELECT status, max(amount) AS hi, min(amount) AS lo, sum(amount) AS total, "
              "count(*) FILTER (WHERE priority > 1) AS urgent FROM orders GROUP BY status")
    assert s.deltas is not None and s.recompute_reason is None
    assert s.deltas.inputs == ("amount", "CASE WHEN priority > 1 THEN 1 END")
    assert s.deltas.extremes == (("max", 0), ("min", 0))
    assert s.deltas.aggregates[-1] == "COUNT(*) FILTER(WHERE priority > 1)"
    assert [s.deltas.raw(j) for j in range(2)] == [True, False]  # amount kept as a value, the filter as 1/0
    assert keymap.probe_indexes(s) == {f"{s.keymap}_x0": ("_mvlog_k0", "_mvlog_a0")}


def test_the_extreme_probe_skips_changed_rows_and_walks_the_index_in_its_order():
    s = shape("SELECT status, max(amount) AS hi FROM orders GROUP BY status")
    text = aggdelta.fast_delta_sql(s, T0)
    assert isinstance(sqlglot.parse_one(text, read="postgres"), sqlglot.exp.Select)
    assert 'ORDER BY "m"."_mvlog_a0" DESC LIMIT 1' in text  # backwards over ASC NULLS LAST: no sort
    assert 'NOT "m"."_mvlog_r0_0" IN (SELECT DISTINCT "id"' in text  # changed rows' old values are not kept
    assert '"m"."_mvlog_k0" IS NULL AND "_mvlog_group_state"."_mvlog_k0" IS NULL' in text  # the NULL group
    assert "GREATEST(" in text


def test_aggregates_without_a_state_are_recomputed_with_a_reason():
    for query, reason in [
        ("SELECT status, stddev(amount) AS sd FROM orders GROUP BY status", "stddev()"),
        ("SELECT status, max(amount) AS m FROM orders GROUP BY status HAVING max(priority) > 1", None),
        ("SELECT status, string_agg(DISTINCT status, ',') AS s FROM orders GROUP BY status", "string_agg"),
    ]:
        s = shape(query)
        if reason is None:  # the control: the same shape with aggregates that have a state
            assert s.deltas is not None and s.deltas.extremes == (("max", 0), ("max", 1))
            continue
        assert s.deltas is None and reason in (s.recompute_reason or ""), (query, s.recompute_reason)


def test_count_distinct_is_kept_by_state_and_other_distinct_aggregates_recomputed():
    s = shape("SELECT status, count(DISTINCT customer_id) AS buyers, "
              "count(DISTINCT customer_id) FILTER (WHERE amount > 5) AS big FROM orders GROUP BY status")
    assert s.deltas is not None and s.deltas.distinct == (0, 1)
    assert s.deltas.inputs == ("customer_id", "CASE WHEN amount > 5 THEN customer_id END")
    assert set(keymap.probe_indexes(s)) == {f"{s.keymap}_x0", f"{s.keymap}_x1"}
    rebuild = aggdelta.groups_rebuild_sql(s, exists=False)[0]
    assert 'COUNT(DISTINCT "_mvlog_a0") AS "_mvlog_d0"' in rebuild
    summed = shape("SELECT status, sum(DISTINCT amount) AS s FROM orders GROUP BY status")
    assert summed.deltas is None and "sum(DISTINCT …)" in (summed.recompute_reason or "")
