"""The graph's layout: tables left, each view right of what it reads (pure)."""

from __future__ import annotations

from mvlog.ui.graph import NODE_WIDTH, layout


def test_views_over_views_follow_the_views_they_read():
    drawn = layout(["public.a", "public.b"], {
        "v1": (["public.a"], []),
        "v2": (["public.a", "public.b"], []),
        "v3": (["public.a", "public.b"], ["v2"]),
        "v4": (["public.a", "public.b"], ["v3", "v1"]),
    })
    column = {n.name: n.column for n in drawn.nodes}
    assert column == {"public.a": 0, "public.b": 0, "v1": 1, "v2": 1, "v3": 2, "v4": 3}
    edges = {(e.source, e.target) for e in drawn.edges}
    # a view over views is drawn from them, not again from their tables
    assert edges == {("table:public.a", "view:v1"), ("table:public.a", "view:v2"), ("table:public.b", "view:v2"),
                     ("view:v2", "view:v3"), ("view:v3", "view:v4"), ("view:v1", "view:v4")}
    assert drawn.width >= 4 * NODE_WIDTH


def test_no_two_nodes_overlap_and_edges_run_left_to_right():
    tables = [f"public.t{i}" for i in range(6)]
    views = {f"v{i}": ([tables[i % 6], tables[(i + 1) % 6]], [f"v{i - 1}"] if i % 3 else []) for i in range(30)}
    drawn = layout(tables, views)
    places = {(n.x, n.y) for n in drawn.nodes}
    assert len(places) == len(drawn.nodes) == 36
    by_id = {n.id: n for n in drawn.nodes}
    assert all(by_id[e.source].column < by_id[e.target].column for e in drawn.edges)
    assert all(n.x + NODE_WIDTH <= drawn.width and n.y <= drawn.height for n in drawn.nodes)


def test_views_sit_near_the_tables_they_read():
    drawn = layout(["public.a", "public.b", "public.c"], {"on_c": (["public.c"], []), "on_a": (["public.a"], [])})
    rows = {n.name: n.row for n in drawn.nodes}
    assert rows["on_a"] < rows["on_c"]  # by the rows of what they read, not by name
