"""The SQL a refresh pushes down to PostgreSQL (pure, no database)."""

from __future__ import annotations

import dataclasses

import sqlglot
from facts import CATALOG, CUSTOMERS, LOG, LOGS, T0, shape

from mvlog.config import RefreshMethod
from mvlog.pipeline.plan import plan_refresh
from mvlog.sql.analyze.analysis import analyze
from mvlog.sql.generate import changes, keymap
from mvlog.sql.pieces.choice import shape_view
from mvlog.sql.strategies.registry import strategy_of


def test_fast_sql_restricts_the_view_to_changed_keys_in_the_window():
    s = shape("SELECT o.amount FROM public.orders o WHERE o.status = 'open'", alias="o")
    plan = plan_refresh(s, "/wh/v", RefreshMethod.FORCE, T0, None, True)
    assert plan.method == "fast"
    text = plan.read_sql()
    assert isinstance(sqlglot.parse_one(text, read="postgres"), sqlglot.exp.Select)  # valid SQL, a query
    assert '"mvlog"."mlog$_orders_1"' in text
    assert "SELECT DISTINCT" in text and "LEFT JOIN" in text
    assert "\"snaptime$$\" > CAST('2026-01-01T00:00:00+00:00' AS TIMESTAMPTZ)" in text
    assert "\"snaptime$$\" <=" not in text  # at the stamp's snapshot nothing above S is visible
    assert "\"dmltype$$\" IN ('I', 'U', 'D')" in text
    assert '"v"."_mvlog_id" = "k"."_mvlog_key_0"' in text


def test_keyed_fast_sql_joins_on_plain_equality_so_postgresql_can_hash_it():
    # IS NOT DISTINCT FROM cannot be hashed: a 95k-key read ran > 20 min in a nested loop.
    join = shape_view("v", analyze("SELECT c.name, o.amount FROM customers c JOIN orders o ON o.customer_id = c.id"),
                      {"c": CUSTOMERS, "o": LOG})
    # groups recomputed (this view would be kept by deltas: see test_aggdelta)
    grouped = dataclasses.replace(shape("SELECT status, count(*) AS n FROM orders GROUP BY status"), deltas=None)
    for s in (join, grouped):
        assert "DISTINCT FROM" not in strategy_of(s).read_sql(T0).upper()
    # A NULL group key takes its own null-safe branch, restricted to rows with a NULL key.
    with_nulls = sqlglot.parse_one(strategy_of(grouped).read_sql(T0, (True,)), read="postgres")
    branches = list(with_nulls.find_all(sqlglot.exp.Join))
    assert len(branches) == 2
    null_safe = [b for b in branches if b.find(sqlglot.exp.NullSafeEQ)]
    assert len(null_safe) == 1
    restricted = null_safe[0].this.this  # the right side: the view restricted to NULL keys
    assert restricted.args["where"].find(sqlglot.exp.Is) is not None
    # ... and opened by a condition on the affected keys alone (PostgreSQL's One-Time Filter), so
    # that where no affected key holds a NULL it reads nothing and needs no check run first.
    gate = next(restricted.args["where"].this.flatten())
    assert isinstance(gate, sqlglot.exp.Exists) and not gate.find(sqlglot.exp.NullSafeEQ)
    assert {t.name for t in gate.find_all(sqlglot.exp.Table)} == {changes.AFFECTED}


def test_an_outer_join_view_is_read_by_its_roots():
    s = shape_view("v", analyze("SELECT o.id, c.name FROM orders o LEFT JOIN customers c ON c.id = o.customer_id"),
                   {"c": CUSTOMERS, "o": LOG})
    read = strategy_of(s).read_sql(T0)
    tree = sqlglot.parse_one(read, read="postgres")
    assert [cte.alias for cte in tree.find_all(sqlglot.exp.CTE)] == [changes.ROOTS, changes.AFFECTED]
    # Hashed on the root's key, which is never NULL; null-safe only for the NULL-extended side.
    assert '"v"."id" = "k"."_mvlog_key_0" AND "v"."_mvlog_c_id" IS NOT DISTINCT FROM "k"."_mvlog_key_1"' in read
    (update,) = keymap.keymap_update_sql(s, T0)  # one statement: the roots are found before the map changes
    assert update.startswith('WITH "_mvlog_roots" AS (') and "AS (DELETE FROM" in update and "INSERT INTO" in update


def test_a_group_key_that_cannot_be_null_is_matched_by_equality_in_the_null_safe_branch():
    """IS NOT DISTINCT FROM cannot be hashed: where another key holds a NULL (TPC-DS's c_login in
    every customer row), a key that is a NOT NULL column is matched by = so PostgreSQL hashes it."""
    from mvlog.model import Column, TableInfo

    orders = TableInfo("public", "orders", 1, (Column("id", "integer", True), Column("customer_id", "integer"),
                                                Column("amount", "integer"), Column("status", "integer", True)),
                       (Column("id", "integer"),))
    query = "SELECT o.status, o.customer_id, stddev(o.amount) AS s FROM orders o GROUP BY o.status, o.customer_id"
    s = shape_view("v", analyze(query, {(None, "orders"): orders}), {"o": LOG})
    assert s.null_free_keys == (True, False)
    strategy = strategy_of(s)
    read = strategy.read_sql(T0, strategy.null_safe(T0))
    assert 'o.status = "_mvlog_affected"."_mvlog_key_0"' in read
    assert 'o.customer_id IS NOT DISTINCT FROM "_mvlog_affected"."_mvlog_key_1"' in read
    assert 'o.status IS NULL' not in read  # never NULL: only customer_id marks a row of the branch
    unqualified = analyze("SELECT status, customer_id, stddev(amount) AS s FROM orders GROUP BY status, customer_id",
                          {(None, "orders"): orders})
    assert shape_view("v", unqualified, {"orders": LOG}).null_free_keys == (True, False)
    both = shape_view("v", analyze("SELECT o.status, o.id, stddev(o.amount) AS s FROM orders o GROUP BY o.status, o.id",
                                   {(None, "orders"): orders}), {"o": LOG})
    assert both.null_free_keys == (True, True) and strategy_of(both).null_key_checks(T0) == [None]
    outer = shape_view("v", analyze("SELECT o.status, count(c.id) AS n FROM orders o LEFT JOIN customers c "
                                    "ON c.id = o.customer_id GROUP BY o.status", CATALOG), LOGS)
    assert outer.null_free_keys == (True,)  # the LEFT JOIN's preserved side is never NULL-extended
    for joined in ("SELECT c.id AS k, count(o.id) AS n FROM orders o LEFT JOIN customers c ON c.id = o.customer_id "
                   "GROUP BY c.id",  # the NULL-extended side: its NOT NULL key is NULL where no customer matches
                   "SELECT o.status, count(c.id) AS n FROM orders o RIGHT JOIN customers c ON c.id = o.customer_id "
                   "GROUP BY o.status"):
        assert shape_view("v", analyze(joined, CATALOG), LOGS).null_free_keys == (False,), joined
    # kept by deltas: the group table's row of a NULL-holding key found by = on the keys that cannot be NULL
    summed = shape_view("v", analyze("SELECT o.status, o.customer_id, sum(o.amount) AS s FROM orders o "
                                     "GROUP BY o.status, o.customer_id", {(None, "orders"): orders}), {"o": LOG})
    deltas = strategy_of(summed).read_sql(T0)
    assert '"_mvlog_k0" IS NOT DISTINCT FROM "d"."_mvlog_k0"' not in deltas, deltas
    assert deltas.count('"_mvlog_k0" = "d"."_mvlog_k0"') == 2  # in both parts of the lookup
    assert '"_mvlog_k1" IS NOT DISTINCT FROM "d"."_mvlog_k1"' in deltas
    unqualified_outer = ("SELECT status, name, count(c.id) AS n FROM orders o LEFT JOIN customers c "
                         "ON c.id = o.customer_id GROUP BY status, name")  # status: orders'; name: customers'
    assert shape_view("v", analyze(unqualified_outer, CATALOG), LOGS).null_free_keys == (True, False)


def test_a_group_column_its_table_s_key_determines_is_left_out_of_the_read_s_match():
    """q39's ``(w_warehouse_name, w_warehouse_sk)``: PostgreSQL estimated one row a key for the match
    on both (48 s at SF 1, 3.5 s on the key alone). The name is matched null-safely in the join from
    the affected keys, so a NULL name needs no null-safe part of its own."""
    from mvlog.model import Column, TableInfo

    customers = TableInfo("public", "customers", 2, (Column("id", "integer", True), Column("name", "text")),
                          (Column("id", "integer"),))
    catalog = {**CATALOG, (None, "customers"): customers}
    query = ("SELECT c.name, c.id, o.status, stddev(o.amount) AS s FROM orders o JOIN customers c "
             "ON c.id = o.customer_id GROUP BY c.name, c.id, o.status")
    s = shape_view("v", analyze(query, catalog), LOGS)
    assert s.determined_keys == (True, False, False) and s.null_free_keys == (False, True, True)
    strategy = strategy_of(s)
    assert strategy.null_key_checks(T0) == [None]  # the only nullable key is determined
    read = strategy.read_sql(T0, strategy.null_safe(T0))
    assert '(c.id, o.status) IN (SELECT "_mvlog_key_1", "_mvlog_key_2" FROM _mvlog_affected_keys)' in read, read
    assert '"v"."name" IS NOT DISTINCT FROM "k"."_mvlog_key_0" AND "v"."id" = "k"."_mvlog_key_1"' in read
    assert "UNION ALL" not in read  # no null-safe part
    unqualified = ("SELECT name, c.id, status, stddev(amount) AS s FROM orders o JOIN customers c "
                   "ON c.id = o.customer_id GROUP BY name, c.id, status")
    assert shape_view("v", analyze(unqualified, catalog), LOGS).determined_keys == (True, False, False)
    # the outer join's NULL-extended side: its key is NULL where its name is (still determined)
    outer = query.replace("JOIN customers", "LEFT JOIN customers")
    assert shape_view("v", analyze(outer, catalog), LOGS).determined_keys == (True, False, False)
    # not the table's key, an expression of it, or an unqualified column without the catalog: matched as before
    for other, known in ((query.replace("c.id", "o.customer_id"), catalog),
                         (query.replace("GROUP BY c.name", "GROUP BY upper(c.name)").replace(
                             "SELECT c.name", "SELECT upper(c.name)"), catalog),
                         (unqualified, None)):
        assert not any(shape_view("v", analyze(other, known), LOGS).determined_keys), other
