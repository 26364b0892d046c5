"""Normalization: a view query brought to the plain shapes fast refresh keys, by a list of small
rules applied in one declared order (:data:`RULES`), as sqlglot's optimizer composes its own.
:func:`mvlog.sql.analyze.analysis.analyze` classifies what they leave.

The rules that need the catalog of the query's tables (to qualify columns, and so to merge what
reads them) run only when it is given and the query has something to merge; a rule that cannot
rewrite what it must raises :class:`~mvlog.sql.rewrite.rewrite.NotMergeable` with the reason. Expanding
the project's and PostgreSQL's views (:mod:`mvlog.sql.parse.expansion`) happens before, on the text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from sqlglot import exp

from mvlog.model import TableInfo
from mvlog.sql.parse.sqltree import DIALECT, table_refs
from mvlog.sql.rewrite import groupingsets, merge, pullup, rewrite, unionjoin


@dataclass(frozen=True)
class Context:
    """What the rules know beside the query: its tables (as written -> resolved; None: unknown),
    and the names and types PostgreSQL gives its output columns."""

    catalog: rewrite.Catalog | None = None
    output_names: list[str] | None = None
    output_types: list[str] | None = None


Rule = Callable[[exp.Expr, Context], exp.Expr]


def qualify(tree: exp.Expr, context: Context) -> exp.Expr:
    """Tables resolved, columns qualified (:func:`mvlog.sql.rewrite.rewrite.qualified`)."""
    assert context.catalog is not None and isinstance(tree, exp.Query)
    return rewrite.qualified(tree, context.catalog)


def comma_joins_as_inner_joins(tree: exp.Expr, context: Context) -> exp.Expr:
    """Comma joins after an outer join as inner joins on their conditions
    (:func:`mvlog.sql.rewrite.rewrite.comma_joins_as_inner_joins`)."""
    assert isinstance(tree, exp.Query)
    return rewrite.comma_joins_as_inner_joins(tree)


def flatten_in_subqueries(tree: exp.Expr, context: Context) -> exp.Expr:
    """An uncorrelated IN inside a set-valued subquery as a join
    (:func:`mvlog.sql.rewrite.rewrite.flattened_in_subqueries`)."""
    assert isinstance(tree, exp.Query)
    for _ in range(4):  # nested: each pass takes one level
        tree = rewrite.flattened_in_subqueries(tree)
    return tree


def inline_ctes(tree: exp.Expr, context: Context) -> exp.Expr:
    """Every CTE reference as a derived table (:func:`mvlog.sql.rewrite.rewrite.inlined_ctes`)."""
    assert isinstance(tree, exp.Query)
    return rewrite.inlined_ctes(tree)


def distribute_joins_over_unions(tree: exp.Expr, context: Context) -> exp.Expr:
    """A UNION ALL derived table joined to tables as a UNION ALL of the joins
    (:func:`mvlog.sql.rewrite.unionjoin.unions_of_joins`)."""
    assert isinstance(tree, exp.Query)
    return unionjoin.unions_of_joins(tree)


def merge_derived_tables(tree: exp.Expr, context: Context) -> exp.Expr:
    """Mergeable derived tables merged (:func:`mvlog.sql.rewrite.merge.merged_derived_tables`)."""
    assert isinstance(tree, exp.Query)
    return merge.merged_derived_tables(tree)


def name_outputs(tree: exp.Expr, context: Context) -> exp.Expr:
    """Output columns named as PostgreSQL names the query's (:func:`mvlog.sql.rewrite.rewrite.named_outputs`)."""
    assert isinstance(tree, exp.Query)
    return rewrite.named_outputs(tree, context.output_names)


def pull_up_aggregates(tree: exp.Expr, context: Context) -> exp.Expr:
    """An aggregated derived table joined to tables as one aggregate (:func:`mvlog.sql.rewrite.pullup.pull_up`)."""
    assert context.catalog is not None
    if not isinstance(tree, exp.Select):
        return tree
    return pullup.pull_up(tree, context.catalog, context.output_types) or tree


def grouping_sets_as_union(tree: exp.Expr, context: Context) -> exp.Expr:
    """GROUPING SETS, ROLLUP, CUBE as one aggregate per grouping set
    (:func:`mvlog.sql.rewrite.groupingsets.as_union`)."""
    return (groupingsets.as_union(tree) or tree) if isinstance(tree, exp.Select) else tree


def type_untyped_literals(tree: exp.Expr, context: Context) -> exp.Expr:
    """Each set-operation branch's bare NULLs and quoted literals cast to their column's type. The
    UNION types them from the other branches; a fast refresh reads each branch on its own, where
    PostgreSQL would type them ``text`` and then fail to match them with the other branches."""
    types, names = context.output_types, context.output_names
    if not isinstance(tree, exp.SetOperation) or not types:
        return tree
    for branch in set_operation_branches(tree, distinct=True) or []:
        if not isinstance(branch, exp.Select) or len(branch.selects) != len(types):
            continue
        for i, (projection, type_sql) in enumerate(zip(branch.selects, types)):
            target = projection.this if isinstance(projection, exp.Alias) else projection
            if not (isinstance(target, exp.Null) or (isinstance(target, exp.Literal) and target.is_string)):
                continue
            try:
                typed: exp.Expr = exp.cast(target.copy(), exp.DataType.build(type_sql, dialect=DIALECT, udt=True))
            except Exception:  # sqlglot raises several kinds; a type it cannot parse stays untyped
                continue
            if target is projection and names:  # a cast is named after its type: keep PostgreSQL's name
                typed = exp.alias_(typed, exp.to_identifier(names[i], quoted=True))
            target.replace(typed)
    return tree


# (rule, needs the catalog): applied in this order
RULES: list[tuple[Rule, bool]] = [
    (qualify, True),
    (comma_joins_as_inner_joins, True),
    (inline_ctes, True),
    (flatten_in_subqueries, True),
    (distribute_joins_over_unions, True),
    (merge_derived_tables, True),
    (name_outputs, True),
    (pull_up_aggregates, True),
    (grouping_sets_as_union, False),
    (type_untyped_literals, False),
]


def normalize(tree: exp.Query, context: Context) -> tuple[exp.Query, set[tuple[str, str]] | None]:
    """The query after :data:`RULES`, and (qualified: the catalog was used) the (alias, column) of
    every NOT NULL column of its tables; raises NotMergeable."""
    merging = context.catalog is not None and rewrite.needs_rewrite(tree)
    result: exp.Expr = tree
    for rule, needs_catalog in RULES:
        if merging or not needs_catalog:
            result = rule(result, context)
    assert isinstance(result, exp.Query)  # every rule keeps a query a query
    return result, (not_null_columns(result, context.catalog) if merging and context.catalog is not None else None)


def not_null_columns(tree: exp.Expr, catalog: rewrite.Catalog) -> set[tuple[str, str]]:
    """(alias, column) of every NOT NULL column of the query's tables (qualified, or as written),
    and ("", column) for a name NOT NULL in every table of the query that has it (an unqualified
    column; a table unknown to the catalog makes no name certain)."""
    found: set[tuple[str, str]] = set()
    unqualified: dict[str, bool] = {}
    unknown = False
    for alias, info in _tables_of(tree, catalog):
        if info is None:
            unknown = True
            continue
        found |= {(alias, c.name) for c in info.columns if c.not_null}
        for c in info.columns:
            unqualified[c.name] = unqualified.get(c.name, True) and c.not_null
    return found | ({("", name) for name, never in unqualified.items() if never} if not unknown else set())


def columns_of_tables(tree: exp.Expr, catalog: rewrite.Catalog) -> set[tuple[str, str]]:
    """(alias, column) of every column of the query's tables: whose table an unqualified column is."""
    return {(alias, c.name) for alias, info in _tables_of(tree, catalog) if info is not None for c in info.columns}


def _tables_of(tree: exp.Expr, catalog: rewrite.Catalog) -> Iterator[tuple[str, TableInfo | None]]:
    """Each table the query reads, at every level: its alias and what the catalog says of it (None: unknown)."""
    tables: dict[tuple[str | None, str], TableInfo] = {(t.schema, t.name): t for t in catalog.values()}
    for select in tree.find_all(exp.Select):
        for ref in table_refs(select):
            yield ref.alias, tables.get((ref.schema, ref.name)) or catalog.get((ref.schema, ref.name))


def set_operation_branches(tree: exp.Expr, distinct: bool = False) -> list[exp.Expr] | None:
    """The branches of a chain of UNION ALLs (None if it is another set operation); with
    ``distinct``, of a chain of UNIONs of either kind (a DISTINCT over all of them)."""
    if isinstance(tree, exp.Subquery):
        return set_operation_branches(tree.this, distinct)
    if not isinstance(tree, exp.SetOperation):
        return [tree]
    if not isinstance(tree, exp.Union) or tree.args.get("with_") or (tree.args.get("distinct") and not distinct):
        return None
    left, right = set_operation_branches(tree.this, distinct), set_operation_branches(tree.expression, distinct)
    return None if left is None or right is None else left + right
