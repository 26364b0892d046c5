"""The key map's per-group probes of an aggregate kept by state: MIN/MAX among a group's untouched
rows, and whether a value is in a group (pure, no database)."""

from __future__ import annotations

import sqlglot
from facts import T0, shape
from sqlglot import exp

from mvlog.sql.generate import aggprobe

ONE_KEY = "SELECT status, max(amount) AS hi, min(amount) AS lo, count(DISTINCT customer_id) AS b FROM orders " \
          "GROUP BY status"


def arms(tree: exp.Expr) -> list[exp.Select]:
    """The SELECTs over the key map (one per pattern of NULL group keys)."""
    return [s for s in tree.find_all(exp.Select) if s.args.get("from_") and s.args["from_"].this.alias == "m"]


def test_max_walks_the_group_s_index_backwards_and_skips_changed_rows():
    s = shape(ONE_KEY)
    probe = aggprobe.kept_extreme(s, T0, "max", 0, "g")
    text = probe.sql(dialect="postgres")
    assert text.startswith('(SELECT MAX("b"."_mvlog_a0") FROM (')
    branches = arms(probe)
    assert len(branches) == 2  # the group key equal, or both NULL
    for branch in branches:
        assert branch.args["limit"].expression.sql() == "1"
        (order,) = branch.args["order"].expressions
        assert order.args.get("desc") and order.this.sql(dialect="postgres") == '"m"."_mvlog_a0"'
        where = branch.args["where"].sql(dialect="postgres")
        assert 'NOT "m"."_mvlog_r0_0" IN (SELECT DISTINCT "id"' in where and '"mvlog"."mlog$_orders_1"' in where
        assert "NOT \"m\".\"_mvlog_a0\" IS NULL" in where
    assert '"m"."_mvlog_k0" = "g"."_mvlog_k0"' in branches[0].sql(dialect="postgres")
    assert '"m"."_mvlog_k0" IS NULL AND "g"."_mvlog_k0" IS NULL' in branches[1].sql(dialect="postgres")


def test_min_walks_the_index_forwards():
    probe = aggprobe.kept_extreme(shape(ONE_KEY), T0, "min", 0, "g")
    assert probe.sql(dialect="postgres").startswith('(SELECT MIN("b"."_mvlog_a0")')
    assert all(not b.args["order"].expressions[0].args.get("desc") for b in arms(probe))


def test_a_value_in_the_group_is_an_exists_and_untouched_adds_the_window_s_keys():
    s = shape(ONE_KEY)
    value = exp.column("customer_id", "c", quoted=True)
    anywhere = aggprobe.value_in_keymap(s, T0, 1, "g", value, untouched=False)
    untouched = aggprobe.value_in_keymap(s, T0, 1, "g", value, untouched=True)
    assert isinstance(anywhere, exp.Exists) and isinstance(untouched, exp.Exists)
    assert '"m"."_mvlog_a1" = "c"."customer_id"' in anywhere.sql(dialect="postgres")
    assert "mlog$_orders_1" not in anywhere.sql(dialect="postgres")
    assert all("NOT \"m\".\"_mvlog_r0_0\" IN" in b.sql(dialect="postgres") for b in arms(untouched))
    assert len(arms(untouched)) == 2


def test_two_group_keys_take_one_arm_per_pattern_of_nulls():
    s = shape("SELECT status, customer_id, max(amount) AS hi FROM orders GROUP BY status, customer_id")
    branches = [b.args["where"].sql(dialect="postgres") for b in arms(aggprobe.kept_extreme(s, T0, "max", 0, "g"))]
    assert len(branches) == 4
    patterns = {tuple(f'"m"."_mvlog_k{k}" IS NULL AND "g"."_mvlog_k{k}" IS NULL' in w for k in (0, 1))
                for w in branches}
    assert patterns == {(False, False), (False, True), (True, False), (True, True)}
    assert sum('"m"."_mvlog_k0" = "g"."_mvlog_k0" AND "m"."_mvlog_k1" = "g"."_mvlog_k1"' in w for w in branches) == 1


def test_past_three_group_keys_the_nulls_are_matched_null_safely_in_one_arm():
    s = shape("SELECT status, customer_id, priority, id, max(amount) AS hi FROM orders "
              "GROUP BY status, customer_id, priority, id")
    equal, null_safe = arms(aggprobe.kept_extreme(s, None, "max", 0, "g"))
    assert "IS NOT DISTINCT FROM" not in equal.sql(dialect="postgres")
    text = null_safe.sql(dialect="postgres")
    assert text.count("IS NOT DISTINCT FROM") == 4
    assert '("g"."_mvlog_k0" IS NULL OR "g"."_mvlog_k1" IS NULL' in text  # only where some key is NULL
    assert "snaptime$$" not in text  # no window start: every logged key counts as changed


def test_the_probe_parses_back_as_postgresql():
    probe = aggprobe.kept_extreme(shape(ONE_KEY), T0, "max", 0, "g")
    query = exp.select(exp.alias_(probe, "hi")).from_(exp.Table(this=exp.to_identifier("groups"), alias=exp.TableAlias(
        this=exp.to_identifier("g"))))
    assert isinstance(sqlglot.parse_one(query.sql(dialect="postgres"), read="postgres"), exp.Select)
