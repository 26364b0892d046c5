"""The graph of the project laid out left to right (pure): logged tables in the first column,
each view one column right of the furthest thing it reads, so that views over views follow the
views they read. Within a column, nodes are ordered by the mean row of what they read (one
sweep of the barycentre rule, which keeps most edges from crossing), then by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

NODE_WIDTH = 230
NODE_HEIGHT = 58
COLUMN_GAP = 90
ROW_GAP = 18
MARGIN = 16


@dataclass
class Node:
    """A table or a view, with where it is drawn."""

    id: str  # "table:public.orders" or "view:open_orders"
    kind: str  # "table" | "view"
    name: str
    column: int = 0
    row: int = 0
    reads: list[str] = field(default_factory=list)  # ids of the nodes it reads

    @property
    def x(self) -> int:
        return MARGIN + self.column * (NODE_WIDTH + COLUMN_GAP)

    @property
    def y(self) -> int:
        return MARGIN + self.row * (NODE_HEIGHT + ROW_GAP)


@dataclass(frozen=True)
class Edge:
    """From what is read to what reads it, as an SVG path."""

    source: str
    target: str
    path: str


@dataclass(frozen=True)
class Layout:
    nodes: list[Node]
    edges: list[Edge]
    width: int
    height: int


def table_id(name: str) -> str:
    return f"table:{name}"


def view_id(name: str) -> str:
    return f"view:{name}"


def layout(tables: list[str], views: dict[str, tuple[list[str], list[str]]]) -> Layout:
    """Lay out ``tables`` and ``views`` (name -> (base tables it reads, views of the project it reads))."""
    nodes = {table_id(t): Node(table_id(t), "table", t) for t in tables}
    for name, (base, upstream) in views.items():
        reads = [view_id(u) for u in upstream if u in views]
        # a view over views draws its edges from them, not again from their tables
        inherited = {t for u in upstream if u in views for t in views[u][0]}
        reads += [table_id(t) for t in base if t not in inherited and table_id(t) in nodes]
        nodes[view_id(name)] = Node(view_id(name), "view", name, reads=reads)
    columns_of: dict[str, int] = {}
    for node in nodes.values():
        node.column = _column(node, nodes, set(), columns_of)
    columns: dict[int, list[Node]] = {}
    for node in sorted(nodes.values(), key=lambda n: n.name):
        columns.setdefault(node.column, []).append(node)
    for column in sorted(columns):
        members = columns[column]
        if column > 0:
            members.sort(key=lambda n: (_mean_row(n, nodes), n.name))
        for row, node in enumerate(members):
            node.row = row
    edges = [Edge(source, node.id, _curve(nodes[source], node)) for node in nodes.values() for source in node.reads]
    width = max((n.x + NODE_WIDTH for n in nodes.values()), default=0) + MARGIN
    height = max((n.y + NODE_HEIGHT for n in nodes.values()), default=0) + MARGIN
    return Layout(list(nodes.values()), edges, width, height)


def _column(node: Node, nodes: dict[str, Node], seen: set[str], memo: dict[str, int]) -> int:
    """One column right of the furthest thing ``node`` reads (``memo``: columns found so far)."""
    if node.kind == "table":
        return 0
    if node.id in seen:  # a cycle (refused at apply): keep it finite
        return 1
    if node.id not in memo:
        memo[node.id] = 1 + max((_column(nodes[r], nodes, seen | {node.id}, memo) for r in node.reads), default=0)
    return memo[node.id]


def _mean_row(node: Node, nodes: dict[str, Node]) -> float:
    rows = [nodes[r].row for r in node.reads if nodes[r].column < node.column]
    return sum(rows) / len(rows) if rows else 0.0


def _curve(source: Node, target: Node) -> str:
    x1, y1 = source.x + NODE_WIDTH, source.y + NODE_HEIGHT // 2
    x2, y2 = target.x, target.y + NODE_HEIGHT // 2
    bend = (x2 - x1) / 2
    return f"M{x1},{y1} C{x1 + bend},{y1} {x2 - bend},{y2} {x2},{y2}"
