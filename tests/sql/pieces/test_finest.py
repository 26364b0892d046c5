"""A grouping-sets aggregate of a composed view as the same grouping over its finest level (pure:
a stub says the finest level's output types)."""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from mvlog.sql.pieces import decompose, finest

ROLLUP = ("SELECT c.segment, o.status AS st, sum(o.amount) AS total, count(*) AS n, min(o.amount) AS lo, "
          "max(o.day) AS last_day, grouping(c.segment, o.status) AS g FROM orders o JOIN customers c "
          "ON c.id = o.customer_id WHERE o.amount > 0 GROUP BY ROLLUP (c.segment, o.status) HAVING count(*) > 1")
TYPES = ["text", "text", "numeric", "bigint", "numeric(10,2)", "date"]  # the finest level's outputs


def described(types=TYPES):
    asked: list[str] = []

    def types_of(sql: str):
        asked.append(sql)
        return types

    return types_of, asked


def split_node(query: str, types=TYPES):
    return finest.split_grouping_sets(sqlglot.parse_one(query, read="postgres"), described(types)[0], lambda n: n)


def split(query: str, types=TYPES):
    types_of, asked = described(types)
    result = finest.split_grouping_sets(sqlglot.parse_one(query, read="postgres"), types_of, lambda n: n)
    return (result.sql(dialect="postgres") if result is not None else None), asked


def test_a_rollup_groups_its_finest_level_again_keeping_names_and_types():
    sql, asked = split(ROLLUP)
    assert asked == ['SELECT c.segment AS "mvlog_fg1", o.status AS "mvlog_fg2", SUM(o.amount) AS "mvlog_fa1", '
                     'COUNT(*) AS "mvlog_fa2", MIN(o.amount) AS "mvlog_fa3", MAX(o.day) AS "mvlog_fa4" FROM orders '
                     'AS o JOIN customers AS c ON c.id = o.customer_id WHERE o.amount > 0 GROUP BY c.segment, o.status']
    # each output named as written (unquoted names fold as they did)
    assert sql.startswith('SELECT "mvlog_f"."mvlog_fg1" AS segment, "mvlog_f"."mvlog_fg2" AS st, '
                          'CAST(SUM("mvlog_f"."mvlog_fa1") AS DECIMAL) AS total, '
                          # a count over no rows is 0, and count's type is bigint, not sum's numeric
                          'CAST(COALESCE(SUM("mvlog_f"."mvlog_fa2"), 0) AS BIGINT) AS n, '
                          'MIN("mvlog_f"."mvlog_fa3") AS lo, MAX("mvlog_f"."mvlog_fa4") AS last_day, '
                          'GROUPING("mvlog_f"."mvlog_fg1", "mvlog_f"."mvlog_fg2") AS g FROM (SELECT')
    assert sql.endswith('AS "mvlog_f" GROUP BY ROLLUP ("mvlog_f"."mvlog_fg1", "mvlog_f"."mvlog_fg2") '
                        'HAVING CAST(COALESCE(SUM("mvlog_f"."mvlog_fa2"), 0) AS BIGINT) > 1')
    node = split_node(ROLLUP)
    assert finest.is_split(node) and finest.unsplit(node).sql() == sqlglot.parse_one(ROLLUP, read="postgres").sql()
    assert finest.finest_level(node).sql(dialect="postgres") == asked[0]


def test_an_order_by_is_dropped_and_a_limit_or_a_with_of_its_own_leaves_it_as_it_is():
    assert "ORDER BY" not in split(f"{ROLLUP} ORDER BY count(*) DESC")[0]  # a derived table's rows have no order
    assert split(f"{ROLLUP} ORDER BY count(*) DESC LIMIT 3")[0] is None
    assert split(f"WITH o AS (SELECT * FROM orders) {ROLLUP}")[0] is None  # described without its own WITH


def test_plain_group_keys_beside_a_cube_and_an_unnamed_aggregate_keep_their_names():
    query = ('SELECT Status, "Priority", region, sum(amount), count(*) FROM orders '
             'GROUP BY region, CUBE (Status, "Priority")')
    sql, asked = split(query, ["text", "int", "text", "numeric", "bigint"])
    assert asked[0].endswith('GROUP BY region, Status, "Priority"')
    assert sql.startswith('SELECT "mvlog_f"."mvlog_fg2" AS Status, "mvlog_f"."mvlog_fg3" AS "Priority", ')
    assert 'AS "sum", CAST(COALESCE(SUM("mvlog_f"."mvlog_fa2"), 0) AS BIGINT) AS "count"' in sql
    assert 'GROUP BY "mvlog_f"."mvlog_fg1", CUBE ("mvlog_f"."mvlog_fg2", "mvlog_f"."mvlog_fg3")' in sql


def test_what_does_not_group_again_exactly_is_not_split():
    where = "FROM orders GROUP BY ROLLUP (status, priority)"
    for query in [f"SELECT status, avg(amount) AS a {where}",  # an average of averages is not the average
                  f"SELECT status, count(DISTINCT customer_id) AS c {where}",
                  f"SELECT status, sum(amount) FILTER (WHERE amount > 1) AS s {where}",
                  f"SELECT status, jsonb_agg(priority) AS ps {where}",  # an aggregate sqlglot does not know
                  f"SELECT status, sum(amount) * 2 + 1 {where}",  # a name PostgreSQL makes up
                  f"SELECT status, rank() OVER (ORDER BY status) AS r, count(*) AS n {where}",
                  f"SELECT status, (SELECT max(id) FROM customers) AS m, count(*) AS n {where}",
                  f"SELECT DISTINCT status, count(*) AS n {where}",
                  "SELECT status, count(*) AS n FROM orders GROUP BY ROLLUP (1)",  # a position
                  "SELECT status, count(*) AS n FROM orders GROUP BY status",  # no grouping sets
                  "SELECT status, region, count(*) AS n FROM orders GROUP BY ROLLUP (status)"]:  # not grouped
        assert split(query, ["text", "text", "bigint"])[0] is None, query
    floats = f"SELECT status, priority, sum(weight) AS w {where}"
    assert split(floats, ["text", "int", "double precision"])[0] is None  # summed twice, rounded otherwise
    assert split(floats, ["text", "int", "public.money2"])[0] is None  # a type of its own: its sum unknown
    for exact in ("numeric", "bigint", "interval", "money"):
        assert split(floats, ["text", "int", exact])[0] is not None
    assert split(f"SELECT status, priority, max(weight) AS w {where}", ["text", "int", "double precision"])[0]
    assert split(floats, None)[0] is None  # not described: as it is


def test_decompose_keeps_the_finest_level_as_the_piece_and_the_grouping_on_top():
    query = (f"SELECT segment, st, total, rank() OVER (PARTITION BY g ORDER BY total DESC) AS r FROM ({ROLLUP}) t")
    asked: list[str] = []

    def piece_columns(sql: str):
        asked.append(sql)
        tree = sqlglot.parse_one(sql, read="postgres")
        return None if tree.find(exp.Window) else [p.alias_or_name for p in tree.selects]

    outer, pieces = decompose.decompose(query, piece_columns, described()[0])
    assert len(pieces) == 1 and "ROLLUP" not in pieces[0] and pieces[0].endswith("GROUP BY c.segment, o.status")
    assert not any("ROLLUP" in sql for sql in asked)  # the grouping over the finest level: never a piece
    assert 'GROUP BY ROLLUP ("mvlog_f"."mvlog_fg1", "mvlog_f"."mvlog_fg2")' in outer
    assert 'FROM (SELECT "mvlog_fg1", "mvlog_fg2", "mvlog_fa1"' in outer and '"_mvlog_piece1"' in outer
    # without types (a stub, or PostgreSQL could not describe it) the grouping sets are the piece
    _, whole = decompose.decompose(query, piece_columns)
    assert "ROLLUP" in whole[0]


def test_when_the_finest_level_is_no_piece_the_grouping_sets_are_tried_as_one():
    query = f"SELECT segment, st, total, rank() OVER (PARTITION BY g ORDER BY total DESC) AS r FROM ({ROLLUP}) t"
    asked: list[str] = []

    def piece_columns(sql: str):  # refuses the finest level, keeps the grouping sets
        asked.append(sql)
        tree = sqlglot.parse_one(sql, read="postgres")
        return [p.alias_or_name for p in tree.selects] if "ROLLUP" in sql and not tree.find(exp.Window) else None

    outer, pieces = decompose.decompose(query, piece_columns, described()[0])
    assert pieces == [sqlglot.parse_one(ROLLUP, read="postgres").sql(dialect="postgres")]
    assert "mvlog_f" not in outer and len(asked) == len(set(asked)) == 2  # the finest level, then the sets
