"""One builder per view shape: the analysis and the logs give the view's key, its hidden columns,
its key map and lineage (pure, no database)."""

from __future__ import annotations

import sqlglot
from facts import CATALOG, CUSTOMERS, LOG

from mvlog.model import LogInfo
from mvlog.sql.analyze.analysis import ViewClass, analyze
from mvlog.sql.pieces import keying
from mvlog.sql.pieces.choice import shape_view

LOGS = {"orders": LOG, "o": LOG, "c": CUSTOMERS, "customers": CUSTOMERS,
        "public.orders": LOG, "public.customers": CUSTOMERS}
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


def test_a_full_join_is_a_union_all_of_its_part_with_the_first_table_and_the_other_s_rows_without_a_partner():
    analysis = analyze("SELECT c.name, o.amount FROM customers c FULL JOIN orders o ON o.customer_id = c.id")
    assert keying.has_full_join(analysis)
    s = keying.full_join("v", analysis, LOGS, (CUSTOMERS, LOG), shape_view)
    assert s.full_join and s.view_class is ViewClass.JOIN and s.key_columns == ("_mvlog_branch", "_mvlog_row_key")
    first, second = s.branches
    assert (first.tables[0].alias, second.tables[0].alias) == ("c", "o")  # each part's root
    assert first.keymap and first.keymap.endswith("_b1") and second.keymap and second.keymap.endswith("_b2")
    assert s.branch_selects[1].endswith('RIGHT JOIN orders AS o ON o.customer_id = c.id WHERE "c"."id" IS NULL')
    left = analyze("SELECT c.name FROM customers c LEFT JOIN orders o ON o.customer_id = c.id")
    assert not keying.has_full_join(left)


def test_union_all_branches_keep_their_own_key_maps_and_group_tables():
    analysis = analyze("SELECT status, count(*) AS n FROM orders GROUP BY status UNION ALL "
                       "SELECT status, count(*) AS n FROM orders WHERE amount > 1 GROUP BY status")
    s = keying.union_all("v", analysis, LOGS, (LOG,), shape_view)
    assert s.view_class is ViewClass.UNION and s.hidden_columns == ("_mvlog_branch", "_mvlog_row_key")
    assert [b.deltas.groups[-3:] for b in s.branches if b.deltas] == ["_b1", "_b2"]
    assert outputs(s.branch_selects[1])[-2:] == ["_mvlog_branch", "_mvlog_row_key"]
    assert 'CAST(ROW(status) AS TEXT) AS "_mvlog_row_key"' in s.branch_selects[1]
    nested = keying.union_all("v", analyze("SELECT id FROM orders UNION ALL SELECT c.id FROM customers c "
                                           "FULL JOIN orders o ON o.customer_id = c.id"), LOGS, (LOG, CUSTOMERS),
                              shape_view)
    assert nested.fast_reasons == ("UNION ALL branch 2: a FULL JOIN inside a UNION ALL branch is not incrementally "
                                   "maintainable",)


def test_a_union_is_keyed_by_its_output_row_and_an_aggregate_over_a_union_all_by_its_groups():
    union = keying.union_distinct("v", analyze("SELECT id FROM orders UNION SELECT customer_id AS id FROM orders"),
                                  LOGS, (LOG,), shape_view)
    assert union.distinct and union.key_columns == ("id",) and union.hidden_columns == ()
    assert [b.key_exprs for b in union.branches] == [("id",), ("customer_id",)]
    assert all(b.deltas is None for b in union.branches)
    over = keying.over_union("v", analyze("SELECT s.status, sum(s.amount) AS t FROM (SELECT status, amount FROM orders "
                                          "UNION ALL SELECT name, id FROM customers) s GROUP BY s.status", CATALOG),
                             LOGS, (LOG, CUSTOMERS), shape_view)
    assert over.over_union and over.view_class is ViewClass.AGGREGATE
    assert over.key_columns == ("status",) and over.key_exprs == ('"s"."status"',)
    assert len(over.branches) == 2


def test_a_union_whose_first_branch_cannot_name_or_tell_apart_its_outputs_is_complete_only():
    unnamed = keying.union_distinct("v", analyze("SELECT id + 1 FROM orders UNION SELECT customer_id FROM orders"),
                                    LOGS, (LOG,), shape_view)
    assert unnamed.view_class is ViewClass.OTHER
    assert unnamed.fast_reasons == ("UNION: give every output expression of the first branch a name (AS …)",)
    twice = keying.union_distinct("v", analyze("SELECT id, id FROM orders UNION SELECT customer_id, id FROM orders"),
                                  LOGS, (LOG,), shape_view)
    assert twice.fast_reasons == ("UNION branch 1 outputs one expression twice: not incrementally maintainable yet",)
