"""Query analysis with sqlglot: what kind of view a query is, and what it reads.

:func:`analyze` is pure (no database): it parses the view query in PostgreSQL's
dialect, finds its base tables, classifies it (DESIGN.md section 4) and collects the
reasons why it cannot be refreshed fast. The checks that hold for a query of any class
(join chains, non-deterministic functions, grouping) are :mod:`mvlog.sql.parse.restrictions`'.
Catalog facts (primary keys) are joined in by the planner.
"""

from __future__ import annotations

import dataclasses

from sqlglot import exp

from mvlog.sql.analyze import compound
from mvlog.sql.analyze.classes import (
    AGGREGATE_NOT_MERGED,
    Analysis,
    ViewClass,
    base_table_refs,
    parse,
    parse_query,
    tables_read,
)
from mvlog.sql.analyze.subqueries import RangeParameter, SemiJoin, subquery_lineage
from mvlog.sql.parse.restrictions import NotKeyable, group_expressions, has_grouping_sets, is_volatile, join_reasons
from mvlog.sql.parse.sqltree import (
    DIALECT,
    TableRef,
    from_items,
    identifier_name,
    item_alias,
    join_side,
    own_aggregates,
    own_windows,
    partition_by,
    root_join,
    table_refs,
    window_parts,
)
from mvlog.sql.rewrite import fulljoin, rewrite
from mvlog.sql.rewrite.normalize import Context, columns_of_tables, normalize, not_null_columns

__all__ = ["AGGREGATE_NOT_MERGED", "DIALECT", "Analysis", "NotKeyable", "SemiJoin", "TableRef", "ViewClass", "analyze",
           "group_expressions", "identifier_name", "join_side", "parse", "parse_query", "partition_by", "root_join",
           "table_refs", "tables_read", "window_parts"]


def analyze(query: str, catalog: rewrite.Catalog | None = None, output_names: list[str] | None = None,
            output_types: list[str] | None = None) -> Analysis:
    """Classify a view query and list why it cannot be fast-refreshed, if it cannot.

    A query with CTEs, derived tables or subquery expressions is classified by what it is once
    they are merged (:mod:`mvlog.sql.rewrite.rewrite`), which needs the ``catalog`` of the tables it reads
    (as written -> resolved); without it such a query is complete-only, and its ``tables`` are
    every table it reads. ``output_names`` are the names PostgreSQL gives its columns, and
    ``output_types`` their types (a set operation's untyped literals are cast to them)."""
    tree = parse_query(query)
    try:
        normalized, not_null = normalize(tree, Context(catalog, output_names, output_types))
    except rewrite.NotMergeable as exc:
        return Analysis(query, tree, ViewClass.OTHER, base_table_refs(tree), [str(exc)])
    tree = normalized
    if isinstance(tree, exp.SetOperation):
        analysis = compound.analyze_set_operation(query, tree, not_null, _analyze_select)
    elif not isinstance(tree, exp.Select):  # e.g. (SELECT …) LIMIT 1
        return Analysis(query, tree, ViewClass.OTHER, base_table_refs(tree),
                        ["a parenthesized query with clauses outside its parentheses is not incrementally "
                         "maintainable"])
    else:
        analysis = _analyze_select(query, tree, not_null)
    # The NOT NULL columns, also of a query the rewrites left as it was (its qualified columns match).
    known = not_null if not_null is not None else not_null_columns(tree, catalog) if catalog is not None else set()
    columns = columns_of_tables(tree, catalog) if catalog is not None else set()
    return _with_catalog(analysis, frozenset(known), frozenset(columns))


def _with_catalog(analysis: Analysis, not_null: frozenset[tuple[str, str]],
                  columns: frozenset[tuple[str, str]]) -> Analysis:
    branches = [_with_catalog(b, not_null, columns) for b in analysis.branches]
    return dataclasses.replace(analysis, not_null=not_null, columns=columns, branches=branches)


def _from_item_reason(item: exp.Expr) -> str:
    """Why a FROM item that is left a derived table (one that did not merge), a function or
    VALUES keeps the view from fast refresh: named by what it is."""
    inner = item.this if isinstance(item, exp.Subquery) else None
    if isinstance(inner, exp.Select) and (inner.args.get("group") or own_aggregates(inner)):
        return (f"{AGGREGATE_NOT_MERGED} (under an aggregate that does not fold its aggregates, such as a count "
                f"of counts or a max of sums, outer-joined, or beside another) is not incrementally maintainable")
    if inner is not None:
        return ("a derived table or CTE that does not merge into the query (a window, LIMIT, DISTINCT ON, "
                "a set operation) is not incrementally maintainable")
    return "functions and VALUES in FROM are not incrementally maintainable: they have no log"


def _analyze_select(query: str, tree: exp.Select, not_null: set[tuple[str, str]] | None = None) -> Analysis:
    reasons: list[str] = []
    assert isinstance(tree, exp.Select)
    if own_windows(window_parts(tree)[1]):
        return compound.analyze_window(query, tree, not_null, _analyze_select)
    source = tree.args["from_"].this if tree.args.get("from_") else None
    if (not_null is not None and isinstance(source, exp.Subquery) and not tree.args.get("joins")
            and (isinstance(source.this, exp.SetOperation) or compound.plain_distinct(source.this))):
        return compound.analyze_over_union(query, tree, source, not_null, _analyze_select)
    tables = table_refs(tree)
    semi_joins: list[SemiJoin] = []
    parameters: list[TableRef] = []
    ranges: list[RangeParameter] = []

    if tree.args.get("with_") or tree.args.get("with"):
        reasons.append("common table expressions (WITH) are not incrementally maintainable")
    if not tree.args.get("from_"):
        reasons.append("a query without FROM has no base table to log")
    sources = from_items(tree)
    reasons += list(dict.fromkeys(_from_item_reason(s) for s in sources
                                  if not isinstance(s, exp.Table) or not isinstance(s.this, exp.Identifier)))
    named = sources and (sources[0].alias or isinstance(sources[0].this, exp.Identifier))
    reasons += join_reasons(item_alias(sources[0]) if named else "", tree.args.get("joins") or [])
    distinct = tree.args.get("distinct")
    if distinct is not None and distinct.args.get("on") is not None:
        reasons.append("SELECT DISTINCT ON is not incrementally maintainable (it keeps an arbitrary row per value)")
    elif distinct is not None and tree.args.get("group"):
        reasons.append("SELECT DISTINCT over GROUP BY is not incrementally maintainable")
    elif distinct is not None and any(isinstance(s, exp.Star) or isinstance(s.this, exp.Star) for s in tree.selects):
        reasons.append("SELECT DISTINCT * is not incrementally maintainable: name the columns")
    if tree.args.get("limit") or tree.args.get("offset") or tree.args.get("fetch"):
        reasons.append("LIMIT/OFFSET is not incrementally maintainable")
    if has_grouping_sets(tree.args.get("group")):
        reasons.append("GROUPING SETS, CUBE and ROLLUP with LIMIT, DISTINCT, window functions or GROUP BY "
                       "positions are not incrementally maintainable")
    if any(s is not tree for s in tree.find_all(exp.Select)):
        if not_null is None:  # not qualified: which table a column belongs to is unknown
            reasons.append("subqueries are not incrementally maintainable without the catalog's columns")
        elif not reasons:
            semi_joins, why, parameters, ranges = subquery_lineage(tree, tables, not_null)
            reasons += why
    for node in tree.find_all(exp.Func):
        if is_volatile(node):
            reasons.append(f"the non-deterministic function {node.sql(DIALECT)} is not incrementally maintainable")
            break

    # an aggregate in a scalar subquery does not make the view one
    aggregate = bool(distinct) or bool(tree.args.get("group")) or bool(tree.args.get("having")) or own_aggregates(tree)
    joined = len(sources) > 1 or bool(semi_joins)
    joins = tree.args.get("joins") or []
    if not reasons and any(join_side(j) == "FULL" for j in joins) and (aggregate or semi_joins):
        grouped = bool(tree.args.get("group") or distinct)
        split = (fulljoin.full_join_as_union(tree, not_null)
                 if grouped and not semi_joins and not_null is not None else None)
        if split is not None:
            assert not_null is not None  # a FULL JOIN is split only in a qualified query
            return compound.analyze_over_union(query, split, split.args["from_"].this, not_null, _analyze_select)
        reasons.append("a subquery over a FULL JOIN is not incrementally maintainable" if semi_joins else
                       "a global aggregate over a FULL JOIN is not incrementally maintainable" if not grouped else
                       "an aggregate over a FULL JOIN needs the catalog's columns to be analysed")
    if reasons:  # complete refresh only: it depends on every table it reads, wherever
        view_class = ViewClass.OTHER
        tables = base_table_refs(tree)
    elif aggregate:
        view_class = ViewClass.AGGREGATE
    elif joined:
        view_class = ViewClass.JOIN
    else:
        view_class = ViewClass.SIMPLE
    if reasons:
        semi_joins, parameters, ranges = [], [], []
    return Analysis(query, tree, view_class, tables + [t for s in semi_joins for t in s.tables], reasons,
                    semi_joins=semi_joins, parameters=parameters, ranges=ranges)
