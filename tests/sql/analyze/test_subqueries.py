"""Subquery expressions as lineage: the tables each reads and the condition tying them to the outer
rows (pure)."""

from __future__ import annotations

from mvlog.sql.analyze.analysis import parse_query
from mvlog.sql.analyze.subqueries import subquery_lineage
from mvlog.sql.parse.sqltree import DIALECT, table_refs


def _lineage(query: str, not_null: set[tuple[str, str]] = frozenset()):  # type: ignore[assignment]
    select = parse_query(query)
    return subquery_lineage(select, table_refs(select), set(not_null))


def test_exists_is_tied_by_its_correlation():
    semi, reasons, parameters, ranges = _lineage(
        "SELECT c.id FROM c WHERE EXISTS (SELECT 1 FROM o WHERE o.c_id = c.id AND o.x > 1)")
    assert not reasons and not parameters and not ranges
    (join,) = semi
    assert [t.name for t in join.tables] == ["o"]
    assert join.condition.sql(dialect=DIALECT) == "o.c_id = c.id AND o.x > 1"


def test_in_is_tied_by_the_equality_it_means():
    (join,), reasons, _, _ = _lineage("SELECT c.id FROM c WHERE c.id IN (SELECT o.c_id FROM o)")
    assert not reasons and join.condition.sql(dialect=DIALECT).startswith("o.c_id = c.id")


def test_a_subquery_reusing_an_outer_alias_is_renamed():
    (join,), _, _, _ = _lineage("SELECT c.id FROM c WHERE EXISTS (SELECT 1 FROM c AS c2 WHERE c2.id = c.id) "
                                "AND EXISTS (SELECT 1 FROM o AS c WHERE c.id = 1)")
    assert join.tables[0].alias == "c2"


def test_a_renamed_alias_takes_no_alias_of_the_subquery_s_own_tables():
    # TPC-DS q58 once flattened: the inner date_dim, renamed date_dim_2, took the name of its
    # partner, and both became one table (the week's seven days read as one).
    select = parse_query("SELECT d.x FROM date_dim AS date_dim WHERE date_dim.d_date IN (SELECT date_dim.d_date "
                         "FROM date_dim AS date_dim, date_dim AS date_dim_2 "
                         "WHERE date_dim.d_week_seq = date_dim_2.d_week_seq AND date_dim_2.d_date = '2002-02-25')")
    (join,), _, _, _ = subquery_lineage(select, table_refs(select)[:1], set())
    renamed, partner = (t.alias for t in join.tables)
    assert len({renamed, partner, "date_dim"}) == 3
    assert join.condition.sql(dialect=DIALECT).replace('"', "") == (
        f"{renamed}.d_date = date_dim.d_date AND ({renamed}.d_week_seq = {partner}.d_week_seq "
        f"AND {partner}.d_date = '2002-02-25')")


def test_an_uncorrelated_exists_and_a_nullable_not_in_say_why():
    _, reasons, _, _ = _lineage("SELECT c.id FROM c WHERE EXISTS (SELECT 1 FROM o WHERE o.x > 1)")
    assert reasons and "uncorrelated" in reasons[0]
    _, reasons, _, _ = _lineage("SELECT c.id FROM c WHERE c.x NOT IN (SELECT o.y FROM o)")
    assert reasons and "NULLs" in reasons[0]
    semi, reasons, _, _ = _lineage("SELECT c.id FROM c WHERE c.x NOT IN (SELECT o.y FROM o)", {("c", "x"), ("o", "y")})
    assert not reasons and semi


def test_a_having_subquery_over_its_own_tables_is_a_parameter():
    _, reasons, parameters, _ = _lineage(
        "SELECT c.g, sum(c.v) FROM c GROUP BY c.g HAVING sum(c.v) > (SELECT sum(o.v) * 0.1 FROM o)")
    assert not reasons and [t.name for t in parameters] == ["o"]
