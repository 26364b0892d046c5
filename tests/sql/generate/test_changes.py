"""What a fast refresh starts from, as SQL: the window's changed keys, the rows they touch, an
outer-join view's affected roots (pure, no database)."""

from __future__ import annotations

import sqlglot
from facts import CUSTOMERS, LOG, T0, shape
from sqlglot import exp

from mvlog.sql.analyze.analysis import analyze
from mvlog.sql.generate import changes
from mvlog.sql.pieces.choice import shape_view

OUTER = "SELECT c.name, o.amount FROM customers c LEFT JOIN orders o ON o.customer_id = c.id"


def sql(node: exp.Expr) -> str:
    return node.sql(dialect="postgres")


def arms(query: exp.Expr) -> list[exp.Expr]:
    """A UNION's branches, in order."""
    return [*arms(query.this), *arms(query.expression)] if isinstance(query, exp.Union) else [query]


def test_changed_keys_are_the_distinct_keys_of_rows_logged_after_the_window_start():
    keys = changes.changed_keys_sql(LOG, T0)
    assert keys.args.get("distinct") is not None
    assert [p.alias for p in keys.selects] == ["_mvlog_key_0"]
    assert sql(keys.args["from_"].this) == '"mvlog"."mlog$_orders_1"'
    where = sql(keys.args["where"].this)
    assert where == ("\"dmltype$$\" IN ('I', 'U', 'D') AND \"snaptime$$\" > "
                     "CAST('2026-01-01T00:00:00+00:00' AS TIMESTAMPTZ)")  # no T (truncate) or P rows
    since_ever = changes.changed_keys_sql(LOG, None, ["k"])
    assert [p.alias for p in since_ever.selects] == ["k"] and "snaptime$$" not in sql(since_ever)


def test_the_change_s_size_counts_its_distinct_keys():
    count = sqlglot.parse_one(changes.changed_key_count_sql(LOG, T0), read="postgres")
    assert sql(count.selects[0]) == "COUNT(*)"
    assert isinstance(count.args["from_"].this, exp.Subquery)
    assert count.args["from_"].this.this.args.get("distinct") is not None


def test_keys_match_as_row_texts_and_in_parenthesizes_expressions():
    match = changes.keys_match(["a", "b"], "k", "r")
    assert sql(match) == ('CAST(ROW("k"."_mvlog_key_0", "k"."_mvlog_key_1") AS TEXT) = '
                          'CAST(ROW("r"."a", "r"."b") AS TEXT)')
    query = exp.select("x").from_("t")
    assert sql(changes.in_query([exp.column("a"), exp.column("b")], query)) == "(a, b) IN (SELECT x FROM t)"
    compared = exp.GT(this=exp.column("amount"), expression=exp.Literal.number(50))
    assert sql(changes.in_query([compared], query)) == "(amount > 50) IN (SELECT x FROM t)"


def test_a_log_read_as_a_query_keeps_its_alias_and_other_tables_stay():
    statement = 'SELECT * FROM mvlog."mlog$_orders_1" AS l JOIN mvlog.other AS o ON TRUE'
    late = exp.select(exp.alias_(exp.Literal.number(1), "id"))
    tree = sqlglot.parse_one(changes.read_logs_as(statement, {"mlog$_orders_1": late}), read="postgres")
    source = tree.args["from_"].this
    assert isinstance(source, exp.Subquery) and source.alias == "l" and sql(source.this) == "SELECT 1 AS id"
    assert [t.name for t in tree.find_all(exp.Table)] == ["other"]
    rows = changes.log_rows(LOG)
    assert [p.alias_or_name for p in rows.selects] == ["id", "snaptime$$", "dmltype$$", "old_new$$", "xact_time$$"]


def test_the_key_map_of_an_aggregate_holds_base_keys_groups_and_inputs():
    s = shape("SELECT status, count(amount) AS n, sum(priority) AS p FROM orders GROUP BY status")
    assert changes.keymap_key_columns(s) == ["_mvlog_k0"]
    items = [sql(i) for i in changes.keymap_items(s)]
    assert items[:2] == ['"orders"."id" AS "_mvlog_r0_0"', 'status AS "_mvlog_k0"']
    # a counted-only input is kept as 1 or 0, a summed one as its value
    assert items[2] == 'CASE WHEN (amount) IS NULL THEN 0 ELSE 1 END AS "_mvlog_a0"'
    assert items[3] == 'priority AS "_mvlog_a1"'


def test_touched_rows_have_one_branch_per_table_restricted_to_its_changed_keys():
    join = shape_view("v", analyze("SELECT o.id, c.name FROM orders o JOIN customers c ON c.id = o.customer_id"),
                      {"o": LOG, "c": CUSTOMERS})
    assert changes.keymap_key_columns(join) == ["_mvlog_r0_0", "_mvlog_r1_0"]  # keyed by the base keys
    touched = changes.touched_rows(join, [exp.column("id", "o")], T0)
    assert isinstance(touched, exp.Union) and touched.args.get("distinct")
    by_orders, by_customers = (sql(b.args["where"]) for b in arms(touched))
    assert by_orders.startswith('WHERE "o"."id" IN') and "mlog$_orders_1" in by_orders
    assert by_customers.startswith('WHERE "c"."id" IN') and "mlog$_customers_2" in by_customers


def test_an_outer_join_s_roots_are_its_changed_roots_and_the_roots_of_changed_partners_now_and_before():
    s = shape_view("v", analyze(OUTER), {"o": LOG, "c": CUSTOMERS})
    roots = changes.roots_sql(s, T0)
    assert isinstance(roots, exp.Union) and roots.args.get("distinct")
    own, now, before = (sql(b) for b in arms(roots))
    assert own.startswith('SELECT DISTINCT "id" AS "_mvlog_r0_0" FROM "mvlog"."mlog$_customers_2"')
    assert now.startswith('SELECT "c"."id" AS "_mvlog_r0_0" FROM customers AS c LEFT JOIN orders')
    assert '"o"."id" IN (SELECT DISTINCT "id" AS "_mvlog_key_0" FROM "mvlog"."mlog$_orders_1"' in now
    assert before.startswith(f'SELECT "_mvlog_r0_0" FROM "mvlog"."{s.keymap}" WHERE "_mvlog_r1_0" IN')


def test_one_root_key_is_matched_by_any_of_an_array_several_by_in():
    one = changes.in_roots([exp.column("id", "c")])
    assert sql(one) == "c.id = ANY(ARRAY(SELECT * FROM _mvlog_roots))"
    two = changes.in_roots([exp.column("id", "c"), exp.column("x", "c")])
    assert sql(two) == "(c.id, c.x) IN (SELECT * FROM _mvlog_roots)"
