"""Catalog facts shared by the pure tests: two logs, a time, and a shape helper."""

from __future__ import annotations

from datetime import UTC, datetime

from mvlog.model import LogInfo
from mvlog.sql.analysis import analyze
from mvlog.sql.choice import shape_view

LOG = LogInfo("public", "orders", "mlog$_orders_1", ("id",), ("bigint",), 1)
CUSTOMERS = LogInfo("public", "customers", "mlog$_customers_2", ("id",), ("integer",), 2)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def shape(query: str, alias: str = "orders"):
    """The shape of a view over ``orders`` (as ``alias``)."""
    return shape_view("v", analyze(query), {alias: LOG})
