"""The strategies of aggregates: kept by deltas, recomputed per group (over inner or outer joins),
and the one row of a global aggregate (pure, no database)."""

from __future__ import annotations

import sqlglot
from facts import CUSTOMERS, LOG, T0
from sqlglot import exp

from mvlog.sql.analyze.analysis import analyze
from mvlog.sql.generate import aggdelta, keymap
from mvlog.sql.pieces.choice import shape_view
from mvlog.sql.strategies.per_group import AggregateByDeltas, AggregateRecomputed, GlobalAggregate, OuterAggregate
from mvlog.sql.strategies.strategy import RECOMPUTED_NOTE

LOGS = {"orders": LOG, "o": LOG, "c": CUSTOMERS}
BY_DELTAS = "SELECT status, count(*) AS n, sum(amount) AS total FROM orders GROUP BY status"


def of(query: str):
    return shape_view("v", analyze(query), LOGS)


def test_by_deltas_reads_the_group_table_and_updates_it_before_the_key_map():
    deltas = AggregateByDeltas(of(BY_DELTAS))
    read = deltas.read_sql(T0)
    assert read == aggdelta.fast_delta_sql(deltas.shape, T0) and f'"mvlog"."{deltas.shape.deltas.groups}"' in read
    updates = deltas.state_update(T0)
    keymap_updates = keymap.keymap_update_sql(deltas.shape, T0)
    assert updates == [*aggdelta.groups_update_sql(deltas.shape, T0), *keymap_updates]  # the key map as it was, first
    assert deltas.statements(T0) == [read, *updates]
    assert "COUNT(*), SUM(amount) = its state at the last refresh" in deltas.how()
    assert "MIN/MAX" not in deltas.how()


def test_by_deltas_rebuilds_a_group_table_that_fits_in_place_and_remakes_one_that_does_not():
    deltas = AggregateByDeltas(of(BY_DELTAS))
    groups = aggdelta.groups_table(deltas.shape).sql(dialect="postgres")
    fitting = {keymap.keymap_table(deltas.shape).sql(dialect="postgres"): keymap.keymap_all_columns(deltas.shape),
               groups: aggdelta.groups_columns(deltas.shape)}
    in_place = deltas.state_rebuild(fitting.get)
    assert not any(s.startswith(("DROP", "CREATE")) for s in in_place)
    assert f"TRUNCATE {groups}" in in_place
    remade = deltas.state_rebuild({**fitting, groups: ["_mvlog_k0", "other"]}.get)
    assert f"DROP TABLE IF EXISTS {groups}" in remade and f"TRUNCATE {groups}" not in remade
    assert any(s.startswith(f"CREATE TABLE {groups} AS") for s in remade)


def test_by_deltas_as_a_union_branch_keys_its_rows_by_branch_and_group_text():
    part = AggregateByDeltas(of(BY_DELTAS)).union_part(2, "", T0, False)
    names = [p.alias_or_name for p in part.selects]
    assert names == ["_mvlog_key_0", "_mvlog_key_1", "status", "n", "total", "_mvlog_branch", "_mvlog_row_key",
                     "_mvlog_present"]
    assert part.selects[0].this.sql() == "2"
    assert part.selects[5].this.sql(dialect="postgres") == 'CASE WHEN "d"."_mvlog_present" THEN 2 END'


def test_recomputed_groups_say_why_check_for_a_null_group_and_drop_a_left_over_group_table():
    recomputed = AggregateRecomputed(of("SELECT status, stddev(amount) AS s FROM orders GROUP BY status"))
    assert "(stddev() is recomputed per affected group" in recomputed.how()
    (check,) = recomputed.null_key_checks(T0)
    assert check is not None
    assert check.endswith('SELECT EXISTS(SELECT 1 FROM _mvlog_affected_keys WHERE "_mvlog_key_0" IS NULL)')
    statements = recomputed.statements(T0)
    assert statements[0] == recomputed.read_sql(T0) and statements[-2:] == [check, recomputed.read_sql(T0, (True,))]
    rebuild = recomputed.state_rebuild(lambda name: None)
    assert rebuild[-1] == f'DROP TABLE IF EXISTS "mvlog"."groups$_{recomputed.shape.keymap.removeprefix("keys$_")}"'
    assert recomputed.any_dml_note() == RECOMPUTED_NOTE


def test_the_null_safe_read_joins_the_null_group_s_keys_apart_null_safely():
    recomputed = AggregateRecomputed(of("SELECT status, stddev(amount) AS s FROM orders GROUP BY status"))
    assert "IS NOT DISTINCT FROM" not in recomputed.read_sql(T0)
    with_nulls = sqlglot.parse_one(recomputed.read_sql(T0, (True,)), read="postgres")
    assert isinstance(with_nulls, exp.Union) and not with_nulls.args.get("distinct")
    plain, nullish = with_nulls.this, with_nulls.expression
    assert plain.args["from_"].this.this.args["where"].sql(dialect="postgres") == 'WHERE NOT "_mvlog_key_0" IS NULL'
    assert nullish.args["from_"].this.this.args["where"].sql(dialect="postgres") == 'WHERE "_mvlog_key_0" IS NULL'
    on = nullish.args["joins"][0].args["on"].sql(dialect="postgres")
    assert on == '"v"."status" IS NOT DISTINCT FROM "k"."_mvlog_key_0"'


def test_an_aggregate_over_an_outer_join_recomputes_the_groups_of_its_roots():
    outer = OuterAggregate(of("SELECT c.name, count(o.id) AS n FROM customers c LEFT JOIN orders o "
                              "ON o.customer_id = c.id GROUP BY c.name"))
    assert outer.how().startswith("rows of public.customers (the root")
    assert "their groups, before and after" in outer.how()
    with_ = sqlglot.parse_one(outer.read_sql(T0), read="postgres").args["with_"].expressions
    assert [c.alias for c in with_] == ["_mvlog_roots", "_mvlog_affected_keys"]


def test_a_global_aggregate_is_recomputed_when_any_of_its_tables_changed():
    total = GlobalAggregate(of("SELECT count(*) AS n FROM orders o JOIN customers c ON c.id = o.customer_id"))
    read = total.read_sql(T0)
    affected = sqlglot.parse_one(read, read="postgres").args["with_"].expressions[0].this
    assert affected.sql(dialect="postgres").startswith('SELECT TRUE AS "_mvlog_key_0" WHERE EXISTS(')
    assert isinstance(affected.args["where"].this, exp.Or)  # a change to either table
    assert total.statements(T0) == [read] and total.keymapped() == [] and total.state_update(T0) == []
