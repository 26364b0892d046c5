"""Set operations and FULL JOIN views shaped as their parts, each with its own key map (pure, no database)."""

from __future__ import annotations

import sqlglot
from facts import CATALOG, CUSTOMERS, LOG, LOGS

from mvlog.sql.analyze.analysis import ViewClass, analyze
from mvlog.sql.pieces import keying, unions
from mvlog.sql.pieces.choice import shape_view


def outputs(select_sql: str) -> list[str]:
    return [p.alias_or_name for p in sqlglot.parse_one(select_sql, read="postgres").selects]


def test_a_full_join_is_a_union_all_of_its_part_with_the_first_table_and_the_other_s_rows_without_a_partner():
    analysis = analyze("SELECT c.name, o.amount FROM customers c FULL JOIN orders o ON o.customer_id = c.id")
    assert keying.has_full_join(analysis)
    s = unions.full_join("v", analysis, LOGS, (CUSTOMERS, LOG), shape_view)
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
    s = unions.union_all("v", analysis, LOGS, (LOG,), shape_view)
    assert s.view_class is ViewClass.UNION and s.hidden_columns == ("_mvlog_branch", "_mvlog_row_key")
    assert [b.deltas.groups[-3:] for b in s.branches if b.deltas] == ["_b1", "_b2"]
    assert outputs(s.branch_selects[1])[-2:] == ["_mvlog_branch", "_mvlog_row_key"]
    assert 'CAST(ROW(status) AS TEXT) AS "_mvlog_row_key"' in s.branch_selects[1]
    nested = unions.union_all("v", analyze("SELECT id FROM orders UNION ALL SELECT c.id FROM customers c "
                                           "FULL JOIN orders o ON o.customer_id = c.id"), LOGS, (LOG, CUSTOMERS),
                              shape_view)
    assert nested.fast_reasons == ("UNION ALL branch 2: a FULL JOIN inside a UNION ALL branch is not incrementally "
                                   "maintainable",)


def test_a_union_is_keyed_by_its_output_row_and_an_aggregate_over_a_union_all_by_its_groups():
    union = unions.union_distinct("v", analyze("SELECT id FROM orders UNION SELECT customer_id AS id FROM orders"),
                                  LOGS, (LOG,), shape_view)
    assert union.distinct and union.key_columns == ("id",) and union.hidden_columns == ()
    assert [b.key_exprs for b in union.branches] == [("id",), ("customer_id",)]
    assert all(b.deltas is None for b in union.branches)
    over = unions.over_union("v", analyze("SELECT s.status, sum(s.amount) AS t FROM (SELECT status, amount FROM orders "
                                          "UNION ALL SELECT name, id FROM customers) s GROUP BY s.status", CATALOG),
                             LOGS, (LOG, CUSTOMERS), shape_view)
    assert over.over_union and over.view_class is ViewClass.AGGREGATE
    assert over.key_columns == ("status",) and over.key_exprs == ('"s"."status"',)
    assert len(over.branches) == 2


def test_a_union_whose_first_branch_cannot_name_or_tell_apart_its_outputs_is_complete_only():
    unnamed = unions.union_distinct("v", analyze("SELECT id + 1 FROM orders UNION SELECT customer_id FROM orders"),
                                    LOGS, (LOG,), shape_view)
    assert unnamed.view_class is ViewClass.OTHER
    assert unnamed.fast_reasons == ("UNION: give every output expression of the first branch a name (AS …)",)
    twice = unions.union_distinct("v", analyze("SELECT id, id FROM orders UNION SELECT customer_id, id FROM orders"),
                                  LOGS, (LOG,), shape_view)
    assert twice.fast_reasons == ("UNION branch 1 outputs one expression twice: not incrementally maintainable yet",)
