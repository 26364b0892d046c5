"""A query kept over pieces it cannot be keyed through (TPC-H Q13's count of counts; two
aggregates joined), each piece a fast view of its own (pure: the keyed query and the state's SQL;
no database)."""

from __future__ import annotations

import sqlglot
from facts import LOG, T0
from sqlglot import exp

from mvlog.sql.analyze.analysis import analyze
from mvlog.sql.pieces import decompose
from mvlog.sql.pieces.choice import shape_view
from mvlog.sql.pieces.shape import piece_name
from mvlog.sql.strategies import composed
from mvlog.sql.strategies.registry import strategy_of

Q13 = ("SELECT t.c_count, count(*) AS custdist FROM (SELECT customer_id, count(*) AS c_count FROM orders "
       "GROUP BY customer_id) t GROUP BY t.c_count")
TWO = ("SELECT a.customer_id, a.n, b.total FROM (SELECT customer_id, count(*) AS n FROM orders GROUP BY customer_id) a "
       "JOIN (SELECT customer_id, sum(amount) AS total FROM orders GROUP BY customer_id) b "
       "ON a.customer_id = b.customer_id")


def kept(query: str = Q13):
    found: list = []

    def piece_columns(sql: str):
        inner = shape_view(piece_name("v", len(found) + 1), analyze(sql), {"orders": LOG})
        names = [p.alias_or_name for p in sqlglot.parse_one(sql, read="postgres").selects]
        found.append((inner, [*names, *inner.hidden_columns]))
        return names

    outer_sql, _ = decompose.decompose(query, piece_columns)
    outer = shape_view("v", analyze(query), {"orders": LOG})
    assert not outer.fast_possible  # as analysed: the aggregate does not merge
    return composed.keep_composed(outer, found, outer_sql, query)


def ctes(statement: str) -> dict[str, exp.Expr]:
    tree = sqlglot.parse_one(statement, read="postgres")
    return {c.alias: c.this for c in tree.args["with_"].expressions}


def test_each_row_is_keyed_by_its_text_and_number_among_equal_rows():
    keyed = composed.keyed("SELECT a FROM t")
    assert [p.alias_or_name for p in keyed.selects] == ["*", "_mvlog_row_key", "_mvlog_dup"]
    assert keyed.selects[1].this.sql(dialect="postgres") == 'CAST(ROW("o".*) AS TEXT)'
    assert keyed.selects[2].this.sql(dialect="postgres") == 'ROW_NUMBER() OVER (PARTITION BY CAST(ROW("o".*) AS TEXT))'


def test_the_kept_view_is_keyed_by_row_text_over_its_pieces_each_with_its_state():
    s = kept(TWO)
    assert s.fast_possible and s.key_columns == ("_mvlog_row_key", "_mvlog_dup")
    assert s.composed is not None and len(s.composed.pieces) == 2
    first, second = s.composed.pieces
    assert first.table.startswith("inner$_v_") and first.table.endswith("_p1") and second.table.endswith("_p2")
    assert first.inner.keymap != second.inner.keymap and first.inner.keymap.endswith("_p1")
    assert s.composed.keys.startswith("outer$_v_")
    strategy = strategy_of(s)
    assert type(strategy).__name__ == "ComposedRows" and len(strategy.pieces) == 2
    assert "its 2 pieces are kept fast" in strategy.how()


def test_the_fast_read_recomputes_the_query_from_every_piece_s_rows_before_and_after():
    s = kept(TWO)
    read = strategy_of(s).read_sql(T0)
    assert list(ctes(read)) == ["_mvlog_changed1", "_mvlog_old1", "_mvlog_new1", "_mvlog_changed2", "_mvlog_old2",
                                "_mvlog_new2", "_mvlog_out_new"]
    new = ctes(read)["_mvlog_new1"].sql(dialect="postgres")  # the old rows not changed, and the changed ones now
    assert 'FROM "_mvlog_old1" AS "o" WHERE NOT EXISTS(SELECT 1 FROM _mvlog_changed1 WHERE' in new
    out = ctes(read)["_mvlog_out_new"].sql(dialect="postgres")
    assert '"_mvlog_new1"' in out and '"_mvlog_new2"' in out and "_mvlog_piece" not in out
    tree = sqlglot.parse_one(read, read="postgres")
    keys = tree.args["from_"].this.this  # the keys of the last refresh and of now
    assert isinstance(keys, exp.Union) and keys.args.get("distinct")
    assert f'"mvlog"."{s.composed.keys}"' in keys.sql(dialect="postgres")
    assert tree.args["joins"][0].side == "LEFT"


def test_the_state_update_writes_the_view_s_keys_first_then_each_piece_s_rows():
    s = kept(TWO)
    updates = strategy_of(s).state_update(T0)
    outer_keys, rows1, rows2 = (sqlglot.parse_one(u, read="postgres") for u in updates[:3])
    assert isinstance(outer_keys, exp.Insert) and outer_keys.this.this.name == s.composed.keys
    assert any(isinstance(c.this, exp.Delete) for c in outer_keys.args["with_"].expressions)  # emptied first
    assert [r.this.this.name for r in (rows1, rows2)] == [p.table for p in s.composed.pieces]
    assert len(updates) > 3  # then the pieces' own state


def test_the_keys_can_be_kept_from_the_read_the_rest_of_the_update_unchanged():
    """Given the fast read's keys (two arrays), the view's keys are replaced by them in one
    statement, and the update's other statements are the same, without the keys' statement."""
    s = kept(TWO)
    strategy = strategy_of(s)
    given = strategy.kept_keys(T0)
    statement = sqlglot.parse_one(given.statement, read="postgres")
    assert isinstance(statement, exp.Insert) and statement.this.this.name == s.composed.keys
    assert any(isinstance(c.this, exp.Delete) for c in statement.args["with_"].expressions)  # emptied first
    assert [p.name for p in statement.find_all(exp.Placeholder)] == list(given.parameters)
    assert {t.name for t in statement.find_all(exp.Table)} == {s.composed.keys}  # no piece read again
    assert given.columns == ("_mvlog_key_0", "_mvlog_key_1")  # the read's key columns: row text, number
    assert given.rest == strategy.state_update(T0)[1:]


def test_a_complete_refresh_rebuilds_every_table_and_the_stand_ins_are_empty():
    s = kept()
    (piece,) = s.composed.pieces
    rebuild = composed.rebuild_sql(s.composed)
    assert [r.split(" AS ")[0] for r in rebuild] == [
        f'DROP TABLE IF EXISTS "mvlog"."{piece.table}"', f'CREATE TABLE "mvlog"."{piece.table}"',
        f"SELECT mvlog.analyze(CAST('\"mvlog\".\"{piece.table}\"'",  # before the keys are computed over its rows
        f'DROP TABLE IF EXISTS "mvlog"."{s.composed.keys}"', f'CREATE TABLE "mvlog"."{s.composed.keys}"']
    # the view's keys over the piece's rows just built, not over the base tables again
    keys = sqlglot.parse_one(rebuild[-1], read="postgres")
    read = {t.name for t in keys.find_all(exp.Table)} - {c.alias for c in keys.find_all(exp.CTE)} - {s.composed.keys}
    assert read == {piece.table}, read
    stand_ins = composed.rebuild_sql(s.composed, empty=True)
    assert all(c.endswith("LIMIT 0") for c in stand_ins[1::2]) and not any(r.endswith("LIMIT 0") for r in rebuild)
    assert strategy_of(s).state_rebuild(lambda name: None)[-5:] == rebuild  # after the piece's own state


def test_a_complete_refresh_refills_tables_that_have_their_columns_as_a_refresh_role_may():
    """A refresh role may empty and fill the pieces' rows and the view's keys but not drop or
    create them (it does not own them, nor schema mvlog): tables of today's columns are refilled;
    a table of other columns (an earlier mvlog's) is made again."""
    s = kept()
    (piece,) = s.composed.pieces
    columns = {f'"mvlog"."{piece.table}"': list(piece.columns),
               f'"mvlog"."{s.composed.keys}"': ["_mvlog_row_key", "_mvlog_dup"]}
    rebuild = composed.rebuild_sql(s.composed, columns_of=columns.get)
    assert [r.split(" (")[0].split(" SELECT")[0] for r in rebuild] == [
        f'TRUNCATE TABLE "mvlog"."{piece.table}"', f'INSERT INTO "mvlog"."{piece.table}"',
        "SELECT mvlog.analyze(CAST('\"mvlog\".\"" + piece.table + "\"' AS REGCLASS))",
        f'TRUNCATE TABLE "mvlog"."{s.composed.keys}"', f'INSERT INTO "mvlog"."{s.composed.keys}"']
    assert not any(r.startswith(("DROP", "CREATE")) for r in rebuild)
    columns[f'"mvlog"."{piece.table}"'] = ["other"]
    assert composed.rebuild_sql(s.composed, columns_of=columns.get)[:2] == composed.rebuild_sql(s.composed)[:2]


def test_the_record_runs_each_piece_s_read_once_into_a_table_its_statements_share():
    """The view's keys, each piece's rows and a top-N margin over the view (which reads the
    view's fast read) all take a piece's changed rows from one temporary table the record fills
    first — a piece's read is as dear as the refresh's read of it (TPC-DS q67's top-N form ran it
    three times)."""
    s = kept(TWO)
    strategy = strategy_of(s)
    scratch = strategy.scratch(T0)
    assert len(scratch) == 2
    for i, (table, piece) in enumerate(zip(scratch, strategy.pieces), start=1):
        name = f'"pg_temp"."_mvlog_scratch{i}"'  # never a table of the user's search_path
        assert table.create.startswith(f"CREATE TEMPORARY TABLE {name} AS ") and table.create.endswith("LIMIT 0")
        fill = sqlglot.parse_one(table.fill, read="postgres")
        assert isinstance(fill, exp.Insert) and fill.this.name == f"_mvlog_scratch{i}"
        assert piece.read_sql(T0, piece.null_safe(T0)) in table.fill
        assert table.analyze == f"ANALYZE {name}"
        assert table.drop == f"DROP TABLE {name}"  # before the commit: a pooler may pass the session on

    def tables(statement: str) -> set[str]:
        tree = sqlglot.parse_one(statement, read="postgres")
        return {t.name for t in tree.find_all(exp.Table)} - {c.alias for c in tree.find_all(exp.CTE)}

    pieces_rows = {p.table for p in s.composed.pieces}
    for statement in [strategy.recorded_read_sql(T0), *strategy.state_update(T0)[:3]]:
        read = tables(statement) - pieces_rows - {s.composed.keys}
        assert read == {"_mvlog_scratch1", "_mvlog_scratch2"} or read == {"_mvlog_scratch1"} or read == {
            "_mvlog_scratch2"}, read  # no log, no base table: the scratch tables
    assert "orders" in tables(strategy.read_sql(T0))  # the refresh's own read computes them
    # apply's check plans the fills after creating the tables empty
    checked = strategy.statements(T0)
    assert [t.fill for t in scratch] == [c for c in checked if c.startswith('INSERT INTO "pg_temp"."_mvlog_scratch')]
