"""``mvlog explain``'s capabilities of a view, each with its reason (pure, no database)."""

from __future__ import annotations

from facts import LOG

from mvlog.sql.analyze.analysis import analyze
from mvlog.sql.explain import explain
from mvlog.sql.pieces.choice import shape_view
from mvlog.sql.strategies.registry import strategy_of

FAST_KINDS = ["REFRESH_FAST", "REFRESH_FAST_AFTER_INSERT", "REFRESH_FAST_AFTER_ONETAB_DML",
              "REFRESH_FAST_AFTER_ANY_DML"]


def explained(query: str, refresh: str = "fast", missing: tuple[str, ...] = (), pg_views: tuple[str, ...] = ()):
    analysis = analyze(query)
    shape = None if missing else shape_view("v", analysis, {"orders": LOG})
    return explain("v", refresh, analysis, shape, list(missing), pg_views), shape


def capabilities(explanation) -> dict[str, tuple[bool, str]]:
    return {c.name: (c.possible, c.reason) for c in explanation.capabilities}


def test_a_fast_view_says_how_its_strategy_refreshes_it():
    explanation, shape = explained("SELECT status, count(*) AS n FROM orders GROUP BY status", pg_views=("public.pv",))
    assert (explanation.view_class, explanation.key, explanation.base_tables) == ("aggregate", ["status"], ["orders"])
    caps = capabilities(explanation)
    assert list(caps) == ["REFRESH_COMPLETE", *FAST_KINDS, "REFRESH_FAST_PCT"]
    assert caps["REFRESH_COMPLETE"][0] and not caps["REFRESH_FAST_PCT"][0]
    assert caps["REFRESH_FAST"] == (True, strategy_of(shape).how())
    assert caps["REFRESH_FAST_AFTER_INSERT"] == (True, "inserts are handled like any change")
    assert caps["REFRESH_FAST_AFTER_ANY_DML"] == (
        True, "inserts, updates (including primary-key updates) and deletes on every table")
    assert explanation.pg_views == ["public.pv"]


def test_a_recomputed_aggregate_adds_its_note_to_any_dml():
    explanation, _ = explained("SELECT status, stddev(amount) AS s FROM orders GROUP BY status")
    possible, reason = capabilities(explanation)["REFRESH_FAST_AFTER_ANY_DML"]
    assert possible and reason.endswith("; MIN and MAX stay exact after deletes because affected groups are recomputed")


def test_a_complete_only_view_gives_its_reason_for_every_fast_capability():
    explanation, _ = explained("SELECT id FROM orders LIMIT 3", refresh="complete")
    assert explanation.view_class == "other" and explanation.key == []
    caps = capabilities(explanation)
    assert all(caps[k] == (False, "LIMIT/OFFSET is not incrementally maintainable") for k in FAST_KINDS)
    assert caps["REFRESH_COMPLETE"][0]


def test_a_table_without_a_log_rules_out_fast_refresh_and_the_class_comes_from_the_analysis():
    explanation, _ = explained("SELECT status, count(*) AS n FROM orders GROUP BY status", missing=("public.orders",))
    assert explanation.view_class == "aggregate" and explanation.key == []
    caps = capabilities(explanation)
    assert all(caps[k] == (False, "table public.orders has no materialized view log") for k in FAST_KINDS)


def test_its_json_calls_the_view_class_class():
    data = explained("SELECT id, amount FROM orders")[0].to_json()
    assert data["class"] == "simple" and "view_class" not in data
    assert data["key"] == ["id"] and data["next_refresh"] is None
    assert data["capabilities"][1] == {"name": "REFRESH_FAST", "possible": True,
                                       "reason": "changed keys are joined back to the table through its primary key"}
