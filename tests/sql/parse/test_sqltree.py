"""Names and parts of a parsed query (pure)."""

from __future__ import annotations

import pytest
from sqlglot import exp

from mvlog.sql.analyze.analysis import parse_query
from mvlog.sql.parse.sqltree import (
    conjuncts,
    identifier_name,
    join_side,
    null_rejecting,
    own_aggregates,
    partition_by,
    root_first,
    root_join,
    sql_text,
    table_refs,
    with_ctes,
)


def test_identifiers_fold_as_postgresql_folds_them():
    assert identifier_name(exp.to_identifier("Name")) == "name"
    assert identifier_name(exp.to_identifier("Name", quoted=True)) == "Name"


@pytest.mark.parametrize("join, side", [("JOIN b ON true", "INNER"), ("LEFT JOIN b ON true", "LEFT"),
                                        ("FULL JOIN b ON true", "FULL"), (", b", "CROSS"),
                                        ("CROSS JOIN b", "CROSS"), ("JOIN b USING (id)", "INNER")])
def test_join_sides(join, side):
    (found,) = parse_query(f"SELECT 1 FROM a {join}").args["joins"]
    assert join_side(found) == side


def test_a_right_join_s_table_is_the_root():
    select = parse_query("SELECT 1 FROM a JOIN b ON true RIGHT JOIN c ON true")
    joins = select.args["joins"]
    assert root_join(joins) == 1
    assert [r.alias for r in root_first(table_refs(select), joins)] == ["c", "a", "b"]


def test_conjuncts_and_null_rejection():
    where = parse_query("SELECT 1 FROM a LEFT JOIN b ON true WHERE a.x = 1 AND b.y > 2").args["where"].this
    assert len(conjuncts(where)) == 2
    assert null_rejecting(where, "b")
    assert not null_rejecting(parse_query("SELECT 1 WHERE b.y IS NULL OR a.x = 1").args["where"].this, "b")


def test_own_aggregates_are_not_a_subquery_s():
    assert own_aggregates(parse_query("SELECT count(*) FROM a"))
    assert not own_aggregates(parse_query("SELECT (SELECT count(*) FROM b) FROM a"))


def test_the_shared_partition_by():
    assert [p.sql() for p in partition_by(parse_query(
        "SELECT rank() OVER (PARTITION BY g ORDER BY x), sum(x) OVER (PARTITION BY g) FROM a"))] == ["g"]
    assert partition_by(parse_query("SELECT rank() OVER (PARTITION BY g ORDER BY x), "
                                    "rank() OVER (ORDER BY x) FROM a")) == []


def test_ctes_put_before_a_statement():
    statement = with_ctes(exp.select("*").from_("c2"), [("c1", exp.select("1")), ("c2", exp.select("*").from_("c1"))])
    assert statement.sql().startswith("WITH c1 AS (SELECT 1), c2 AS (SELECT * FROM c1) SELECT")


def test_sql_text_writes_without_changing_the_tree():
    """sql_text skips the generator's copy: PostgreSQL's transforms must leave the shapes mvlog
    builds as they are (a sqlglot upgrade that rewrites one of them fails here)."""
    tree = parse_query(
        "WITH c AS (SELECT a.k, sum(a.x) AS s FROM a JOIN b ON a.k = b.k WHERE EXISTS (SELECT 1 FROM d "
        "WHERE d.k = a.k) AND a.y IN (SELECT y FROM e) GROUP BY a.k) "
        "SELECT k, s, rank() OVER (PARTITION BY k ORDER BY s DESC), CAST(ROW(c.*) AS TEXT), "
        "(SELECT max(s) FROM c) FROM c LEFT JOIN f ON f.k = c.k UNION ALL SELECT 1, 2, 3, NULL, 4")
    before = tree.copy()
    text = sql_text(tree)
    assert tree == before and tree.sql(dialect="postgres") == text
