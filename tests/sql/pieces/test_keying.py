"""One builder per view shape: the analysis and the logs give the view's key, its hidden columns,
its key map and lineage (pure, no database)."""

from __future__ import annotations

import sqlglot
from facts import CUSTOMERS, LOG, LOGS

from mvlog.model import LogInfo
from mvlog.sql.analyze.analysis import ViewClass, analyze
from mvlog.sql.pieces import keying

LINES = LogInfo("public", "lines", "mlog$_lines_3", ("order_id", "line"), ("bigint", "integer"), 3)


def outputs(select_sql: str) -> list[str]:
    return [p.alias_or_name for p in sqlglot.parse_one(select_sql, read="postgres").selects]


def test_a_simple_view_is_keyed_by_its_primary_key_as_output_or_hidden():
    hidden = keying.simple("v", analyze("SELECT amount FROM orders WHERE status = 'x'"), LOGS, (LOG,))
    assert hidden.view_class is ViewClass.SIMPLE and hidden.key_columns == hidden.hidden_columns == ("_mvlog_id",)
    assert outputs(hidden.select_sql) == ["amount", "_mvlog_id"]
    assert hidden.range_key is not None and (hidden.range_key.column, hidden.range_key.base_column) == (
        "_mvlog_id", "id")
    renamed = keying.simple("v", analyze("SELECT id AS order_id, amount FROM orders"), LOGS, (LOG,))
    assert renamed.key_columns == ("order_id",) and renamed.hidden_columns == ()
    pair = keying.simple("v", analyze("SELECT line, amount FROM lines"), {"lines": LINES}, (LINES,))
    assert pair.key_columns == ("_mvlog_order_id", "line") and pair.hidden_columns == ("_mvlog_order_id",)


def test_a_join_is_keyed_by_every_table_s_key_and_maps_them_in_its_key_map():
    s = keying.keyed("v", analyze("SELECT o.id, c.name FROM orders o JOIN customers c ON c.id = o.customer_id"),
                     LOGS, (LOG, CUSTOMERS), aggregate=False)
    assert s.key_columns == ("id", "_mvlog_c_id") and s.hidden_columns == ("_mvlog_c_id",)
    assert s.key_exprs == ('"o"."id"', '"c"."id"') and s.row_keyed and not s.outer
    assert [(t.alias, t.keymap_columns) for t in s.tables] == [("o", ("_mvlog_r0_0",)), ("c", ("_mvlog_r1_0",))]
    assert s.core_sql == "SELECT 1 FROM orders AS o JOIN customers AS c ON c.id = o.customer_id"
    assert s.keymap is not None and s.keymap.startswith("keys$_v_")
    # a key output twice under one name is hidden the second time
    twice = keying.keyed("v", analyze("SELECT o.id, c.id FROM orders o JOIN customers c ON c.id = o.customer_id"),
                         LOGS, (LOG, CUSTOMERS), aggregate=False)
    assert twice.key_columns == ("id", "_mvlog_c_id")


def test_an_aggregate_is_keyed_by_its_groups_and_a_global_one_by_a_constant():
    s = keying.keyed("v", analyze("SELECT upper(status) AS s, count(*) AS n FROM orders "
                                  "GROUP BY upper(status), customer_id"), LOGS, (LOG,), aggregate=True)
    assert s.key_columns == ("s", "_mvlog_g1") and s.hidden_columns == ("_mvlog_g1",)
    assert s.key_exprs == ("UPPER(status)", "customer_id") and not s.row_keyed
    assert s.range_key is None  # its first group is not a column
    assert s.deltas is not None and s.recompute_reason is None
    total = keying.keyed("v", analyze("SELECT count(*) AS n FROM orders"), LOGS, (LOG,), aggregate=True)
    assert total.global_aggregate and total.key_columns == ("_mvlog_group",) and total.key_exprs == ("TRUE",)
    assert total.range_key is None


def test_an_aggregate_over_an_outer_join_is_recomputed_and_grouped_by_a_column_ranged_by_it():
    s = keying.keyed("v", analyze("SELECT c.name, count(o.id) AS n FROM customers c LEFT JOIN orders o "
                                  "ON o.customer_id = c.id GROUP BY c.name"), LOGS, (CUSTOMERS, LOG), aggregate=True)
    assert s.outer and s.deltas is None
    assert s.recompute_reason == "an aggregate over outer joins or subqueries is recomputed per affected group"
    assert s.range_key is not None
    assert (s.range_key.log, s.range_key.base_column, s.range_key.grouped) == (CUSTOMERS, "name", True)


def test_a_window_view_maps_base_rows_to_their_partition():
    s = keying.window("v", analyze("SELECT id, rank() OVER (PARTITION BY customer_id ORDER BY amount) AS r "
                                   "FROM orders"), LOGS, (LOG,))
    assert s.view_class is ViewClass.WINDOW and s.partition_exprs == ("customer_id",)
    assert s.key_columns == ("_mvlog_orders_id",)  # an unqualified id is not taken for the key
    assert outputs(s.select_sql) == ["id", "r", "_mvlog_orders_id"]


def test_a_complete_only_view_keeps_the_query_and_its_reasons():
    s = keying.complete_only("v", analyze("SELECT id FROM orders LIMIT 2;"), (LOG,))
    assert s.select_sql == "SELECT id FROM orders LIMIT 2" and not s.fast_possible
    assert s.fast_reasons == ("LIMIT/OFFSET is not incrementally maintainable",) and s.key_columns == ()
