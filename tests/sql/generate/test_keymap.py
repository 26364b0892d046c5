"""The key map's statements (pure, no database): an aggregate with a subquery keeps its lineage
and its subquery's rows apart, not multiplied (TPC-H Q18); a subquery tied to the root by values
alone keeps its rows' values (TPC-DS q06)."""

from __future__ import annotations

import sqlglot
from facts import CATALOG, CUSTOMERS, LOG, T0

from mvlog.sql.analyze.analysis import analyze
from mvlog.sql.generate import changes, keymap, sqlgen
from mvlog.sql.pieces.choice import shape_view
from mvlog.sql.pieces.shape import SEMI_COLUMN, Tie

# Tied to the root by an equality alone (its other condition on its own rows).
EXISTS = ("SELECT c.name, count(*) AS n FROM customers c JOIN orders o ON o.customer_id = c.id "
          "WHERE EXISTS (SELECT 1 FROM orders o2 WHERE o2.customer_id = c.id AND o2.status <> 1) GROUP BY c.name")
# Tied to another FROM item's row too: its rows are kept with the roots and groups they tie.
UNTIED = ("SELECT c.name, count(*) AS n FROM customers c JOIN orders o ON o.customer_id = c.id "
          "WHERE EXISTS (SELECT 1 FROM orders o2 WHERE o2.customer_id = c.id AND o2.status <> o.status) "
          "GROUP BY c.name")


def _shape(query: str, names: list[str]):
    return shape_view("v", analyze(query, CATALOG, names), {"c": CUSTOMERS, "o": LOG, "o2": LOG})


def _branches(s):
    create = sqlglot.parse_one(keymap.keymap_rebuild_sql(s, exists=False)[0], read="postgres")
    assert not create.expression.args.get("distinct")
    lineage, subquery = create.expression.this, create.expression.expression  # UNION ALL of the two
    assert "o2" not in {t.alias for t in [lineage.args["from_"].this, *(j.this for j in lineage.args["joins"])]}
    return ({p.alias: p.this.sql(dialect="postgres") for p in lineage.selects}, subquery,
            {p.alias: p.this.sql(dialect="postgres") for p in subquery.selects})


def test_an_aggregate_with_a_subquery_keeps_its_lineage_and_the_subquery_s_rows_apart():
    s = _shape(UNTIED, ["name", "n"])
    assert len(s.keymap_cores) == 2 and s.keymap_ties == ()
    assert keymap.keymap_all_columns(s) == ["_mvlog_r0_0", "_mvlog_r1_0", "_mvlog_r2_0", "_mvlog_k0", SEMI_COLUMN]
    lineage, subquery, outputs = _branches(s)
    # the root's key, the subquery row's, the group; the other FROM item's: NULL, typed for the UNION
    assert outputs["_mvlog_r0_0"] == '"c"."id"' and outputs["_mvlog_r2_0"] == '"o2"."id"'
    assert outputs["_mvlog_r1_0"] == "CAST(NULL AS BIGINT)" and outputs["_mvlog_k0"] == '"c"."name"'
    assert subquery.args.get("distinct") is not None
    assert 'NOT "o2"."id" IS NULL' in subquery.args["where"].sql(dialect="postgres")
    assert lineage["_mvlog_r2_0"] == "CAST(NULL AS BIGINT)" and lineage[SEMI_COLUMN] == "0"


def test_a_subquery_tied_to_the_root_by_values_keeps_its_rows_values_alone():
    """Not (root, subquery row, group): each of its rows with the value it ties roots by (TPC-DS
    q06's item of a category, not times every item of that category)."""
    s = _shape(EXISTS, ["name", "n"])
    assert s.keymap_ties[1] == Tie(("o2",), ('"o2"."customer_id"',), ('"c"."id"',))
    assert keymap.keymap_all_columns(s) == ["_mvlog_r0_0", "_mvlog_r1_0", "_mvlog_r2_0", "_mvlog_k0",
                                            "_mvlog_tie1_0", SEMI_COLUMN]
    lineage, subquery, outputs = _branches(s)
    assert [t.alias for t in subquery.find_all(sqlglot.exp.Table)] == ["o2"]
    assert subquery.args["where"].sql(dialect="postgres") == 'WHERE "o2"."status" <> 1'
    assert outputs["_mvlog_r0_0"] == "CAST(NULL AS INT)" and outputs["_mvlog_r2_0"] == '"o2"."id"'
    assert outputs["_mvlog_k0"] == "NULL" and outputs["_mvlog_tie1_0"] == '"o2"."customer_id"'
    # NULL of the value's type elsewhere: PostgreSQL types a nested UNION's columns pairwise
    assert lineage["_mvlog_tie1_0"] == '(SELECT "o2"."customer_id" FROM "public"."orders" AS "o2" WHERE FALSE)'


def test_its_roots_are_those_of_the_values_its_changed_rows_had():
    s = _shape(EXISTS, ["name", "n"])
    roots = changes.roots_sql(s, T0).sql(dialect="postgres")
    before = roots.split(" UNION ")[-1]  # the other branches: as for any subquery
    assert before.startswith('SELECT "c"."id" AS "_mvlog_r0_0" FROM "public"."customers" AS "c" WHERE "c"."id" IN '
                             f'(SELECT "_mvlog_tie1_0" FROM "mvlog"."{s.keymap}" WHERE "_mvlog_r2_0" IN ')


def test_its_update_replaces_both_kinds_of_rows_of_the_affected_roots():
    s = _shape(UNTIED, ["name", "n"])
    (update,) = keymap.keymap_update_sql(s, T0)
    insert = sqlglot.parse_one(update, read="postgres")
    branches = [b for b in insert.find_all(sqlglot.exp.Select) if b.args.get("from_") and any(
        p.alias == SEMI_COLUMN for p in b.selects)]
    assert len(branches) == 2
    assert all('"c"."id" = ANY' in b.args["where"].sql(dialect="postgres") for b in branches)


def test_over_an_outer_join_its_update_replaces_a_tied_subquery_s_changed_rows():
    s = _shape(EXISTS.replace("JOIN orders o", "LEFT JOIN orders o").replace("count(*)", "count(o.id)"),
               ["name", "n"])
    assert s.keymap_ties[1] is not None and not changes.tied_inner(s)
    (update,) = keymap.keymap_update_sql(s, T0)
    insert = sqlglot.parse_one(update, read="postgres")
    lineage, tied = [b for b in insert.find_all(sqlglot.exp.Select) if b.args.get("from_") and any(
        p.alias == SEMI_COLUMN for p in b.selects)]
    assert '"c"."id" = ANY' in lineage.args["where"].sql(dialect="postgres")
    assert tied.args["where"].sql(dialect="postgres").startswith('WHERE "o2"."status" <> 1 AND "o2"."id" IN')
    (untied,) = [c for c in insert.args["with_"].expressions if c.alias == "_mvlog_untied"]
    assert untied.this.args["where"].sql(dialect="postgres").startswith('WHERE "_mvlog_r2_0" IN')


def test_over_inner_joins_with_tied_subqueries_alone_no_root_s_rows_are_replaced():
    """Its groups are found as an inner join's are, its subquery's rows through the roots of their
    values: the key map's rows that hold a changed key are replaced, a branch per table."""
    s = _shape(EXISTS, ["name", "n"])
    assert changes.tied_inner(s) and not changes.tied_inner(_shape(UNTIED, ["name", "n"]))
    *deletes, insert = keymap.keymap_update_sql(s, T0)
    assert [d.split(" WHERE ")[1].split(" IN ")[0] for d in deletes] == ['"_mvlog_r0_0"', '"_mvlog_r1_0"',
                                                                          '"_mvlog_r2_0"']
    tree = sqlglot.parse_one(insert, read="postgres")
    branches = [b for b in tree.find_all(sqlglot.exp.Select) if any(p.alias == SEMI_COLUMN for p in b.selects)]
    wheres = [b.args["where"].sql(dialect="postgres") for b in branches]
    assert sorted(w.split(" IN ")[0] for w in wheres) == ['WHERE "c"."id"', 'WHERE "o"."id"',
                                                           'WHERE "o2"."status" <> 1 AND "o2"."id"']
    assert "ANY" not in insert and "_mvlog_roots" not in insert  # no root's rows
    affected = sqlgen.tied_affected_sql(s, T0, changes.roots_ref()).sql(dialect="postgres")
    assert affected.count('FROM "mvlog"."' + s.keymap) == 3  # the changed outer rows' and the roots'
    roots = changes.roots_sql(s, T0, subqueries_only=True).sql(dialect="postgres")
    assert '"mlog$_customers' not in roots and roots.count("_mvlog_tie1_0") == 1


def test_a_join_view_with_a_subquery_keeps_one_lineage():
    """Row-keyed: its view key is every FROM item's key, so a subquery's rows tied to it would be
    the product again."""
    s = _shape("SELECT c.id, c.name FROM customers c WHERE EXISTS (SELECT 1 FROM orders o2 WHERE "
               "o2.customer_id = c.id)", ["id", "name"])
    assert s.keymap_cores == ()
    assert SEMI_COLUMN not in keymap.keymap_all_columns(s)
