"""The registry of strategies: a strategy per kind, the kind read from the shape in one place, and
every state table a strategy keeps named for the catalog (which drops and sizes a view's state by
:func:`~mvlog.sql.strategies.registry.state_names`, without knowing the view's kind)."""

from __future__ import annotations

import pytest
import sqlglot
from facts import CASES, shape_of
from sqlglot import exp
from test_composed import TWO, kept

from mvlog.sql.pieces import topspec
from mvlog.sql.pieces.shape import ShapeKind, ViewShape, kind_of
from mvlog.sql.strategies import topn
from mvlog.sql.strategies.registry import STRATEGIES, state_names, strategy_of
from mvlog.sql.strategies.strategy import Strategy


def test_every_kind_has_one_strategy():
    assert set(STRATEGIES) == set(ShapeKind)
    assert all(issubclass(strategy, Strategy) for strategy in STRATEGIES.values())


def _top_over(full: ViewShape) -> ViewShape:
    names = [p.alias_or_name for p in sqlglot.parse_one(full.select_sql, read="postgres").selects]
    _, spec = topspec.split(f"SELECT * FROM t ORDER BY {names[-1]} DESC LIMIT 3")
    return topn.keep_top(full, spec, topspec.order_of(spec, names), names)


def shapes() -> dict[str, ViewShape]:
    """A shape of every kind (a top-N view over an aggregate, a composed view whose pieces aggregate)."""
    found = {query: shape_of(query) for query, _, _ in CASES}
    found["top-N over an aggregate"] = _top_over(shape_of(CASES[3][0]))
    found["composed"] = kept(TWO)
    found["union of aggregates"] = shape_of(
        "SELECT status, count(*) AS n FROM orders GROUP BY status UNION ALL "
        "SELECT status, count(*) AS n FROM orders WHERE amount > 5 GROUP BY status")
    return found


@pytest.mark.parametrize("name", list(shapes()))
def test_the_kind_read_from_a_shape_picks_its_strategy(name):
    shape = shapes()[name]
    assert type(strategy_of(shape)) is STRATEGIES[kind_of(shape)]


def test_the_shapes_here_cover_every_kind_but_ranges():
    # Ranges' shape needs a catalog (tests/sql/strategies/test_ranges.py builds one by hand).
    assert {kind_of(s) for s in shapes().values()} | {ShapeKind.RANGES} == set(ShapeKind)


def created_tables(strategy: Strategy) -> set[str]:
    """The tables in schema mvlog a strategy's complete-refresh rebuild creates, when none exist."""
    tables = set()
    for statement in strategy.state_rebuild(lambda name: None):
        tree = sqlglot.parse_one(statement, read="postgres")
        if isinstance(tree, exp.Create):
            table = tree.find(exp.Table)
            assert table is not None and table.db == "mvlog", statement
            tables.add(table.name)
    return tables


def uncovered(view: str, tables: set[str]) -> list[str]:
    names = state_names(view)
    return sorted(t for t in tables if not any(t == n or t.startswith(n + "_") for n in names))


@pytest.mark.parametrize("name", list(shapes()))
def test_the_catalog_drops_every_table_a_strategy_keeps(name):
    strategy = strategy_of(shapes()[name])
    tables = created_tables(strategy)
    assert uncovered("v", tables) == []
    assert uncovered("w", tables) == sorted(tables)  # another view's names own none of them


def test_a_strategy_that_forgets_to_name_its_state_leaves_a_table_behind(monkeypatch):
    """The deliberate break: a top-N view's first rows not named: the catalog would never drop them."""
    strategy = strategy_of(shapes()["top-N over an aggregate"])
    tables = created_tables(strategy)
    assert any(t.startswith("top$") for t in tables)
    monkeypatch.setattr(topn.TopRows, "state_names", classmethod(lambda cls, view: []))
    assert [t for t in uncovered("v", tables) if t.startswith("top$")]


def test_a_layered_kind_is_built_over_the_strategies_of_what_it_is_layered_on():
    top = strategy_of(shapes()["top-N over an aggregate"])
    assert type(top).__name__ == "TopRows" and type(top.under).__name__ == "AggregateByDeltas"  # type: ignore[attr-defined]
    composed = strategy_of(kept(TWO))
    assert [type(p).__name__ for p in composed.pieces] == ["AggregateByDeltas"] * 2  # type: ignore[attr-defined]


def test_state_names_are_unique_and_every_strategy_is_asked():
    names = state_names("v")
    assert len(names) == len(set(names))
    assert {n.split("$")[0] for n in names} == {"keys", "groups", "top", "param", "inner", "outer"}
