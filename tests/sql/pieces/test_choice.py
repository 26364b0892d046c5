"""One strategy per view shape: which one keeps a view, and that each answers what the pipeline
asks (its statements parse, its state is kept and rebuilt) without a database."""

from __future__ import annotations

import pytest
import sqlglot
from facts import CASES, T0, shape_of

from mvlog.sql.strategies.registry import strategy_of


@pytest.mark.parametrize("query, strategy, keymaps", CASES)
def test_each_shape_has_its_strategy_and_its_statements_parse(query, strategy, keymaps):
    chosen = strategy_of(shape_of(query))
    assert type(chosen).__name__ == strategy
    assert len(chosen.keymapped()) == keymaps
    if strategy == "Strategy":
        assert chosen.statements(T0) == [] and "LIMIT" in chosen.how()
        return
    statements = chosen.statements(T0)
    assert statements and chosen.how()
    for statement in statements:
        assert not isinstance(sqlglot.parse_one(statement, read="postgres"), sqlglot.exp.Command)  # parsed, not text
    # the fast read is the first statement (without or, for a union of parts, with the null-safe
    # branches), the read with them among the others when a key may hold a NULL
    with_nulls = chosen.read_sql(T0, (True,) * len(chosen.null_key_checks(T0)))
    assert statements[0] in (chosen.read_sql(T0), with_nulls) and with_nulls in statements
    assert len(chosen.state_update(T0)) >= keymaps


def test_a_complete_refresh_rebuilds_the_state_it_finds_missing_or_changed():
    deltas = strategy_of(shape_of(CASES[3][0]))
    missing = deltas.state_rebuild(lambda name: None)  # nothing there yet: created
    assert any("CREATE" in s.upper() and "keys$" in s for s in missing)
    assert any("groups$" in s for s in missing)
    changed = deltas.state_rebuild(lambda name: ["other"])  # columns that no longer fit: dropped first
    assert changed[0].upper().startswith("DROP TABLE")
    recomputed = strategy_of(shape_of(CASES[4][0]))
    assert any(s.upper().startswith("DROP TABLE IF EXISTS") and "groups$" in s
               for s in recomputed.state_rebuild(lambda name: None))  # a group table left behind goes


def test_aggregate_branches_of_a_union_all_keep_their_own_state_by_deltas():
    union = strategy_of(shape_of("SELECT status, count(*) AS n, sum(amount) AS total FROM orders GROUP BY status "
                                 "UNION ALL SELECT status, count(*) AS n, sum(amount) AS total FROM orders "
                                 "WHERE amount > 5 GROUP BY status"))
    assert [type(b).__name__ for b in union.branches] == ["AggregateByDeltas", "AggregateByDeltas"]  # type: ignore[attr-defined]
    groups = [b.shape.deltas.groups for b in union.branches]  # type: ignore[attr-defined]
    assert groups[0].endswith("_b1") and groups[1].endswith("_b2")
    read = union.read_sql(T0, (False, False))
    tree = sqlglot.parse_one(read, read="postgres")
    assert all(f'"mvlog"."{g}"' in read for g in groups)
    assert len(list(tree.find_all(sqlglot.exp.Union))) >= 1
    assert any("groups$" in s for s in union.state_rebuild(lambda name: None))
