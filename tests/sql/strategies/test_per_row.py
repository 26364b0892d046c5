"""The strategies of views keyed by base rows: Simple, Join, OuterJoin, Window (pure, no database)."""

from __future__ import annotations

import sqlglot
from facts import CATALOG, CUSTOMERS, LOG, T0
from sqlglot import exp

from mvlog.sql.analyze.analysis import analyze
from mvlog.sql.pieces.choice import shape_view
from mvlog.sql.strategies.per_row import Join, OuterJoin, Simple, Window
from mvlog.sql.strategies.strategy import KEY_MAP_NOTE

LOGS = {"orders": LOG, "o": LOG, "c": CUSTOMERS}
WINDOW = "SELECT id, rank() OVER (PARTITION BY customer_id ORDER BY amount) AS r FROM orders"


def ctes(statement: str) -> dict[str, str]:
    tree = sqlglot.parse_one(statement, read="postgres")
    return {c.alias: c.this.sql(dialect="postgres") for c in (tree.args["with_"].expressions
                                                             if tree.args.get("with_") else [])}


def of(query: str):
    return shape_view("v", analyze(query), LOGS)


def test_simple_joins_the_changed_keys_back_through_the_primary_key_and_keeps_no_state():
    simple = Simple(of("SELECT id, amount FROM orders WHERE status = 'open'"))
    read = sqlglot.parse_one(simple.read_sql(T0), read="postgres")
    keys, rows = read.args["from_"].this, read.args["joins"][0]
    assert keys.alias == "k" and keys.this.args.get("distinct") is not None  # the window's distinct keys
    assert '"mvlog"."mlog$_orders_1"' in keys.sql(dialect="postgres")
    assert rows.side == "LEFT" and rows.args["on"].sql(dialect="postgres") == '"v"."id" = "k"."_mvlog_key_0"'
    assert "status = 'open'" in rows.this.sql(dialect="postgres")
    assert simple.statements(T0) == [simple.read_sql(T0)] and simple.keymapped() == []


def test_a_join_finds_affected_keys_in_the_base_and_in_its_key_map_and_updates_the_key_map():
    join = Join(of("SELECT o.id, c.name FROM orders o JOIN customers c ON c.id = o.customer_id"))
    affected = ctes(join.read_sql(T0))["_mvlog_affected_keys"]
    assert affected.count("UNION") == 3  # per table: its rows now, and the key map's rows of its changed keys
    assert affected.count(f'FROM "mvlog"."{join.shape.keymap}"') == 2
    assert join.keymapped() == [join.shape] and join.null_key_checks(T0) == [None]
    read, *updates = join.statements(T0)
    assert read == join.read_sql(T0) and updates == join.state_update(T0)
    assert [u.split(" ")[0] for u in updates] == ["DELETE", "DELETE", "INSERT"]
    assert join.how().endswith(KEY_MAP_NOTE)


def test_an_outer_join_finds_its_roots_first_and_matches_null_extended_keys_null_safely():
    outer = OuterJoin(of("SELECT o.id, c.name FROM orders o LEFT JOIN customers c ON c.id = o.customer_id"))
    read = outer.read_sql(T0)
    assert list(ctes(read)) == ["_mvlog_roots", "_mvlog_affected_keys"]
    assert "= ANY(ARRAY(SELECT * FROM _mvlog_roots))" in ctes(read)["_mvlog_affected_keys"]
    on = sqlglot.parse_one(read, read="postgres").args["joins"][0].args["on"].sql(dialect="postgres")
    # the root's key is never NULL; the customer's is where no customer joins
    assert on == '"v"."id" = "k"."_mvlog_key_0" AND "v"."_mvlog_c_id" IS NOT DISTINCT FROM "k"."_mvlog_key_1"'
    assert outer.how().startswith("rows of public.orders (the root, present in every row)")


def test_an_outer_join_over_a_subquery_names_the_subquery_s_table_in_how():
    outer = OuterJoin(shape_view("v", analyze(
        "SELECT c.id, c.name FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id)",
        CATALOG), {"c": CUSTOMERS, "o": LOG}))
    assert outer.shape.outer
    assert "rows of public.orders count for the rows their subquery's condition ties them to" in outer.how()


def test_a_window_recomputes_whole_partitions_and_checks_them_for_null():
    window = Window(of(WINDOW))
    assert "PARTITION BY customer_id" in window.how()
    read = window.read_sql(T0)
    roots = ctes(read)["_mvlog_roots"]  # the partitions of changed rows, now and in the key map
    assert roots.startswith('SELECT customer_id AS "_mvlog_key_0" FROM orders WHERE') and '"_mvlog_k0"' in roots
    rows = sqlglot.parse_one(read, read="postgres").args["joins"][0].this.sql(dialect="postgres")
    assert "WHERE customer_id IN (SELECT * FROM _mvlog_roots)" in rows and "IS NOT DISTINCT FROM" not in rows
    (check,) = window.null_key_checks(T0)
    assert check is not None
    assert check.endswith('SELECT EXISTS(SELECT 1 FROM _mvlog_roots WHERE "_mvlog_key_0" IS NULL)')
    with_nulls = window.read_sql(T0, (True,))
    assert "customer_id IS NULL AND EXISTS" in with_nulls  # the NULL partition's rows, matched null-safely
    statements = window.statements(T0)
    assert statements[0] == read and statements[-2:] == [check, with_nulls]


def test_every_statement_parses_as_postgresql():
    for strategy in (Simple(of("SELECT id FROM orders")), Window(of(WINDOW)),
                     OuterJoin(of("SELECT o.id, c.name FROM orders o LEFT JOIN customers c ON c.id = o.customer_id"))):
        for statement in strategy.statements(T0):
            assert not isinstance(sqlglot.parse_one(statement, read="postgres"), exp.Command)
