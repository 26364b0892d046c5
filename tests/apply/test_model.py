"""The shared catalog facts: tables, logs, refresh methods, snapshot ids."""

from __future__ import annotations

import json

import pytest

from mvlog.errors import SourceError
from mvlog.model import Column, LogInfo, RefreshMethod, TableInfo, checked_snapshot_id, log_name_for


def test_a_log_is_keyed_by_its_tables_primary_key():
    table = TableInfo("Sales", "Order Items!", 4711, (Column("id", "bigint"), Column("line", "int"),
                                                       Column("qty", "int")),
                      (Column("id", "bigint"), Column("line", "int")))
    name = log_name_for(table)
    assert name == "mlog$_order_items_4711"
    log = LogInfo.for_table(table, name)
    assert (log.key_columns, log.key_types, log.qualified_table) == (("id", "line"), ("bigint", "int"),
                                                                     "Sales.Order Items!")


def test_refresh_methods_read_as_their_names():
    assert f"{RefreshMethod.FAST}" == "fast" and RefreshMethod("complete") is RefreshMethod.COMPLETE
    assert json.dumps({"m": RefreshMethod.FORCE}) == '{"m": "force"}'


def test_snapshot_ids_are_checked_before_they_reach_a_statement():
    assert checked_snapshot_id("00000003-0000001B-1") == "00000003-0000001B-1"
    with pytest.raises(SourceError, match="unexpected snapshot id"):
        checked_snapshot_id("1'; DROP TABLE x; --")
