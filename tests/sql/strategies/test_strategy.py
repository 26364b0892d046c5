"""The base strategy (complete-only, and what every strategy shares: the key map's state) and
Layered, a strategy over another (pure, no database)."""

from __future__ import annotations

from datetime import datetime

import pytest
import sqlglot
from facts import CUSTOMERS, LOG, T0, shape

from mvlog.sql.analyze.analysis import analyze
from mvlog.sql.generate import keymap
from mvlog.sql.pieces.choice import shape_view
from mvlog.sql.strategies.per_group import AggregateByDeltas, AggregateRecomputed
from mvlog.sql.strategies.per_row import Join, Simple
from mvlog.sql.strategies.strategy import Layered, Strategy, row_text

JOIN = "SELECT o.id, c.name FROM orders o JOIN customers c ON c.id = o.customer_id"
EXTREMES = "SELECT status, max(amount) AS hi FROM orders GROUP BY status"


def joined():
    return shape_view("v", analyze(JOIN), {"o": LOG, "c": CUSTOMERS})


class Over(Layered):
    """A layer that reads what its strategy reads and keeps nothing of its own."""

    def read_sql(self, since: datetime | None, null_keys: tuple[bool, ...] = ()) -> str:
        return f"/* over */ {self.under.read_sql(since, null_keys)}"


def test_a_complete_only_view_has_no_fast_read_and_says_why():
    strategy = Strategy(shape("SELECT id FROM orders ORDER BY id LIMIT 3"))
    assert strategy.how() == "LIMIT/OFFSET is not incrementally maintainable"
    assert strategy.statements(T0) == [] and strategy.keymapped() == [] and strategy.state_update(T0) == []
    assert strategy.state_rebuild(lambda name: None) == [] and strategy.rows_from_state() is None
    with pytest.raises(NotImplementedError, match="view v is not refreshed fast"):
        strategy.read_sql(T0)


def test_a_missing_key_map_is_created_and_an_existing_one_that_fits_refilled():
    join = Join(joined())
    table = keymap.keymap_table(join.shape).sql(dialect="postgres")
    created = join.state_rebuild(lambda name: None)
    assert created == keymap.keymap_rebuild_sql(join.shape, exists=False) and created[0].startswith("CREATE TABLE")
    columns = keymap.keymap_all_columns(join.shape)
    refilled = join.state_rebuild({table: columns}.get)
    assert refilled == keymap.keymap_rebuild_sql(join.shape, exists=True)
    assert join.state_misfit({table: columns}.get) is None


def test_a_key_map_of_another_layout_is_dropped_and_made_again_and_is_a_misfit():
    join = Join(joined())
    table = keymap.keymap_table(join.shape).sql(dialect="postgres")
    old = {table: ["_mvlog_r0_0", "an_old_column"]}.get
    rebuilt = join.state_rebuild(old)
    assert rebuilt[0] == keymap.drop_table_sql(join.shape.keymap)
    assert rebuilt[1:] == keymap.keymap_rebuild_sql(join.shape, exists=False)
    why = join.state_misfit(old)
    assert why == f"its key map ({join.shape.keymap}) was kept in another layout (an earlier mvlog's)"


def test_a_key_map_without_its_probe_index_does_not_fit():
    deltas = AggregateByDeltas(shape(EXTREMES))
    table = keymap.keymap_table(deltas.shape).sql(dialect="postgres")
    (index,) = keymap.probe_indexes(deltas.shape)
    columns = {table: keymap.keymap_all_columns(deltas.shape)}
    assert deltas.state_misfit(columns.get) is not None  # the MIN/MAX probe's index is missing
    assert deltas.state_misfit({**columns, keymap.qualified(index): ["_mvlog_k0", "_mvlog_a0"]}.get) is None


def test_the_state_s_stand_ins_and_probes_are_the_key_map_s():
    join = Join(joined())
    assert join.stand_in_sql() == keymap.keymap_stand_in_sql(join.shape)
    (probe,) = join.probe_sql()
    assert isinstance(sqlglot.parse_one(probe, read="postgres"), sqlglot.exp.Select)


def test_a_branch_of_a_union_all_is_keyed_by_its_number_and_its_key_as_row_text():
    assert row_text(["a", "b"], "d").sql(dialect="postgres") == 'CAST(ROW("d"."a", "d"."b") AS TEXT)'
    select = "SELECT o.id, 3 AS _mvlog_branch, 'x' AS _mvlog_row_key FROM orders o JOIN customers c ON TRUE"
    part = Join(joined()).union_part(3, select, T0, False)
    keys = part.args["from_"].this.this
    assert [p.sql(dialect="postgres") for p in keys.selects] == [
        '3 AS "_mvlog_key_0"', 'CAST(ROW("_mvlog_key_0", "_mvlog_key_1") AS TEXT) AS "_mvlog_key_1"']
    assert part.args["joins"][0].args["on"].sql(dialect="postgres") == '"v"."_mvlog_row_key" = "k"."_mvlog_key_1"'
    assert [c.alias for c in part.args["with_"].expressions] == ["_mvlog_affected_keys"]


def test_a_layer_passes_on_its_strategy_s_state_and_reads_null_safely_where_a_key_may_be_null():
    under = AggregateRecomputed(shape("SELECT status, stddev(amount) AS s FROM orders GROUP BY status"))
    layered = Over(under.shape, under)
    assert layered.keymapped() == under.keymapped() and layered.probe_sql() == under.probe_sql()
    (check,) = layered.null_key_checks(T0)
    assert check == under.null_key_checks(T0)[0] and layered.null_safe(T0) == (True,)
    null_safe = layered.read_sql(T0, (True,))
    assert "IS NOT DISTINCT FROM" in null_safe
    assert layered.statements(T0) == [layered.read_sql(T0), null_safe, check, *under.state_update(T0)]
    assert layered.any_dml_note() == under.any_dml_note() != ""


def test_a_layer_over_a_view_without_null_keys_sends_its_read_alone():
    under = Simple(shape("SELECT id, amount FROM orders"))
    layered = Over(under.shape, under)
    assert layered.null_safe(T0) == (False,)
    assert layered.statements(T0) == [f"/* over */ {under.read_sql(T0)}"]
