"""A query over an aggregate that does not merge (TPC-H Q13's count of counts), kept over its fast
inner aggregate (pure: the split, the keyed query and the state's SQL; no database)."""

from __future__ import annotations

import pytest
import sqlglot
from facts import LOG, T0, shape
from sqlglot import exp

from mvlog.sql import nested
from mvlog.sql.analysis import analyze
from mvlog.sql.choice import shape_view, strategy_of

Q13 = ("SELECT t.c_count, count(*) AS custdist FROM (SELECT customer_id, count(*) AS c_count FROM orders "
       "GROUP BY customer_id) t GROUP BY t.c_count")
COLUMNS = ["customer_id", "c_count"]


def kept():
    inner = shape(nested.split(Q13) or "")
    outer = shape_view("v", analyze(Q13), {"orders": LOG})
    assert not outer.fast_possible  # as analysed: the aggregate does not merge
    return nested.keep_nested(outer, inner, nested.outer_sql(Q13, COLUMNS), COLUMNS, Q13)


def ctes(statement: str) -> dict[str, exp.Expr]:
    tree = sqlglot.parse_one(statement, read="postgres")
    return {c.alias: c.this for c in tree.args["with_"].expressions}


def test_the_inner_aggregate_is_the_one_aggregated_derived_table_or_cte():
    assert nested.split(Q13) == "SELECT customer_id, COUNT(*) AS c_count FROM orders GROUP BY customer_id"
    cte = ("WITH t AS (SELECT customer_id, count(*) AS n FROM orders GROUP BY customer_id) "
           "SELECT max(a.n) AS m FROM t a JOIN t b ON a.n = b.n")  # one CTE read twice
    assert nested.split(cte) == "SELECT customer_id, COUNT(*) AS n FROM orders GROUP BY customer_id"


@pytest.mark.parametrize("query", [
    "SELECT a.x FROM (SELECT customer_id, count(*) AS x FROM orders GROUP BY 1) a "
    "JOIN (SELECT id, sum(amount) AS y FROM orders GROUP BY 1) b ON a.x = b.y",  # two aggregates
    "SELECT a.x FROM (SELECT customer_id AS x FROM orders) a",  # none
    "WITH u AS (SELECT * FROM orders), t AS (SELECT customer_id, count(*) AS n FROM u GROUP BY customer_id) "
    "SELECT max(n) AS m FROM t",  # it reads another CTE
    "SELECT FROM (",
])
def test_other_queries_have_no_inner_aggregate(query):
    assert nested.split(query) is None


def test_the_outer_query_reads_the_inner_rows_and_each_row_is_keyed_by_its_text_and_number():
    outer = sqlglot.parse_one(nested.outer_sql(Q13, COLUMNS), read="postgres")
    inner = outer.args["from_"].this
    assert inner.alias == "t" and inner.this.sql(dialect="postgres") == (
        'SELECT "customer_id", "c_count" FROM "_mvlog_inner"')
    keyed = nested.keyed("SELECT a FROM t")
    assert [p.alias_or_name for p in keyed.selects] == ["*", "_mvlog_row_key", "_mvlog_dup"]
    assert keyed.selects[1].this.sql(dialect="postgres") == 'CAST(ROW("o".*) AS TEXT)'
    assert keyed.selects[2].this.sql(dialect="postgres") == 'ROW_NUMBER() OVER (PARTITION BY CAST(ROW("o".*) AS TEXT))'


def test_the_kept_view_is_an_aggregate_keyed_by_row_text_over_its_inner_view():
    s = kept()
    assert s.fast_possible and s.key_columns == ("_mvlog_row_key", "_mvlog_dup")
    assert s.nested is not None and s.nested.table.startswith("inner$_v_") and s.nested.keys.startswith("outer$_v_")
    assert s.nested.inner.deltas is not None  # the inner count is kept by deltas
    strategy = strategy_of(s)
    assert type(strategy).__name__ == "NestedRows" and type(strategy.under).__name__ == "AggregateByDeltas"
    assert f"with its rows in mvlog.{s.nested.table}" in strategy.how()


def test_the_fast_read_recomputes_the_query_from_the_inner_rows_before_and_after():
    s = kept()
    read = strategy_of(s).read_sql(T0)
    assert list(ctes(read)) == ["_mvlog_changed", "_mvlog_old", "_mvlog_new", "_mvlog_out_new"]
    new = ctes(read)["_mvlog_new"].sql(dialect="postgres")  # the old rows not changed, and the changed ones now
    assert 'FROM "_mvlog_old" AS "o" WHERE NOT EXISTS(SELECT 1 FROM _mvlog_changed WHERE' in new
    assert 'CAST(ROW("o"."customer_id") AS TEXT)' in new and 'FROM _mvlog_changed WHERE "_mvlog_present"' in new
    tree = sqlglot.parse_one(read, read="postgres")
    keys = tree.args["from_"].this.this  # the keys of the last refresh and of now
    assert isinstance(keys, exp.Union) and keys.args.get("distinct")
    assert f'"mvlog"."{s.nested.keys}"' in keys.sql(dialect="postgres")
    assert tree.args["joins"][0].side == "LEFT"


def test_the_state_update_writes_the_view_s_keys_first_then_the_inner_rows():
    s = kept()
    updates = strategy_of(s).state_update(T0)
    outer_keys, inner_rows = (sqlglot.parse_one(u, read="postgres") for u in updates[:2])
    assert isinstance(outer_keys, exp.Insert) and outer_keys.this.this.name == s.nested.keys
    assert any(isinstance(c.this, exp.Delete) for c in outer_keys.args["with_"].expressions)  # emptied first
    assert isinstance(inner_rows, exp.Insert) and inner_rows.this.this.name == s.nested.table
    assert len(updates) > 2  # then the inner aggregate's own state


def test_a_complete_refresh_rebuilds_both_tables_and_the_stand_ins_are_empty():
    s = kept()
    rebuild = nested.rebuild_sql(s.nested, s.select_sql)
    assert [r.split(" AS ")[0] for r in rebuild] == [
        f'DROP TABLE IF EXISTS "mvlog"."{s.nested.table}"', f'CREATE TABLE "mvlog"."{s.nested.table}"',
        f'DROP TABLE IF EXISTS "mvlog"."{s.nested.keys}"', f'CREATE TABLE "mvlog"."{s.nested.keys}"']
    stand_ins = nested.rebuild_sql(s.nested, s.select_sql, empty=True)
    assert all(c.endswith("LIMIT 0") for c in stand_ins[1::2]) and not any(r.endswith("LIMIT 0") for r in rebuild)
    strategy = strategy_of(s)
    assert strategy.state_rebuild(lambda name: None)[-4:] == rebuild  # after the inner view's state
