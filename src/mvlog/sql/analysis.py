"""Query analysis with sqlglot: what kind of view a query is, and what it reads.

:func:`analyze` is pure (no database): it parses the view query in PostgreSQL's
dialect, finds its base tables, classifies it (DESIGN.md section 4) and collects the
reasons why it cannot be refreshed fast. The checks that hold for a query of any class
(join chains, non-deterministic functions, grouping) are :mod:`mvlog.sql.restrictions`'.
Catalog facts (primary keys) are joined in by the planner.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from mvlog.errors import ConfigError
from mvlog.model import TableInfo
from mvlog.sql import groupingsets, pullup, rewrite
from mvlog.sql.restrictions import NotKeyable, group_expressions, has_grouping_sets, is_volatile, join_reasons
from mvlog.sql.sqltree import (
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
from mvlog.sql.subqueries import RangeParameter, SemiJoin, subquery_lineage

__all__ = ["DIALECT", "Analysis", "NotKeyable", "SemiJoin", "TableRef", "ViewClass", "analyze", "group_expressions",
           "identifier_name", "join_side", "partition_by", "root_join", "table_refs", "window_parts"]


class ViewClass(str, Enum):
    SIMPLE = "simple"
    JOIN = "join"
    AGGREGATE = "aggregate"
    UNION = "union"  # UNION ALL of branches of the other classes
    WINDOW = "window"  # window functions with PARTITION BY over a simple or join query
    OTHER = "other"


@dataclass
class Analysis:
    """What a view query is. ``reasons`` say why fast refresh is impossible."""

    query: str
    tree: exp.Query
    view_class: ViewClass
    tables: list[TableRef]
    reasons: list[str] = field(default_factory=list)
    branches: list[Analysis] = field(default_factory=list)  # UNION ALL: each branch's analysis
    # UNION (distinct): DISTINCT over the UNION ALL of ``branches``, each made SELECT DISTINCT.
    distinct: bool = False
    # An aggregate over a UNION ALL: ``branches`` are each branch's SELECT DISTINCT of its groups.
    over_union: bool = False
    # Tables read by subquery expressions (EXISTS, IN, scalar): the last entries of ``tables``,
    # each with the condition under which its rows matter to a row of the FROM items.
    semi_joins: list[SemiJoin] = field(default_factory=list)
    # Tables read by parameters, uncorrelated scalar subqueries in HAVING (subqueries.is_parameter):
    # logged and watched, not keyed.
    parameters: list[TableRef] = field(default_factory=list)
    # Uncorrelated scalar subqueries compared with one FROM item's rows (subqueries.range_parameter).
    ranges: list[RangeParameter] = field(default_factory=list)

    @property
    def fast_possible(self) -> bool:
        return not self.reasons

    @property
    def read_tables(self) -> list[TableRef]:
        """Every table the view reads and needs a log of: keyed, parameters', range parameters'."""
        return self.tables + self.parameters + [t for r in self.ranges for t in r.tables]


# The start of the reason a query over an aggregated derived table that does not merge gets: apply
# then tries to keep that aggregate as a view of its own (mvlog.sql.nested).
AGGREGATE_NOT_MERGED = "an aggregated derived table or CTE that does not merge into the query"


def parse(query: str) -> exp.Expr:
    """Parse one SQL statement in PostgreSQL's dialect, or raise ConfigError."""
    try:
        statements = [s for s in sqlglot.parse(query, read=DIALECT) if s is not None]
    except ParseError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "syntax error"
        raise ConfigError(f"the query cannot be parsed: {first}") from None
    if len(statements) != 1:
        raise ConfigError("the query must be exactly one SELECT statement")
    tree = statements[0]
    while isinstance(tree, exp.Subquery) and set(k for k, v in tree.args.items() if v) == {"this"}:
        tree = tree.this  # (SELECT …): the parentheses mean nothing
    return tree


def _base_table_refs(tree: exp.Query) -> list[TableRef]:
    """Every table the query reads, at any depth (subqueries, CTE bodies, set operations), each
    once, in the order written; names of the query's own CTEs are not tables. Aliases are the
    names as written (``schema.table``): unique per table, whatever aliases the query reuses."""
    ctes = {identifier_name(cte.args["alias"].this) for cte in tree.find_all(exp.CTE) if cte.args.get("alias")}
    refs: dict[tuple, TableRef] = {}
    for table in tree.find_all(exp.Table, bfs=False):
        if not isinstance(table.this, exp.Identifier):
            continue  # a function in FROM (generate_series(…))
        schema = identifier_name(table.args["db"]) if table.args.get("db") else None
        name = identifier_name(table.this)
        if schema is None and name in ctes:
            continue
        refs.setdefault((schema, name), TableRef(schema, name, f"{schema}.{name}" if schema else name))
    return list(refs.values())


def analyze(query: str, catalog: rewrite.Catalog | None = None, output_names: list[str] | None = None,
            output_types: list[str] | None = None) -> Analysis:
    """Classify a view query and list why it cannot be fast-refreshed, if it cannot.

    A query with CTEs, derived tables or subquery expressions is classified by what it is once
    they are merged (:mod:`mvlog.sql.rewrite`), which needs the ``catalog`` of the tables it reads
    (as written -> resolved); without it such a query is complete-only, and its ``tables`` are
    every table it reads. ``output_names`` are the names PostgreSQL gives its columns, and
    ``output_types`` their types (a set operation's untyped literals are cast to them)."""
    tree = parse(query)
    if not isinstance(tree, exp.Query):
        raise ConfigError("the query must be a SELECT statement")
    not_null: set[tuple[str, str]] | None = None  # known once the query is qualified
    if catalog is not None and rewrite.needs_rewrite(tree):
        try:
            tree = rewrite.rewrite(tree, catalog, output_names)
        except rewrite.NotMergeable as exc:
            return Analysis(query, tree, ViewClass.OTHER, _base_table_refs(tree), [str(exc)])
        if isinstance(tree, exp.Select):  # an aggregated derived table joined to tables: one aggregate
            tree = pullup.pull_up(tree, catalog, output_types) or tree
        not_null = _not_null_columns(tree, catalog)
    if isinstance(tree, exp.Select):
        tree = groupingsets.as_union(tree) or tree  # one aggregate per grouping set
    if isinstance(tree, exp.SetOperation):
        if output_types:
            _type_untyped_literals(tree, output_types, output_names)
        return _analyze_set_operation(query, tree, not_null)
    if not isinstance(tree, exp.Select):  # e.g. (SELECT …) LIMIT 1
        return Analysis(query, tree, ViewClass.OTHER, _base_table_refs(tree),
                        ["a parenthesized query with clauses outside its parentheses is not incrementally "
                         "maintainable"])
    return _analyze_select(query, tree, not_null)


def _type_untyped_literals(tree: exp.SetOperation, types: list[str], names: list[str] | None) -> None:
    """Cast each branch's bare NULLs and quoted literals to their column's type. The UNION types
    them from the other branches; a fast refresh reads each branch on its own, where PostgreSQL
    would type them ``text`` and then fail to match them with the other branches."""
    for branch in _union_all_branches(tree, distinct=True) or []:
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


def _not_null_columns(tree: exp.Expr, catalog: rewrite.Catalog) -> set[tuple[str, str]]:
    """(alias, column) of every NOT NULL column of the (qualified) query's tables."""
    tables: dict[tuple[str | None, str], TableInfo] = {(t.schema, t.name): t for t in catalog.values()}
    found = set()
    for select in tree.find_all(exp.Select):
        for ref in table_refs(select):
            info = tables.get((ref.schema, ref.name))
            if info is not None:
                found |= {(ref.alias, c.name) for c in info.columns if c.not_null}
    return found


def _union_all_branches(tree: exp.Expr, distinct: bool = False) -> list[exp.Expr] | None:
    """The branches of a chain of UNION ALLs (None if it is another set operation); with
    ``distinct``, of a chain of UNIONs of either kind (a DISTINCT over all of them)."""
    if isinstance(tree, exp.Subquery):
        return _union_all_branches(tree.this, distinct)
    if not isinstance(tree, exp.SetOperation):
        return [tree]
    if not isinstance(tree, exp.Union) or tree.args.get("with_") or (tree.args.get("distinct") and not distinct):
        return None
    left, right = _union_all_branches(tree.this, distinct), _union_all_branches(tree.expression, distinct)
    return None if left is None or right is None else left + right


def _analyze_set_operation(query: str, tree: exp.SetOperation, not_null: set[tuple[str, str]] | None) -> Analysis:
    """UNION ALL: each branch is a view of its own (a hidden branch number joins the view key).
    UNION: a DISTINCT over the UNION ALL of its branches; each branch is made SELECT DISTINCT
    (its output rows are its key) and an affected row is recomputed from every branch."""
    tables = _base_table_refs(tree)
    distinct = isinstance(tree, exp.Union) and bool(tree.args.get("distinct"))
    branches = _union_all_branches(tree, distinct)
    if branches is None:
        within = [type(t).__name__.upper() for t in tree.find_all(exp.SetOperation) if not isinstance(t, exp.Union)]
        why = (f"set operations ({within[0]}) are not incrementally maintainable" if within else
               "a UNION (distinct) inside a UNION ALL is not incrementally maintainable: write UNION throughout, "
               "or UNION ALL")
        return Analysis(query, tree, ViewClass.OTHER, tables, [why])
    what = "UNION branch" if distinct else "UNION ALL branch"
    reasons = []
    if tree.args.get("limit") or tree.args.get("offset"):
        reasons.append("LIMIT/OFFSET is not incrementally maintainable")
    analyses = []
    for i, branch in enumerate(branches, 1):
        if not isinstance(branch, exp.Select):
            reasons.append(f"{what} {i} is not a SELECT")
            continue
        analysis = _analyze_select(branch.sql(dialect=DIALECT), branch.copy(), not_null)
        if distinct and analysis.fast_possible and analysis.view_class not in (ViewClass.SIMPLE, ViewClass.JOIN):
            reasons.append(f"{what} {i}: a UNION of aggregates or window functions is not incrementally "
                           f"maintainable (UNION ALL is)")
        elif distinct and analysis.fast_possible:
            rows = branch.copy()
            rows.set("distinct", exp.Distinct())
            analysis = _analyze_select(rows.sql(dialect=DIALECT), rows, not_null)
        reasons += [f"{what} {i}: {reason}" for reason in analysis.reasons]
        analyses.append(analysis)
    return Analysis(query, tree, ViewClass.OTHER if reasons else ViewClass.UNION, tables, reasons,
                    [] if reasons else analyses, distinct=distinct)


def _plain_distinct(query: exp.Expr) -> bool:
    """A SELECT DISTINCT (not DISTINCT ON) that is not itself an aggregate."""
    if not isinstance(query, exp.Select):
        return False
    distinct = query.args.get("distinct")
    return (distinct is not None and distinct.args.get("on") is None and not query.args.get("group")
            and not own_aggregates(query) and not own_windows(query))


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


def _analyze_over_union(query: str, tree: exp.Select, source: exp.Subquery, not_null: set[tuple[str, str]]) -> Analysis:
    """An aggregate over a UNION ALL (``SELECT g, sum(v) FROM (… UNION ALL …) s GROUP BY g``), a
    UNION or a SELECT DISTINCT (one branch): each branch with the outer WHERE and the groups moved
    into it (its outputs in place of ``s``'s columns) is a ``SELECT DISTINCT`` of the groups its
    rows fall in, keyed and key-mapped on its own; an affected group is recomputed by the whole
    query. Exact because a row of the derived table is in the group its source rows' outputs give,
    whether or not a DISTINCT keeps it: a group changes only where a changed row was or is."""
    tables = _base_table_refs(tree)
    branches = _union_all_branches(source.this, distinct=True)
    alias = identifier_name(source.args["alias"].this) if source.args.get("alias") else None
    if branches is None or alias is None or not (
            tree.args.get("distinct") or tree.args.get("group") or own_aggregates(tree)):
        return Analysis(query, tree, ViewClass.OTHER, tables, [
            "FROM items other than tables (subqueries, functions, VALUES) are not incrementally maintainable, but for "
            "an aggregate over a UNION ALL"])
    reasons = []
    if any(tree.args.get(k) for k in ("limit", "offset", "fetch", "with_")) or own_windows(tree):
        reasons.append("only GROUP BY, HAVING and WHERE over a UNION ALL are incrementally maintainable")
    def outer(node: exp.Expr | None) -> bool:  # in the aggregate's own query, not in the UNION ALL
        while node is not None and node is not source:
            node = node.parent
        return node is None

    if any(s is not tree and outer(s) for s in tree.find_all(exp.Select)) or (
            tree.args.get("distinct") is not None and tree.args["distinct"].args.get("on") is not None):
        reasons.append("subqueries and DISTINCT ON over a UNION ALL are not incrementally maintainable")
    if any(not c.table or identifier_name(c.args["table"]) != alias for c in tree.find_all(exp.Column) if outer(c)):
        reasons.append(f"every column over a UNION ALL must be one of {alias}'s")
    try:
        groups = group_expressions(tree)
    except NotKeyable as exc:
        groups, reasons = [], reasons + [str(exc)]
    if not groups and not reasons:
        reasons.append("a global aggregate over a UNION ALL is not incrementally maintainable")
    if reasons:
        return Analysis(query, tree, ViewClass.OTHER, tables, reasons)
    names = [s.alias_or_name for s in branches[0].selects] if isinstance(branches[0], exp.Select) else []
    units = []
    for i, branch in enumerate(branches, 1):
        if (not isinstance(branch, exp.Select) or len(branch.selects) != len(names) or own_windows(branch)
                or own_aggregates(branch) or any(branch.args.get(k) for k in ("group", "having", "limit"))
                or (branch.args.get("distinct") and not _plain_distinct(branch))):
            reasons.append(f"UNION ALL branch {i}: only filters, projections and joins under an aggregate are "
                           f"incrementally maintainable")
            continue
        outputs = {n: (p.this if isinstance(p, exp.Alias) else p) for n, p in zip(names, branch.selects)}

        def moved(node: exp.Expr, outputs: dict = outputs) -> exp.Expr:
            return node.copy().transform(
                lambda c: outputs[identifier_name(c.this)].copy() if isinstance(c, exp.Column) else c)

        unit = branch.copy()
        unit.set("expressions", [moved(g) for g in groups])
        unit.set("distinct", exp.Distinct())
        if tree.args.get("where"):
            unit.where(moved(tree.args["where"].this), copy=False)
        analysis = _analyze_select(unit.sql(dialect=DIALECT), unit, not_null)
        reasons += [f"UNION ALL branch {i}: {reason}" for reason in analysis.reasons]
        units.append(analysis)
    return Analysis(query, tree, ViewClass.OTHER if reasons else ViewClass.AGGREGATE, tables, reasons,
                    [] if reasons else units, over_union=not reasons)


def _analyze_window(query: str, tree: exp.Select, not_null: set[tuple[str, str]] | None) -> Analysis:
    """Window functions sharing a PARTITION BY over a simple, inner- or outer-join query,
    optionally filtered and projected by an outer query: a partition is recomputed whole."""
    outer, inner = window_parts(tree)
    reasons = []
    if outer is not None and (
            any(outer.args.get(k) for k in ("group", "having", "distinct", "limit", "offset", "fetch", "with_"))
            or any(n.find_ancestor(exp.Select) is outer for n in outer.find_all(exp.AggFunc))
            or any(s.find_ancestor(exp.Select) is outer and s is not inner for s in outer.find_all(exp.Select))):
        reasons.append("only filters and projections over a query with window functions are incrementally maintainable")
    if not partition_by(inner):
        reasons.append("window functions without a PARTITION BY that they all share are not incrementally "
                       "maintainable: every row would depend on every row")
    base = inner.copy()
    for window in own_windows(base):
        window.replace(exp.Null())
    analysis = _analyze_select(base.sql(dialect=DIALECT), base, not_null)
    reasons += analysis.reasons
    if analysis.view_class not in (ViewClass.SIMPLE, ViewClass.JOIN) and not analysis.reasons:
        reasons.append("window functions over an aggregate are not incrementally maintainable")
    if analysis.semi_joins or any(join_side(j) in ("FULL", "CROSS") for j in inner.args.get("joins") or []):
        reasons.append("window functions over a FULL JOIN, comma joins or subqueries are not incrementally "
                       "maintainable")
    if reasons:
        return Analysis(query, tree, ViewClass.OTHER, _base_table_refs(tree), reasons)
    return Analysis(query, tree, ViewClass.WINDOW, analysis.tables)


def _analyze_select(query: str, tree: exp.Select, not_null: set[tuple[str, str]] | None = None) -> Analysis:
    reasons: list[str] = []
    assert isinstance(tree, exp.Select)
    if own_windows(window_parts(tree)[1]):
        return _analyze_window(query, tree, not_null)
    source = tree.args["from_"].this if tree.args.get("from_") else None
    if (not_null is not None and isinstance(source, exp.Subquery) and not tree.args.get("joins")
            and (isinstance(source.this, exp.SetOperation) or _plain_distinct(source.this))):
        return _analyze_over_union(query, tree, source, not_null)
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
        split = (rewrite.full_join_as_union(tree, not_null)
                 if grouped and not semi_joins and not_null is not None else None)
        if split is not None:
            assert not_null is not None  # a FULL JOIN is split only in a qualified query
            return _analyze_over_union(query, split, split.args["from_"].this, not_null)
        reasons.append("a subquery over a FULL JOIN is not incrementally maintainable" if semi_joins else
                       "a global aggregate over a FULL JOIN is not incrementally maintainable" if not grouped else
                       "an aggregate over a FULL JOIN needs the catalog's columns to be analysed")
    if reasons:  # complete refresh only: it depends on every table it reads, wherever
        view_class = ViewClass.OTHER
        tables = _base_table_refs(tree)
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
