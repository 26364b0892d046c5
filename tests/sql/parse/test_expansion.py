"""PostgreSQL views (and the project's) in a view query, replaced by their definitions (pure: the
definitions come from a lookup)."""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from mvlog.errors import ConfigError
from mvlog.sql.parse.expansion import Expansion, PgView, expand_views, redefined_view

VIEWS = {
    (None, "active"): PgView("public.active", "SELECT id, name FROM public.customers WHERE active"),
    ("public", "big"): PgView("public.big", "SELECT * FROM active WHERE id > 10;"),
    (None, "totals"): PgView("totals", "SELECT 1 AS x FROM orders", upstream=True),
    (None, "secret"): PgView("public.secret", "SELECT 2 AS y FROM orders", security_barrier=True),
    (None, "broken"): PgView("public.broken", "SELECT * FROM ("),
    (None, "loop"): PgView("public.loop", "SELECT * FROM loop"),
}


def lookup(schema: str | None, name: str) -> PgView | None:
    return VIEWS.get((schema, name))


def test_a_view_is_its_definition_under_the_alias_it_was_read_by():
    expansion = expand_views("SELECT a.id FROM active a JOIN orders o ON o.cid = a.id", lookup)
    tree = sqlglot.parse_one(expansion.query, read="postgres")
    source = tree.args["from_"].this
    assert isinstance(source, exp.Subquery) and source.alias == "a"
    assert source.this.sql(dialect="postgres") == "SELECT id, name FROM public.customers WHERE active"
    assert sorted(t.name for t in tree.find_all(exp.Table)) == ["customers", "orders"]
    assert expansion.pg_views == ["public.active"] and expansion.upstreams == []


def test_views_over_views_expand_down_to_tables():
    expansion = expand_views("SELECT * FROM public.big", lookup)
    assert expansion.pg_views == ["public.big", "public.active"]
    tree = sqlglot.parse_one(expansion.query, read="postgres")
    assert [t.name for t in tree.find_all(exp.Table)] == ["customers"]
    assert {s.alias for s in tree.find_all(exp.Subquery)} == {"big", "active"}  # named as the views


def test_a_query_reading_no_view_or_a_cte_of_a_view_s_name_is_left_as_written():
    for query in ["SELECT * FROM orders", "WITH active AS (SELECT 1 AS id) SELECT * FROM active", "SELECT FROM ("]:
        assert expand_views(query, lookup) == Expansion(query)


def test_upstream_and_security_barrier_views_are_told_apart():
    expansion = expand_views("SELECT * FROM totals, secret", lookup)
    assert expansion.upstreams == ["totals"] and expansion.pg_views == ["public.secret"]
    assert expansion.barrier is VIEWS[(None, "secret")]
    assert expand_views("SELECT * FROM active", lookup).barrier is None


@pytest.mark.parametrize(("query", "message"), [
    ("SELECT * FROM broken", "the definition of view public.broken cannot be parsed"),
    ("SELECT * FROM loop", "views nest deeper than 32 levels"),
])
def test_a_definition_that_cannot_be_expanded_is_a_config_error(query, message):
    with pytest.raises(ConfigError, match=message):
        expand_views(query, lookup)


def test_the_signature_names_a_redefined_view():
    assert Expansion("q").signature(["a"]) == '["a"]'  # no view: the columns alone
    before = expand_views("SELECT * FROM active", lookup).signature(["id", "name"])
    after = Expansion("q", (PgView("public.active", "SELECT id, name FROM public.customers"),)).signature(
        ["id", "name"])
    assert redefined_view(before, after) == "public.active"
    assert redefined_view(before, before) is None
    assert redefined_view(None, after) == "public.active"  # a view read for the first time
    assert redefined_view("not json", after) is None
