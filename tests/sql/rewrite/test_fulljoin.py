"""An aggregate over a FULL JOIN as one over the UNION ALL of its two parts (pure)."""

from __future__ import annotations

from mvlog.sql.analyze.analysis import parse_query
from mvlog.sql.parse.sqltree import DIALECT
from mvlog.sql.rewrite.fulljoin import FULL_JOIN_PARTS, aggregates_over_full_join, full_join_as_union

AGGREGATE = ('SELECT "b"."g" AS "g", count("a"."id") AS "n" FROM "public"."a" AS "a" '
             'FULL JOIN "public"."b" AS "b" ON "b"."a_id" = "a"."id" GROUP BY "b"."g"')


def test_only_an_aggregate_over_a_full_join_is_one():
    assert aggregates_over_full_join(parse_query(AGGREGATE))
    assert not aggregates_over_full_join(parse_query('SELECT "a"."id" FROM "a" FULL JOIN "b" ON "b"."x" = "a"."id"'))
    assert not aggregates_over_full_join(parse_query('SELECT count(*) FROM "a" LEFT JOIN "b" ON "b"."x" = "a"."id"'))


def test_it_becomes_the_aggregate_over_a_union_all_of_the_two_parts():
    rewritten = full_join_as_union(parse_query(AGGREGATE), {("a", "id")})
    assert rewritten is not None
    sql = rewritten.sql(dialect=DIALECT)
    assert f'AS "{FULL_JOIN_PARTS}"' in sql and "UNION ALL" in sql
    assert "LEFT JOIN" in sql and "RIGHT JOIN" in sql and '"a"."id" IS NULL' in sql


def test_without_a_not_null_column_of_the_first_table_it_is_left_alone():
    assert full_join_as_union(parse_query(AGGREGATE), set()) is None
