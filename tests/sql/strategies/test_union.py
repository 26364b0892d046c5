"""The strategies of set operations: UNION ALL (and a FULL JOIN's two parts) and UNION (and an
aggregate over a UNION ALL), each branch refreshed by its own strategy (pure, no database)."""

from __future__ import annotations

import sqlglot
from facts import CATALOG, CUSTOMERS, LOG, T0
from sqlglot import exp

from mvlog.sql.analyze.analysis import analyze
from mvlog.sql.pieces.choice import shape_view
from mvlog.sql.strategies.registry import strategy_of
from mvlog.sql.strategies.strategy import RECOMPUTED_NOTE
from mvlog.sql.strategies.union import UnionAll, UnionDistinct

LOGS = {"orders": LOG, "o": LOG, "c": CUSTOMERS, "customers": CUSTOMERS,
        "public.orders": LOG, "public.customers": CUSTOMERS}
ALL = ("SELECT id FROM orders WHERE amount > 5 UNION ALL "
       "SELECT o.id FROM orders o JOIN customers c ON c.id = o.customer_id")


def of(query: str, catalog=None):
    return strategy_of(shape_view("v", analyze(query, catalog), LOGS))


def arms(query: exp.Expr) -> list[exp.Expr]:
    return [*arms(query.this), *arms(query.expression)] if isinstance(query, exp.Union) else [query]


def test_a_union_all_reads_each_branch_by_its_own_strategy_under_its_own_ctes():
    union = of(ALL)
    assert isinstance(union, UnionAll) and not isinstance(union, UnionDistinct)
    assert [type(b).__name__ for b in union.branches] == ["Simple", "Join"]
    assert union.how().startswith("UNION ALL branch 1 (simple): changed keys are joined back")
    assert "; UNION ALL branch 2 (join): view rows involving a changed row" in union.how()
    read = sqlglot.parse_one(union.read_sql(T0, (False, False)), read="postgres")
    assert isinstance(read, exp.Union) and not read.args.get("distinct")
    b1, b2 = (a.args["from_"].this for a in arms(read))
    assert (b1.alias, b2.alias) == ("b1", "b2")
    assert b1.this.args["from_"].this.this.selects[0].sql() == '1 AS "_mvlog_key_0"'  # the branch number
    assert b2.this.args["from_"].this.this.selects[0].sql() == '2 AS "_mvlog_key_0"'
    assert f'"mvlog"."{union.branches[1].shape.keymap}"' in b2.sql(dialect="postgres")


def test_a_union_all_keeps_its_branches_state_and_checks():
    union = of(ALL)
    assert [s.keymap for s in union.keymapped()] == [union.branches[1].shape.keymap]  # the join's only
    assert union.shape.keymap is None and union.branches[1].shape.keymap.endswith("_b2")
    assert union.null_key_checks(T0) == [None, None]
    assert union.state_update(T0) == union.branches[1].state_update(T0)
    assert union.state_rebuild(lambda name: None) == union.branches[1].state_rebuild(lambda name: None)
    assert union.statements(T0) == [union.read_sql(T0, (True, True)), *union.state_update(T0)]


def test_a_full_join_is_refreshed_as_its_two_outer_join_parts():
    full = of("SELECT c.name, o.amount FROM customers c FULL JOIN orders o ON o.customer_id = c.id")
    assert isinstance(full, UnionAll) and [type(b).__name__ for b in full.branches] == ["OuterJoin", "OuterJoin"]
    assert [b.shape.tables[0].alias for b in full.branches] == ["c", "o"]  # each part's root
    assert full.how().startswith("a FULL JOIN is refreshed as two outer-join views that never share a row: "
                                 "the rows holding a row of public.customers (")
    assert "and the rows of public.orders without a partner (" in full.how()


def test_a_union_recomputes_the_affected_rows_from_every_branch_distinct():
    union = of("SELECT id FROM orders UNION SELECT customer_id FROM orders")
    assert isinstance(union, UnionDistinct) and union.shape.key_columns == ("id",)
    assert union.how().startswith("UNION: the output rows that changed rows of any branch yield")
    read = sqlglot.parse_one(union.read_sql(T0), read="postgres")
    affected = read.args["with_"].expressions[0].this
    assert isinstance(affected, exp.Union) and affected.args.get("distinct")
    assert [a.args["from_"].this.alias for a in arms(affected)] == ["b1", "b2"]
    rows = read.args["joins"][0].this.this  # SELECT DISTINCT * over both branches restricted to the keys
    assert rows.args.get("distinct") is not None and rows.args["from_"].this.alias == "u"
    assert len(arms(rows.args["from_"].this.this)) == 2
    (check,) = union.null_key_checks(T0)
    assert check is not None and check.endswith('SELECT EXISTS(SELECT 1 FROM _mvlog_affected_keys WHERE '
                                                '"_mvlog_key_0" IS NULL)')
    assert union.any_dml_note() == ""


def test_an_aggregate_over_a_union_all_recomputes_its_affected_groups_by_the_whole_query():
    over = of("SELECT s.status, sum(s.amount) AS t FROM (SELECT status, amount FROM orders UNION ALL "
              "SELECT name, id FROM customers) s GROUP BY s.status", CATALOG)
    assert isinstance(over, UnionDistinct) and over.shape.over_union
    assert "any branch of the UNION ALL, UNION or SELECT DISTINCT it aggregates" in over.how()
    assert over.any_dml_note() == RECOMPUTED_NOTE
    read = sqlglot.parse_one(over.read_sql(T0), read="postgres")
    rows = read.args["joins"][0].this.this
    assert rows.args["group"].sql(dialect="postgres") == 'GROUP BY "s"."status"'  # the whole query, restricted
    assert '"s"."status" IN (SELECT "_mvlog_key_0" FROM _mvlog_affected_keys)' in rows.sql(dialect="postgres")
