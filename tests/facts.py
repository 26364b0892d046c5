"""Catalog facts shared by the pure tests: two logs, a time, and a shape helper."""

from __future__ import annotations

from datetime import UTC, datetime

from mvlog.model import Column, LogInfo, TableInfo
from mvlog.sql.analyze.analysis import analyze
from mvlog.sql.pieces.choice import shape_view

LOG = LogInfo("public", "orders", "mlog$_orders_1", ("id",), ("bigint",), 1)
CUSTOMERS = LogInfo("public", "customers", "mlog$_customers_2", ("id",), ("integer",), 2)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def shape(query: str, alias: str = "orders"):
    """The shape of a view over ``orders`` (as ``alias``)."""
    return shape_view("v", analyze(query), {alias: LOG})


# (query, the strategy that keeps it, its key maps): a view of each kind over orders and customers
CASES = [
    ("SELECT id, amount FROM orders WHERE status = 'open'", "Simple", 0),
    ("SELECT o.id, c.name FROM orders o JOIN customers c ON c.id = o.customer_id", "Join", 1),
    ("SELECT o.id, c.name FROM orders o LEFT JOIN customers c ON c.id = o.customer_id", "OuterJoin", 1),
    ("SELECT status, count(*) AS n, sum(amount) AS total FROM orders GROUP BY status", "AggregateByDeltas", 1),
    ("SELECT status, stddev(amount) AS s FROM orders GROUP BY status", "AggregateRecomputed", 1),
    ("SELECT c.name, count(o.id) AS n FROM customers c LEFT JOIN orders o ON o.customer_id = c.id GROUP BY c.name",
     "OuterAggregate", 1),
    ("SELECT count(*) AS n FROM orders", "GlobalAggregate", 0),
    ("SELECT id, rank() OVER (PARTITION BY customer_id ORDER BY amount) AS r FROM orders", "Window", 1),
    ("SELECT id FROM orders WHERE amount > 5 UNION ALL SELECT id FROM orders WHERE amount < 1", "UnionAll", 0),
    ("SELECT id FROM orders UNION SELECT customer_id FROM orders", "UnionDistinct", 2),
    ("SELECT id FROM orders LIMIT 3", "Strategy", 0),
]
LOGS = {"orders": LOG, "o": LOG, "c": CUSTOMERS, "customers": CUSTOMERS,
        "public.orders": LOG, "public.customers": CUSTOMERS}


def shape_of(query: str):
    """The shape of a view ``v`` over orders and customers."""
    return shape_view("v", analyze(query), LOGS)


def table(name: str, columns: list[str], oid: int) -> TableInfo:
    """A table of integer columns, keyed by its first."""
    return TableInfo("public", name, oid, tuple(Column(c, "integer", True) for c in columns),
                     (Column(columns[0], "integer"),))


# A catalog of three tables, for the rewrites that need the columns (``analyze(query, CATALOG)``)
CATALOG = {(None, "orders"): table("orders", ["id", "customer_id", "amount", "status"], 1),
           (None, "customers"): table("customers", ["id", "nation_id", "name"], 2),
           (None, "nation"): table("nation", ["id", "name"], 3)}
