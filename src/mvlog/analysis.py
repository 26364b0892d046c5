"""Query analysis with sqlglot: what kind of view a query is, and what it reads.

:func:`analyze` is pure (no database): it parses the view query in PostgreSQL's
dialect, finds its base tables, classifies it (DESIGN.md section 4) and collects the
reasons why it cannot be refreshed fast. Catalog facts (primary keys) are joined in
by the planner.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from mvlog import rewrite
from mvlog.errors import ConfigError
from mvlog.model import TableInfo

DIALECT = "postgres"

# Functions whose value changes between evaluations or over time: a view using them
# cannot be maintained from changed keys alone.
VOLATILE_FUNCTIONS = {
    "now", "clock_timestamp", "statement_timestamp", "transaction_timestamp", "timeofday",
    "random", "setseed", "gen_random_uuid", "uuid_generate_v4", "nextval", "currval", "setval",
    "txid_current", "pg_current_xact_id", "pg_sleep", "current_setting", "age",
}
VOLATILE_NODES = (exp.CurrentTimestamp, exp.CurrentDate, exp.CurrentTime, exp.Rand)


class ViewClass(str, Enum):
    SIMPLE = "simple"
    JOIN = "join"
    AGGREGATE = "aggregate"
    UNION = "union"  # UNION ALL of branches of the other classes
    OTHER = "other"


@dataclass(frozen=True)
class TableRef:
    """A base table as the query names it."""

    schema: str | None
    name: str
    alias: str

    @property
    def display(self) -> str:
        return f"{self.schema}.{self.name}" if self.schema else self.name


@dataclass
class Analysis:
    """What a view query is. ``reasons`` say why fast refresh is impossible."""

    query: str
    tree: exp.Query
    view_class: ViewClass
    tables: list[TableRef]
    reasons: list[str] = field(default_factory=list)
    branches: list["Analysis"] = field(default_factory=list)  # UNION ALL: each branch's analysis
    # Tables read by subquery expressions (EXISTS, IN, scalar): the last entries of ``tables``,
    # each with the condition under which its rows matter to a row of the FROM items.
    semi_joins: list["SemiJoin"] = field(default_factory=list)

    @property
    def fast_possible(self) -> bool:
        return not self.reasons


@dataclass(frozen=True)
class SemiJoin:
    """A table a subquery expression reads, joined to the view's FROM items in its lineage by
    ``condition``: a row of it can change the subquery's value for a view row only if the two
    satisfy the condition, before or after the change."""

    table: TableRef
    condition: exp.Expression


def identifier_name(node: exp.Identifier | str) -> str:
    """The name PostgreSQL gives an identifier: quoted as written, unquoted folded to lower case."""
    if isinstance(node, str):
        return node
    return node.this if node.quoted else node.this.lower()


def parse(query: str) -> exp.Expression:
    """Parse one SQL statement in PostgreSQL's dialect, or raise ConfigError."""
    try:
        statements = [s for s in sqlglot.parse(query, read=DIALECT) if s is not None]
    except ParseError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "syntax error"
        raise ConfigError(f"the query cannot be parsed: {first}") from None
    if len(statements) != 1:
        raise ConfigError("the query must be exactly one SELECT statement")
    return statements[0]


def table_refs(select: exp.Select) -> list[TableRef]:
    refs = []
    sources = [select.args.get("from_").this] if select.args.get("from_") else []
    sources += [join.this for join in select.args.get("joins") or []]
    for source in sources:
        if isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier):
            schema = identifier_name(source.args["db"]) if source.args.get("db") else None
            name = identifier_name(source.this)
            alias = identifier_name(source.args["alias"].this) if source.alias else name
            refs.append(TableRef(schema, name, alias))
    return refs


def _basetable_refs(tree: exp.Query) -> list[TableRef]:
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


def join_side(join: exp.Join) -> str:
    """INNER, LEFT, RIGHT, FULL or CROSS (a comma join is CROSS: its condition is in WHERE)."""
    side, kind = (join.side or "").upper(), (join.kind or "").upper()
    if side:
        return side
    if kind == "CROSS" or not (join.args.get("on") or join.args.get("using") or join.args.get("method")):
        return "CROSS"
    return "INNER"


def _join_reasons(joins: list[exp.Join]) -> list[str]:
    """Why a join chain cannot be refreshed fast: every row of an outer-join view must hold a
    row of its first table (its *root*: LEFT joins after it, or one RIGHT join right after it)."""
    reasons, outer = [], False
    for i, join in enumerate(joins):
        side = join_side(join)
        if side == "FULL":
            reasons.append("FULL OUTER JOIN is not incrementally maintainable: no table is present in every row")
        elif side == "RIGHT" and i > 0:
            reasons.append("a RIGHT JOIN after the first join is not incrementally maintainable: "
                           "write the chain with LEFT JOINs")
        elif side == "CROSS" and outer:
            reasons.append("a comma or CROSS join after an outer join is not incrementally maintainable: "
                           "write it as JOIN … ON")
        outer = outer or side in ("LEFT", "RIGHT", "FULL")
    return reasons


def _function_name(node: exp.Expression) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.this).lower()
    return node.sql_name().lower() if isinstance(node, exp.Func) else ""


def analyze(query: str, catalog: rewrite.Catalog | None = None, output_names: list[str] | None = None) -> Analysis:
    """Classify a view query and list why it cannot be fast-refreshed, if it cannot.

    A query with CTEs, derived tables or subquery expressions is classified by what it is once
    they are merged (:mod:`mvlog.rewrite`), which needs the ``catalog`` of the tables it reads
    (as written -> resolved); without it such a query is complete-only, and its ``tables`` are
    every table it reads. ``output_names`` are the names PostgreSQL gives its columns."""
    tree = parse(query)
    if not isinstance(tree, exp.Query):
        raise ConfigError("the query must be a SELECT statement")
    not_null: set[tuple[str, str]] | None = None  # known once the query is qualified
    if catalog is not None and rewrite.needs_rewrite(tree):
        try:
            tree = rewrite.rewrite(tree, catalog, output_names)
        except rewrite.NotMergeable as exc:
            return Analysis(query, tree, ViewClass.OTHER, _basetable_refs(tree), [str(exc)])
        not_null = _not_null_columns(tree, catalog)
    if isinstance(tree, exp.SetOperation):
        return _analyze_set_operation(query, tree, not_null)
    return _analyze_select(query, tree, not_null)


def _not_null_columns(tree: exp.Expression, catalog: rewrite.Catalog) -> set[tuple[str, str]]:
    """(alias, column) of every NOT NULL column of the (qualified) query's tables."""
    tables: dict[tuple[str, str], TableInfo] = {(t.schema, t.name): t for t in catalog.values()}
    found = set()
    for table in tree.find_all(exp.Table):
        info = tables.get((identifier_name(table.args["db"]) if table.args.get("db") else None,
                           identifier_name(table.this) if isinstance(table.this, exp.Identifier) else ""))
        if info is not None:
            alias = identifier_name(table.args["alias"].this) if table.alias else info.name
            found |= {(alias, c.name) for c in info.columns if c.not_null}
    return found


def _union_all_branches(tree: exp.Expression) -> list[exp.Expression] | None:
    """The branches of a chain of UNION ALLs (None if it is another set operation)."""
    if isinstance(tree, exp.Subquery):
        return _union_all_branches(tree.this)
    if not isinstance(tree, exp.SetOperation):
        return [tree]
    if not isinstance(tree, exp.Union) or tree.args.get("distinct") or tree.args.get("with_"):
        return None
    left, right = _union_all_branches(tree.this), _union_all_branches(tree.expression)
    return None if left is None or right is None else left + right


def _analyze_set_operation(query: str, tree: exp.SetOperation, not_null: set[tuple[str, str]] | None) -> Analysis:
    """UNION ALL: each branch is a view of its own (a hidden branch number joins the view key)."""
    tables = _basetable_refs(tree)
    branches = _union_all_branches(tree)
    if branches is None:
        name = "UNION" if isinstance(tree, exp.Union) else type(tree).__name__.upper()
        return Analysis(query, tree, ViewClass.OTHER, tables,
                        [f"set operations ({name}) other than UNION ALL are not incrementally maintainable"])
    reasons = []
    if tree.args.get("limit") or tree.args.get("offset"):
        reasons.append("LIMIT/OFFSET is not incrementally maintainable")
    analyses = []
    for i, branch in enumerate(branches, 1):
        if not isinstance(branch, exp.Select):
            reasons.append(f"UNION ALL branch {i} is not a SELECT")
            continue
        analysis = _analyze_select(branch.sql(dialect=DIALECT), branch.copy(), not_null)
        reasons += [f"UNION ALL branch {i}: {reason}" for reason in analysis.reasons]
        analyses.append(analysis)
    return Analysis(query, tree, ViewClass.OTHER if reasons else ViewClass.UNION, tables, reasons,
                    [] if reasons else analyses)


def _analyze_select(query: str, tree: exp.Select, not_null: set[tuple[str, str]] | None = None) -> Analysis:
    reasons: list[str] = []
    assert isinstance(tree, exp.Select)
    tables = table_refs(tree)
    semi_joins: list[SemiJoin] = []

    if tree.args.get("with_") or tree.args.get("with"):
        reasons.append("common table expressions (WITH) are not incrementally maintainable")
    if not tree.args.get("from_"):
        reasons.append("a query without FROM has no base table to log")
    sources = ([tree.args["from_"].this] if tree.args.get("from_") else []) + [
        j.this for j in tree.args.get("joins") or []
    ]
    if any(not isinstance(s, exp.Table) or not isinstance(s.this, exp.Identifier) for s in sources):
        reasons.append("FROM items other than tables (subqueries, functions, VALUES) are not incrementally maintainable")
    reasons += _join_reasons(tree.args.get("joins") or [])
    distinct = tree.args.get("distinct")
    if distinct is not None and distinct.args.get("on") is not None:
        reasons.append("SELECT DISTINCT ON is not incrementally maintainable (it keeps an arbitrary row per value)")
    elif distinct is not None and tree.args.get("group"):
        reasons.append("SELECT DISTINCT over GROUP BY is not incrementally maintainable")
    elif distinct is not None and any(isinstance(s, exp.Star) or isinstance(s.this, exp.Star) for s in tree.selects):
        reasons.append("SELECT DISTINCT * is not incrementally maintainable: name the columns")
    if tree.args.get("limit") or tree.args.get("offset") or tree.args.get("fetch"):
        reasons.append("LIMIT/OFFSET is not incrementally maintainable")
    if any(tree.find_all(exp.Window)):
        reasons.append("window functions are not incrementally maintainable")
    if any(s is not tree for s in tree.find_all(exp.Select)):
        if not_null is None:  # not qualified: which table a column belongs to is unknown
            reasons.append("subqueries are not incrementally maintainable without the catalog's columns")
        elif not reasons:
            semi_joins, why = subquery_lineage(tree, tables, not_null)
            reasons += why
    for node in tree.find_all(exp.Func):
        if isinstance(node, VOLATILE_NODES) or _function_name(node) in VOLATILE_FUNCTIONS:
            reasons.append(f"the non-deterministic function {node.sql(DIALECT)} is not incrementally maintainable")
            break

    aggregate = bool(distinct) or bool(tree.args.get("group")) or bool(tree.args.get("having")) or any(
        node.find_ancestor(exp.Select) is tree for e in tree.selects for node in e.find_all(exp.AggFunc)
    )  # an aggregate in a scalar subquery does not make the view one
    joined = len(sources) > 1 or bool(semi_joins)
    if reasons:  # complete refresh only: it depends on every table it reads, wherever
        view_class = ViewClass.OTHER
        tables = _basetable_refs(tree)
    elif aggregate:
        view_class = ViewClass.AGGREGATE
    elif joined:
        view_class = ViewClass.JOIN
    else:
        view_class = ViewClass.SIMPLE
    if reasons:
        semi_joins = []
    return Analysis(query, tree, view_class, tables + [s.table for s in semi_joins], reasons, semi_joins=semi_joins)


def subquery_lineage(select: exp.Select, tables: list[TableRef], not_null: set[tuple[str, str]]
                     ) -> tuple[list[SemiJoin], list[str]]:
    """The table each subquery expression of ``select`` reads, and the condition that ties its
    rows to the FROM items' rows (or why a subquery cannot be keyed). Renames a subquery's alias
    that another table of the view already uses."""
    taken = {t.alias for t in tables}
    semi_joins, reasons = [], []
    for inner in [s for s in select.find_all(exp.Select) if s is not select]:
        if inner.find_ancestor(exp.Select) is not select:
            continue  # nested deeper: the enclosing subquery is refused below
        holder = inner.parent.parent if isinstance(inner.parent, exp.Subquery) else inner.parent
        if isinstance(inner.parent, exp.Subquery) and isinstance(holder, (exp.From, exp.Join)):
            continue  # a derived table: the FROM check gives its reason
        refs = table_refs(inner)
        if (len(refs) != 1 or inner.args.get("joins") or any(s is not inner for s in inner.find_all(exp.Select))
                or not isinstance(inner.args["from_"].this, exp.Table)):
            reasons.append("a subquery over more than one table, or over a subquery, is not incrementally maintainable")
            continue
        ref = refs[0]
        if ref.alias in taken:
            ref = _rename_subquery_alias(inner, ref, taken)
        taken.add(ref.alias)
        where = inner.args.get("where")
        conditions = [where.this.copy()] if where is not None else []
        null_sensitive = False
        if isinstance(holder, exp.In) and holder.args.get("query") is inner.parent:
            outer = holder.this.expressions if isinstance(holder.this, exp.Tuple) else [holder.this]
            values = [p.this if isinstance(p, exp.Alias) else p for p in inner.selects]
            if len(outer) != len(values):
                reasons.append("an IN subquery must return as many columns as it is compared with")
                continue
            if _positive(holder, select) or all(_not_null(e, not_null) for e in outer + values):
                conditions.insert(0, exp.and_(*[exp.EQ(this=v.copy(), expression=o.copy())
                                                for v, o in zip(values, outer)]))
            else:  # a NULL anywhere in the subquery's rows makes NOT IN NULL: all of them matter
                null_sensitive = True
        elif not isinstance(holder, exp.Exists) and not isinstance(inner.parent, exp.Subquery):
            reasons.append("subqueries other than EXISTS, IN and scalar subqueries are not incrementally maintainable")
            continue
        condition = exp.and_(*conditions) if conditions else None
        columns = list(condition.find_all(exp.Column)) if condition is not None else []
        outer_refs = [c for c in columns if identifier_name(c.args.get("table") or "") != ref.alias]
        if len(outer_refs) in (0, len(columns)):
            if null_sensitive:
                reasons.append(f"{holder.sql(DIALECT)[:80]} is not incrementally maintainable: under NOT or outside "
                               f"WHERE, IN depends on NULLs in all its subquery's rows; declare the compared columns "
                               f"NOT NULL or write (NOT) EXISTS")
            else:
                reasons.append("a subquery that does not relate its rows to the outer query's rows (an uncorrelated "
                               "subquery) is not incrementally maintainable: every view row would depend on every "
                               "row it reads")
            continue
        semi_joins.append(SemiJoin(ref, condition))
    return semi_joins, reasons


def _rename_subquery_alias(inner: exp.Select, ref: TableRef, taken: set[str]) -> TableRef:
    """Inside a subquery its own alias shadows the outer query's; in the lineage both are joined."""
    new = next(f"{ref.alias}_{i}" for i in range(2, 1000) if f"{ref.alias}_{i}" not in taken)
    table = inner.args["from_"].this
    table.set("alias", exp.TableAlias(this=exp.to_identifier(new, quoted=True)))
    for column in inner.find_all(exp.Column):
        if column.args.get("table") is not None and identifier_name(column.args["table"]) == ref.alias:
            column.set("table", exp.to_identifier(new, quoted=True))
    return TableRef(ref.schema, ref.name, new)


def _positive(node: exp.Expression, select: exp.Select) -> bool:
    """Whether ``node`` is reached from ``select``'s WHERE through AND, OR and parentheses only:
    there a NULL and a FALSE drop the row alike."""
    parent = node.parent
    while isinstance(parent, (exp.And, exp.Or, exp.Paren)):
        parent = parent.parent
    return isinstance(parent, exp.Where) and parent.parent is select


def _not_null(expression: exp.Expression, not_null: set[tuple[str, str]]) -> bool:
    if isinstance(expression, exp.Literal):
        return True
    return (isinstance(expression, exp.Column) and expression.args.get("table") is not None
            and (identifier_name(expression.args["table"]), identifier_name(expression.this)) in not_null)
