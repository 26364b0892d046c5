"""The rules that hold for a query of any class: non-deterministic functions, join chains with one
root, what a SELECT groups by (pure, no database)."""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from mvlog.sql.parse import restrictions


def tree(query: str) -> exp.Select:
    select = sqlglot.parse_one(query, read="postgres")
    assert isinstance(select, exp.Select)
    return select


def join_reasons(query: str) -> list[str]:
    select = tree(query)
    return restrictions.join_reasons(select.args["from_"].this.alias_or_name, select.args.get("joins") or [])


@pytest.mark.parametrize("query", [
    "SELECT a FROM t WHERE d > now() - interval '1 day'",
    "SELECT random() AS r FROM t",
    "SELECT current_date AS d FROM t",
    "SELECT clock_timestamp() AS c FROM t",
    "SELECT nextval('s') AS n FROM t",
    "SELECT a FROM t WHERE b = current_setting('app.user')",
    "SELECT gen_random_uuid() AS u FROM t",
    "SELECT a FROM t WHERE d > localtimestamp",
    "SELECT localtime AS l FROM t",
])
def test_a_query_reading_the_clock_or_a_sequence_is_volatile(query):
    assert restrictions.reads_volatile(tree(query))


def test_deterministic_functions_are_not_volatile():
    assert not restrictions.reads_volatile(tree("SELECT upper(a) AS u, coalesce(b, 0) AS c, abs(d) AS e FROM t"))
    assert not restrictions.is_volatile(exp.column("now"))  # a column named like a function


@pytest.mark.parametrize("query", [
    "SELECT 1 FROM a LEFT JOIN b ON b.x = a.x LEFT JOIN c ON c.y = b.y",
    "SELECT 1 FROM a JOIN b ON b.x = a.x LEFT JOIN c ON c.y = b.y",
    "SELECT 1 FROM a RIGHT JOIN c USING (y)",  # the first join: c is the root
    "SELECT 1 FROM a LEFT JOIN b ON b.x = a.x RIGHT JOIN c ON c.y = b.y",  # false where b is NULL-extended
    "SELECT 1 FROM a LEFT JOIN b ON b.x = a.x RIGHT JOIN c ON c.y = a.y",  # reads only a, joined before b
])
def test_join_chains_with_one_root_are_kept(query):
    assert join_reasons(query) == []


@pytest.mark.parametrize(("query", "reason"), [
    ("SELECT 1 FROM a RIGHT JOIN b ON b.x = a.x RIGHT JOIN c ON c.y = b.y", "two root tables"),
    ("SELECT 1 FROM a, b RIGHT JOIN c ON c.y = b.y", "after a comma or CROSS join"),
    ("SELECT 1 FROM a JOIN b ON b.x = a.x RIGHT JOIN c USING (y)", "RIGHT JOIN after the first join with USING"),
    ("SELECT 1 FROM a FULL JOIN c USING (y)", "a FULL JOIN with USING or NATURAL"),
    ("SELECT 1 FROM a LEFT JOIN b ON b.x = a.x, c", "a comma or CROSS join after an outer join"),
    ("SELECT 1 FROM a LEFT JOIN b ON b.x = a.x JOIN d ON d.q = a.q RIGHT JOIN c ON c.y = b.y",
     "after an inner join that follows a LEFT JOIN"),
    ("SELECT 1 FROM a LEFT JOIN b ON b.x = a.x RIGHT JOIN c ON y = 1", "qualified by their tables"),
    ("SELECT 1 FROM a LEFT JOIN b ON b.x = a.x RIGHT JOIN c ON c.y = coalesce(b.y, 0)",
     "can hold where b is NULL-extended"),
])
def test_join_chains_that_cannot_be_fast_say_why(query, reason):
    (why,) = join_reasons(query)
    assert reason in why


def test_group_expressions_resolve_positions_and_distinct_groups_by_each_output_once():
    assert [e.sql() for e in restrictions.group_expressions(tree("SELECT a, upper(b) AS u FROM t GROUP BY 2, a"))] \
        == ["UPPER(b)", "a"]
    assert [e.sql() for e in restrictions.group_expressions(tree("SELECT DISTINCT a, b AS c, a FROM t"))] == ["a", "b"]
    assert restrictions.group_expressions(tree("SELECT a FROM t")) == []


@pytest.mark.parametrize(("query", "grouping_sets", "reason"), [
    ("SELECT a FROM t GROUP BY ROLLUP (a)", True, "GROUPING SETS, CUBE and ROLLUP"),
    ("SELECT a, sum(b) AS s FROM t GROUP BY CUBE (a)", True, "GROUPING SETS, CUBE and ROLLUP"),
    ("SELECT a FROM t GROUP BY GROUPING SETS ((a), ())", True, "GROUPING SETS, CUBE and ROLLUP"),
    ("SELECT a FROM t GROUP BY 3", False, "GROUP BY position 3 is not in the select list"),
])
def test_groups_that_cannot_key_a_view_are_not_keyable(query, grouping_sets, reason):
    select = tree(query)
    assert restrictions.has_grouping_sets(select.args.get("group")) is grouping_sets
    with pytest.raises(restrictions.NotKeyable, match=reason):
        restrictions.group_expressions(select)
    assert restrictions.has_grouping_sets(None) is False
