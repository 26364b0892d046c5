"""The key map's statements (pure, no database): an aggregate with a subquery keeps its lineage
and its subquery's rows apart, not multiplied (TPC-H Q18)."""

from __future__ import annotations

import sqlglot
from facts import CATALOG, CUSTOMERS, LOG, T0

from mvlog.sql.analyze.analysis import analyze
from mvlog.sql.generate import keymap
from mvlog.sql.pieces.choice import shape_view
from mvlog.sql.pieces.shape import SEMI_COLUMN

EXISTS = ("SELECT c.name, count(*) AS n FROM customers c JOIN orders o ON o.customer_id = c.id "
          "WHERE EXISTS (SELECT 1 FROM orders o2 WHERE o2.customer_id = c.id AND o2.status <> 1) GROUP BY c.name")


def _shape(query: str, names: list[str]):
    return shape_view("v", analyze(query, CATALOG, names), {"c": CUSTOMERS, "o": LOG, "o2": LOG})


def test_an_aggregate_with_a_subquery_keeps_its_lineage_and_the_subquery_s_rows_apart():
    s = _shape(EXISTS, ["name", "n"])
    assert len(s.keymap_cores) == 2
    assert keymap.keymap_all_columns(s) == ["_mvlog_r0_0", "_mvlog_r1_0", "_mvlog_r2_0", "_mvlog_k0", SEMI_COLUMN]
    create = sqlglot.parse_one(keymap.keymap_rebuild_sql(s, exists=False)[0], read="postgres")
    lineage, subquery = create.expression.this, create.expression.expression  # UNION ALL of the two
    assert not create.expression.args.get("distinct")
    assert "o2" not in {t.alias for t in lineage.find_all(sqlglot.exp.Table)}
    outputs = {p.alias: p.this.sql(dialect="postgres") for p in subquery.selects}
    # the root's key, the subquery row's, the group; the other FROM item's: NULL, typed for the UNION
    assert outputs["_mvlog_r0_0"] == '"c"."id"' and outputs["_mvlog_r2_0"] == '"o2"."id"'
    assert outputs["_mvlog_r1_0"] == "CAST(NULL AS BIGINT)" and outputs["_mvlog_k0"] == '"c"."name"'
    assert subquery.args.get("distinct") is not None
    assert 'NOT "o2"."id" IS NULL' in subquery.args["where"].sql(dialect="postgres")
    lineage_outputs = {p.alias: p.this.sql(dialect="postgres") for p in lineage.selects}
    assert lineage_outputs["_mvlog_r2_0"] == "CAST(NULL AS BIGINT)" and lineage_outputs[SEMI_COLUMN] == "0"


def test_its_update_replaces_both_kinds_of_rows_of_the_affected_roots():
    s = _shape(EXISTS, ["name", "n"])
    (update,) = keymap.keymap_update_sql(s, T0)
    insert = sqlglot.parse_one(update, read="postgres")
    branches = [b for b in insert.find_all(sqlglot.exp.Select) if b.args.get("from_") and any(
        p.alias == SEMI_COLUMN for p in b.selects)]
    assert len(branches) == 2
    assert all('"c"."id" = ANY' in b.args["where"].sql(dialect="postgres") for b in branches)


def test_a_join_view_with_a_subquery_keeps_one_lineage():
    """Row-keyed: its view key is every FROM item's key, so a subquery's rows tied to it would be
    the product again."""
    s = _shape("SELECT c.id, c.name FROM customers c WHERE EXISTS (SELECT 1 FROM orders o2 WHERE "
               "o2.customer_id = c.id)", ["id", "name"])
    assert s.keymap_cores == ()
    assert SEMI_COLUMN not in keymap.keymap_all_columns(s)
