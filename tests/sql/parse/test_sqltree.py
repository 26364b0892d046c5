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
