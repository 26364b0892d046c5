"""Which parts of a query are its pieces (pure: a stub says which SQL can be kept fast)."""

from __future__ import annotations

import sqlglot

from mvlog.sql.pieces import decompose

AGG = "SELECT customer_id, count(*) AS n FROM orders GROUP BY customer_id"


def columns_of_fast(*fast: str):
    """A ``piece_columns`` that keeps exactly the SQL of ``fast`` (as sqlglot writes it), naming its outputs."""
    wanted = {sqlglot.parse_one(q, read="postgres").sql(dialect="postgres") for q in fast}
    asked: list[str] = []

    def piece_columns(sql: str):
        asked.append(sql)
        if sql not in wanted:
            return None
        return [p.alias_or_name for p in sqlglot.parse_one(sql, read="postgres").selects]

    return piece_columns, asked


def test_an_aggregated_cte_read_twice_is_one_piece_read_by_the_query_on_top():
    query = f"WITH t AS ({AGG}) SELECT a.customer_id FROM t a JOIN t b ON a.n = b.n + 1"
    ask, asked = columns_of_fast(AGG)
    outer, found = decompose.decompose(query, ask)
    assert found == [sqlglot.parse_one(AGG).sql(dialect="postgres")] and len(asked) == 1
    # NOT MATERIALIZED: each reference planned with its own filters (q31 reads one piece thrice)
    assert 'WITH t AS NOT MATERIALIZED (SELECT "customer_id", "n" FROM "_mvlog_piece1")' in outer


def test_two_aggregated_derived_tables_are_two_pieces_and_the_same_sql_twice_one():
    second = "SELECT customer_id, sum(amount) AS s FROM orders GROUP BY customer_id"
    query = f"SELECT x.n, y.s, z.n FROM ({AGG}) x JOIN ({second}) y ON x.customer_id = y.customer_id " \
            f"JOIN ({AGG}) z ON z.customer_id = x.customer_id"
    outer, found = decompose.decompose(query, columns_of_fast(AGG, second)[0])
    assert len(found) == 2 and outer.count("_mvlog_piece1") == 2 and outer.count("_mvlog_piece2") == 1


def test_a_piece_that_cannot_be_kept_is_looked_into_and_a_cte_it_reads_inlined():
    inner = "SELECT customer_id, count(*) AS n FROM orders GROUP BY customer_id"
    query = (f"WITH c AS ({inner}) SELECT m FROM (SELECT max(n) AS m FROM c) t")
    ask, asked = columns_of_fast(inner)
    outer, found = decompose.decompose(query, ask)
    assert found == [sqlglot.parse_one(inner).sql(dialect="postgres")]
    assert 'SELECT MAX(n) AS m FROM (SELECT customer_id' not in outer  # the CTE became the piece: not inlined
    assert asked[0].startswith("SELECT customer_id")


def test_operands_of_a_set_operation_and_scalar_subqueries_are_pieces():
    a = "SELECT DISTINCT customer_id FROM orders WHERE amount > 1"
    b = "SELECT DISTINCT customer_id FROM orders WHERE amount < 5"
    outer, found = decompose.decompose(f"SELECT count(*) AS n FROM ({a} INTERSECT {b}) t", columns_of_fast(a, b)[0])
    assert len(found) == 2 and "INTERSECT" in outer
    total = "SELECT count(*) AS c FROM orders"
    outer, found = decompose.decompose(f"SELECT CASE WHEN ({total}) > 3 THEN 1 END AS big FROM customers",
                                    columns_of_fast(total)[0])
    assert found and '(SELECT "c" FROM "_mvlog_piece1") > 3' in outer


def test_a_window_over_an_aggregate_is_a_window_over_an_aggregated_derived_table():
    query = ("SELECT customer_id, sum(amount) AS s, sum(amount) * 100 / sum(sum(amount)) OVER (PARTITION BY status) "
             "AS share, status FROM orders GROUP BY customer_id, status HAVING count(*) > 1")
    split = decompose.split_windowed_aggregates(sqlglot.parse_one(query, read="postgres")).sql(dialect="postgres")
    assert ('FROM (SELECT customer_id AS "mvlog_g1", status AS "mvlog_g2", SUM(amount) AS "mvlog_a1", '
            'COUNT(*) AS "mvlog_a2" FROM orders GROUP BY customer_id, status) AS "mvlog_agg" '
            'WHERE "mvlog_agg"."mvlog_a2" > 1') in split
    assert 'SUM("mvlog_agg"."mvlog_a1") OVER (PARTITION BY "mvlog_agg"."mvlog_g2") AS "share"' in split
    plain = "SELECT customer_id, rank() OVER (ORDER BY id) AS r FROM orders"  # no aggregate: as it is
    assert decompose.split_windowed_aggregates(sqlglot.parse_one(plain)).sql() == sqlglot.parse_one(plain).sql()


def test_no_piece_is_none():
    assert decompose.decompose("SELECT id FROM orders", columns_of_fast()[0]) is None
    assert decompose.decompose("SELECT FROM (", columns_of_fast()[0]) is None
