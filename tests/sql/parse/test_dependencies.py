"""Views over views, without a database: which views read which, cycles refused, the closure and
order a refresh follows, and the units that share one snapshot."""

from __future__ import annotations

import pytest

from mvlog.config import ViewConfig
from mvlog.errors import ConfigError
from mvlog.pipeline.lanes import refresh_units
from mvlog.sql.parse.dependencies import ViewGraph, plain_table_names


def views(**queries: str) -> list[ViewConfig]:
    return [ViewConfig(name=name, query=query) for name, query in queries.items()]


CHAIN = views(
    gold="SELECT region, count(*) AS n FROM lines GROUP BY region",
    lines="SELECT o.id, c.region FROM silver o JOIN public.customers c ON c.id = o.customer_id",
    silver="SELECT id, customer_id FROM orders WHERE amount > 0",
    other="SELECT * FROM customers",
)


def test_plain_names_leave_out_ctes_and_qualified_tables():
    query = "WITH silver AS (SELECT 1 AS id) SELECT * FROM silver, public.gold g, Lines, \"Mixed\" m"
    assert plain_table_names(query) == {"lines", "Mixed"}
    assert plain_table_names("SELEC nonsense") == set()


def test_upstreams_closure_and_order():
    graph = ViewGraph.of(CHAIN)
    assert graph.upstreams == {"gold": ("lines",), "lines": ("silver",), "silver": (), "other": ()}
    assert graph.dependents("silver") == ("lines",)
    assert graph.dependents("gold") == ()
    assert graph.downstream(["silver"]) == ["lines", "gold"] and graph.downstream(["other"]) == []
    assert graph.closure(["gold"]) == ["silver", "lines", "gold"]
    assert graph.closure(["lines", "other"]) == ["silver", "lines", "other"]
    assert graph.ordered(["gold", "silver"]) == ["silver", "gold"]
    assert graph.connected("gold", "silver") and not graph.connected("other", "silver")


def test_a_diamond_refreshes_each_view_once_upstreams_first():
    graph = ViewGraph.of(views(
        gold="SELECT a.x FROM left_v a JOIN right_v b ON b.x = a.x",
        left_v="SELECT x FROM base_v", right_v="SELECT x FROM base_v", base_v="SELECT x FROM t"))
    order = graph.closure(["gold"])
    assert sorted(order) == ["base_v", "gold", "left_v", "right_v"]
    assert order[0] == "base_v" and order[-1] == "gold"


@pytest.mark.parametrize("queries, cycle", [
    ({"a": "SELECT * FROM b", "b": "SELECT * FROM c", "c": "SELECT * FROM A"}, "a → b → c → a"),
    ({"orders": "SELECT * FROM orders"}, "orders → orders"),
])
def test_cycles_are_one_error_naming_the_views(queries, cycle):
    with pytest.raises(ConfigError, match=f"views read each other in a cycle: {cycle}"):
        ViewGraph.of(views(**queries))


def test_views_that_read_one_another_are_one_unit_with_upstreams_first():
    graph = ViewGraph.of(CHAIN)
    units = refresh_units(CHAIN, graph)
    assert [[v.name for v in unit] for unit in units] == [["silver", "lines", "gold"], ["other"]]
    grouped = [ViewConfig(name="x", query="SELECT 1 FROM t", group="g"), *CHAIN,
               ViewConfig(name="y", query="SELECT 1 FROM silver", group="g")]
    units = refresh_units(grouped, ViewGraph.of(grouped))
    assert [sorted(v.name for v in unit) for unit in units] == [["gold", "lines", "silver", "x", "y"], ["other"]]
    names = [v.name for v in units[0]]
    assert names.index("silver") < names.index("lines") < names.index("gold")
    assert names.index("silver") < names.index("y")
